"""Algorithm conformance: the reference math, the comparison, and TRL's GRPOTrainer loss against them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.conformance.algorithms import (
    KL_COEF,
    Cell,
    Documented,
    compare_cell,
    golden_batch,
    problem_lines,
    reference,
    run_algorithms,
)

CALC = str(Path(__file__).resolve().parents[1] / "examples" / "calculator.yaml")


def test_reference_math_on_the_golden_batch() -> None:
    batch = golden_batch()
    grpo = reference("grpo", batch, 0.0)
    mask = batch.mask
    adv = [a[mask[i].index(1)] for i, a in enumerate(grpo["advantages"])]
    assert adv[:8] == [0.0] * 8  # all-equal and all-zero groups carry no signal
    mixed = [1.0, 0.0, 0.5, 0.0]  # (r - mean) / (unbiased std + 1e-6)
    std = (sum((r - 0.375) ** 2 for r in mixed) / 3) ** 0.5
    assert adv[8:] == pytest.approx([(r - 0.375) / (std + 1e-6) for r in mixed])
    rloo = reference("rloo", batch, 0.0)["advantages"]
    assert rloo[8][0] == pytest.approx(1.0 - 0.5 / 3)
    assert reference("dapo", batch, 0.0)["kept"] == [2] and grpo["kept"] == [0, 1, 2]
    assert grpo["kl"] == 0.0 and reference("grpo", batch, KL_COEF)["kl"] > 0
    assert reference("ppo", batch, KL_COEF)["kl"] == 0.0  # KL in the reward, not the loss
    assert 0 < grpo["clip_fraction"] < 1  # ratios inside and outside the clip range


def test_compare_names_the_quantity_and_separates_documented_differences() -> None:
    batch = golden_batch()
    want, kl = reference("grpo", batch, 0.0), reference("grpo", batch, KL_COEF)
    bad = {**want, "loss": want["loss"] + 0.01}
    cell = compare_cell("grpo", "b", {"grpo": bad, "grpo+kl": kl}, batch)
    assert cell.status == "✘" and problem_lines([cell]) == ["grpo b loss max|Δ|=0.01 (undocumented)"]
    pinned = {"loss": Documented("why", off=0.01, on=None)}
    documented = compare_cell("grpo", "b", {"grpo": bad, "grpo+kl": kl}, batch, pinned)
    assert documented.status == "≠"
    stale = compare_cell("grpo", "b", {"grpo": want, "grpo+kl": kl}, batch, pinned)
    assert stale.status == "✘" and stale.unexpected() == ["loss (documented, yet equal)"]
    assert compare_cell("grpo", "b", {"grpo": want, "grpo+kl": kl}, batch).status == "✔"
    assert isinstance(cell, Cell)


def test_trl_grpo_equals_the_reference_and_a_broken_mapping_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    (cell,) = run_algorithms("trl", ("grpo",))
    assert cell.status in ("✔", "≈") and set(cell.deltas) == {"advantages", "loss", "clip_fraction", "kl", "kept"}
    from agentbridge_trl import config

    monkeypatch.setitem(config.ALGORITHMS["grpo"], "loss_type", "bnpo")  # token mean instead of sequence mean
    (broken,) = run_algorithms("trl", ("grpo",))
    assert broken.status == "✘" and broken.unexpected() == ["loss"]
    assert [line.split(" max|Δ|=")[0] for line in problem_lines([broken])] == ["grpo trl loss"]


def test_cli_tables_and_exit_status(monkeypatch: pytest.MonkeyPatch) -> None:
    result = CliRunner().invoke(main, ["conformance", "--algorithms", "--backend", "trl"])
    assert result.exit_code == 0, result.output
    algorithms, recipe, steps = result.stdout.strip().split("\n\n")
    lines = algorithms.splitlines()
    assert lines[0].split() == ["algorithm", "trl"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows["grpo"][0] in ("✔", "≈") and rows["dapo"] == ["≠", "kept"] and rows["ppo"] == ["n/a"]
    recipe_rows = {line.rsplit(None, 1)[0].strip(): line.split()[-1] for line in recipe.splitlines()[1:]}
    assert recipe.splitlines()[0].split()[-1] == "trl" and "clip=0.1/0.3" in recipe_rows
    # TRL honours every recipe case but the KL estimators and KL in the reward, which its check refuses (n/a)
    refused = {label for label, status in recipe_rows.items() if status == "n/a"}
    assert refused == {label for label in recipe_rows if label.startswith(("kl_estimator", "kl_in"))}, recipe
    assert set(recipe_rows.values()) <= {"✔", "≈", "n/a"}, recipe
    head, trl = steps.splitlines()
    assert head.split() == ["step", "grpo", "result", "loss", "grad", "update"]
    assert trl.split()[0] == "trl" and trl.split()[1] in ("✔", "≈") and len(trl.split()) == 5
    from agentbridge_trl import config

    monkeypatch.setitem(config.ALGORITHMS["grpo"], "weight_decay", 0.1)  # only the optimizer step can see this
    broken = CliRunner().invoke(main, ["conformance", "--algorithms", "--backend", "trl"])
    assert broken.exit_code == 1, broken.output
    assert broken.stdout.strip().split("\n\n")[0] == algorithms.strip()  # the algorithm table is unchanged
    assert broken.stdout.strip().split("\n\n")[2].splitlines()[1].split()[:3] == ["trl", "✘", "update"]


def test_validate_warns_and_the_manifest_records_a_documented_difference(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["validate", CALC, "--backend", "trl", "--set", "algorithm.name=dapo"])
    assert result.exit_code == 0 and "algorithm dapo on trl: kept differs" in result.output
    out = CliRunner().invoke(main, ["compile", CALC, "--backend", "trl", "--set", "algorithm.name=dapo",
                                    "-o", str(tmp_path / "job")])
    assert out.exit_code == 0, out.output
    manifest = json.loads((tmp_path / "job" / "manifest.json").read_text())
    assert [line.split(":")[0] for line in manifest["algorithm_differences"]] == ["algorithm dapo on trl"]
    code = ("import sys; from agentbridge.cli import main\n"
            "try: main(['validate', sys.argv[1], '--backend', 'verl', '--set', 'algorithm.name=ppo'])\n"
            "except SystemExit: pass\n"
            "assert 'torch' not in sys.modules, 'validate imported torch'")
    subprocess.run([sys.executable, "-c", code, CALC], check=True, capture_output=True)

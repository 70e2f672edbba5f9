"""OpenRLHF's KL loss is a token mean whatever the policy loss's aggregation: a documented difference for grpo
(≠ kl in the algorithm table), warned by validate and recorded in the job manifest, with KL on only."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.conformance.algorithms import problem_lines, run_algorithms

CALC = "examples/calculator.yaml"
GRPO_KL = ["--set", "algorithm.name=grpo", "--set", "algorithm.kl_coef=0.05"]


def test_grpo_kl_is_a_documented_difference() -> None:
    (cell,) = run_algorithms("openrlhf", ("grpo",))
    assert cell.status == "≠" and cell.differing() == ["kl"], problem_lines([cell])
    assert 1e-5 < cell.deltas["kl"] <= 1e-3 and cell.deltas["loss"] <= 1e-5  # below the tolerance, yet documented
    assert problem_lines([cell])[0].startswith("grpo openrlhf kl max|Δ|=") and "(documented: token-mean" in \
        problem_lines([cell])[0]


def test_validate_warns_and_the_manifest_records_the_kl_aggregation(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["validate", CALC, "--backend", "openrlhf", *GRPO_KL])
    assert result.exit_code == 0, result.output
    assert "algorithm grpo on openrlhf: kl differs from agentbridge's reference: token-mean" in result.output
    out = CliRunner().invoke(main, ["compile", CALC, "--backend", "openrlhf", *GRPO_KL, "-o", str(tmp_path / "j")])
    assert out.exit_code == 0, out.output
    manifest = json.loads((tmp_path / "j" / "manifest.json").read_text())
    assert [line.split(":")[0:2] for line in manifest["algorithm_differences"]] == \
        [["algorithm grpo on openrlhf", " kl differs from agentbridge's reference"]]
    no_kl = CliRunner().invoke(main, ["validate", CALC, "--backend", "openrlhf", "--set", "algorithm.name=grpo"])
    assert no_kl.exit_code == 0 and "differs from agentbridge's reference" not in no_kl.output  # KL off


def test_the_recipe_row_equals_the_reference_or_is_refused() -> None:
    """Each recipe knob (grpo) through OpenRLHF's advantage, KL and PolicyLoss code as the compiled job's argv
    configures it: the reference (the token IS cases with PolicyLoss fed the batch's rollout_logp), a pinned
    difference (the KL loss's token mean; KL in the reward placed per token after the group normalisation), or
    refused at check (no seq-mean-token-sum(-norm) loss_agg_mode, no batch std, no sequence-level IS weight)."""
    from agentbridge.conformance.algorithms import RECIPE_CASES

    cells = {c.algorithm.split("@")[1]: c for c in run_algorithms("openrlhf", (), recipe=tuple(RECIPE_CASES))}
    lines = problem_lines(list(cells.values()))
    assert list(cells) == list(RECIPE_CASES)
    assert {case: c.status for case, c in cells.items()} == {
        "clip_higher": "✔", "dual_clip": "✔", "token_mean": "✔", "seq_mean_token_sum": "n/a",
        "seq_mean_token_sum_norm": "n/a", "scale_none": "✔", "scale_batch": "n/a", "kl_k1": "≠", "kl_k2": "≠",
        "kl_in_reward": "≠", "is_token_truncate": "✔", "is_token_mask": "✔", "is_sequence_truncate": "n/a",
        "is_sequence_mask": "n/a"}, lines
    assert cells["kl_k1"].differing() == ["kl"] and cells["kl_k2"].differing() == ["kl"], lines
    assert cells["kl_in_reward"].differing() == ["advantages"] and cells["kl_in_reward"].deltas["kl"] == 0.0, lines
    for case in ("seq_mean_token_sum", "seq_mean_token_sum_norm", "scale_batch", "is_sequence_truncate",
                 "is_sequence_mask"):
        assert cells[case].status == "n/a" and cells[case].why.startswith("algorithm.") and \
            "openrlhf cannot run grpo with " in cells[case].why, case

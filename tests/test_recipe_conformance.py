"""The recipe axis of the algorithm conformance: the golden batch with each recipe knob (clip-higher, dual-clip, the
loss aggregations, advantage scaling, the KL estimator and placement, the importance-sampling correction) away from
its default, through TRL's own code configured by the compiled job, against the reference math extended by the knob;
a knob TRL's check refuses (k1, k2, KL in the reward) is n/a with its line; a mapping broken on purpose is a ✘ naming
the cell, and ``conformance --algorithms`` exits 1. The other backends' recipe rows are checked in their own suites
(adapters/*/tests/test_algorithm*.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.conformance.algorithms import (
    ALGORITHMS,
    CLOSE,
    IDENTICAL,
    KL_COEF,
    RECIPE_CASES,
    Recipe,
    compare_cell,
    declared_differences,
    golden_algorithm_spec,
    golden_batch,
    problem_lines,
    recipe_of_case,
    recipe_table,
    recipe_variant,
    reference,
    run_algorithms,
)
from agentbridge.conformance.suite import _backend


def test_each_recipe_knob_moves_the_reference_beyond_the_tolerance() -> None:
    """Every case bites on the golden batch: a backend that ignored the knob would be a ✘, not a ≈."""
    batch = golden_batch()
    for case in RECIPE_CASES:
        knobs = recipe_of_case(case)
        assert knobs != Recipe(), case
        base = reference("grpo", batch, knobs.kl_coef)  # the preset at the case's KL: k3 in the loss
        moved = reference("grpo", batch, knobs.kl_coef, knobs)
        deltas = [abs(moved["loss"] - base["loss"]), abs(moved["kl"] - base["kl"])]
        deltas += [abs(a - b) for ra, rb in zip(moved["advantages"], base["advantages"], strict=True)
                   for a, b in zip(ra, rb, strict=True)]
        assert max(deltas) > CLOSE, case


def test_dual_clip_caps_the_loss_of_the_negative_advantage_tokens_past_it() -> None:
    import torch

    batch = golden_batch()
    t = batch.tensors(dtype=torch.float64)
    ratio = (t["logp"] - t["old_logp"]).exp()
    assert float(ratio.max()) < 1.57  # the golden ratios: a dual constant of 1.57 or more (veRL's 3.0) never bites
    adv = reference("grpo", batch, 0.0)["advantages"]
    past = [(i, k) for i in range(12) for k in range(8) if adv[i][k] < 0 and float(ratio[i, k]) > 1.25
            and batch.mask[i][k]]
    assert past == [(11, 0), (11, 2)]
    assert recipe_of_case("dual_clip") == Recipe(dual=1.25)
    capped = reference("grpo", batch, 0.0, Recipe(dual=1.25))
    base = reference("grpo", batch, 0.0)
    # response 11 (6 tokens, 1 of 12 sequences): its two tokens' losses capped at -A x 1.25
    a = adv[11][0]
    want = sum(-a * (float(ratio[11, k]) - 1.25) for k in (0, 2)) / 6 / 12
    assert base["loss"] - capped["loss"] == pytest.approx(want)
    assert capped["clip_fraction"] == base["clip_fraction"]  # the clip indicator stays the ratio clip's


def test_unset_recipe_keeps_every_algorithms_reference() -> None:
    batch = golden_batch()
    for name in ALGORITHMS:
        spec = golden_algorithm_spec(name, "trl", KL_COEF)
        assert Recipe.of(spec.algorithm) == Recipe(kl_coef=KL_COEF)
        assert reference(name, batch, KL_COEF, Recipe.of(spec.algorithm)) == reference(name, batch, KL_COEF)


def test_recipe_pins_hold_at_their_value_and_fail_when_they_move() -> None:
    """Each backend's pinned recipe differences, fed a backend output at the pin (reference + pin on one entry),
    pass; ten times the pin fails naming the cell; a recipe cell is one variant: KL on (the ``on`` pin) for the
    cases with a KL coefficient, KL off for the others."""
    batch = golden_batch()
    checked = 0
    for backend in ("trl", "openrlhf", "verl", "rlinf", "roll"):
        try:
            b = _backend(backend)
        except Exception:  # noqa: BLE001 - an adapter not installed here
            continue
        for case in RECIPE_CASES:
            name = recipe_variant("grpo", case)
            knobs = recipe_of_case(case)
            kl = knobs.kl_coef > 0
            for quantity, pin in declared_differences(b, name).items():
                assert pin.pin(kl) is not None and pin.pin(not kl) is None, (backend, name, quantity)
                want = reference("grpo", batch, knobs.kl_coef, knobs)
                at_pin, ten_times = copy.deepcopy(want), copy.deepcopy(want)
                _shift(at_pin, quantity, pin.pin(kl))
                _shift(ten_times, quantity, 10 * pin.pin(kl))
                declared = {quantity: pin}
                assert compare_cell(name, backend, {name: at_pin}, batch, declared, recipe=knobs).status == "≠", \
                    (backend, name, quantity)
                bent = compare_cell(name, backend, {name: ten_times}, batch, declared, recipe=knobs)
                assert bent.unexpected() == [f"{quantity} (pinned difference moved)"], (backend, name)
                assert any(line.startswith(f"{name} {backend} {quantity} max|Δ|=") for line in problem_lines([bent]))
                checked += 1
    assert checked >= 5


def _shift(quantities: dict[str, Any], quantity: str, by: float) -> None:
    """Move one entry of ``quantities[quantity]`` (a number, or the first action token's of per-token advantages)
    by ``by``: its max |Δ| from the reference is then ``by``."""
    if isinstance(quantities[quantity], list):
        quantities[quantity][0][0] += by
    else:
        quantities[quantity] += by


@pytest.fixture(scope="module")
def trl_row(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """TRL's recipe row (one compile and probe per case; shared by the module's tests)."""
    return run_algorithms("trl", (), tmp_path_factory.mktemp("trl-recipe"), recipe=tuple(RECIPE_CASES))


# the recipe cases TRL's check refuses, and a word of each refusal line (TrlBackend.recipe_why_not)
TRL_REFUSED = {"kl_k1": "k3 in the loss", "kl_k2": "k3 in the loss", "kl_in_reward": "k3 in the loss"}


def test_trls_recipe_row_equals_the_reference(trl_row: list[Any]) -> None:
    cells = {c.algorithm: c for c in trl_row}
    assert list(cells) == [recipe_variant("grpo", case) for case in RECIPE_CASES]
    refused = {c.algorithm.split("@")[1]: c.why for c in trl_row if c.status == "n/a"}
    assert set(refused) == set(TRL_REFUSED)
    for case, word in TRL_REFUSED.items():
        assert refused[case].startswith("algorithm.kl_estimator: trl cannot run grpo") and word in refused[case]
    assert not [c for c in trl_row if c.status not in ("✔", "≈", "n/a")], problem_lines(trl_row)
    for c in trl_row:
        if c.status != "n/a":
            assert set(c.deltas) == {"advantages", "loss", "clip_fraction", "kl", "kept"}
            assert set(c.variants) == {"on" if recipe_of_case(c.algorithm.split("@")[1]).kl_coef > 0 else "off"}
    table = recipe_table(trl_row, ["trl"]).splitlines()
    assert table[0].split() == ["recipe", "(grpo)", "trl"]
    assert [line.rsplit(None, 1)[0].strip() for line in table[1:]] == [label for label, _ in RECIPE_CASES.values()]


def test_trls_is_cells_run_trls_own_correction(trl_row: list[Any]) -> None:
    """Each importance-sampling cell equals the reference with the weights, and the reference without them is
    beyond the tolerance: the cell is ✔/≈ only because TRL weighted the loss as the knob says."""
    batch = golden_batch()
    cells = {c.algorithm: c for c in trl_row}
    for case in ("is_token_truncate", "is_token_mask", "is_sequence_truncate", "is_sequence_mask"):
        knobs = recipe_of_case(case)
        assert knobs.is_correction is not None and knobs.is_correction[2] == 2.0
        cell = cells[recipe_variant("grpo", case)]
        assert cell.status in ("✔", "≈") and cell.deltas["loss"] <= IDENTICAL, problem_lines([cell])
        unweighted = reference("grpo", batch, 0.0, Recipe(kl_coef=knobs.kl_coef))["loss"]
        assert abs(unweighted - reference("grpo", batch, 0.0, knobs)["loss"]) > CLOSE, case


def _without(key: str) -> Any:
    from agentbridge_trl import config

    real = config.recipe_kwargs

    def broken(spec: Any) -> dict[str, Any]:
        return {k: v for k, v in real(spec).items() if k != key}

    return broken


@pytest.mark.parametrize("case, key, quantities", [
    ("clip_higher", "epsilon_high", ["loss", "clip_fraction"]),  # clip high not written: TRL clips at (0.1, 0.1)
    ("dual_clip", "delta", ["loss"]),                            # dual-clip not written
    ("token_mean", "loss_type", ["loss"]),                       # the preset's aggregation stays
    ("is_token_truncate", "vllm_importance_sampling_mode", ["loss"]),  # TRL's default mode: sequence_mask
    ("is_sequence_mask", "vllm_importance_sampling_clip_max", ["loss"]),  # TRL's default cap: 3.0
])
def test_a_broken_trl_mapping_is_a_cell_naming_the_knob(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, case: str,
                                                      key: str, quantities: list[str]) -> None:
    from agentbridge_trl import config

    monkeypatch.setattr(config, "recipe_kwargs", _without(key))
    (cell,) = run_algorithms("trl", (), tmp_path, recipe=(case,))
    assert cell.status == "✘" and cell.unexpected() == quantities, problem_lines([cell])
    assert [line.split(" max|Δ|=")[0] for line in problem_lines([cell])] == \
        [f"grpo@{case} trl {q}" for q in quantities]


def test_the_cli_prints_the_recipe_table_and_exits_1_on_a_broken_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbridge.conformance import algorithms, step
    from agentbridge_trl import config

    monkeypatch.setattr(step, "run_step", lambda name, workdir=None: step.StepCell(name, "✔", {"loss": 0.0}))
    real = algorithms.run_algorithms
    monkeypatch.setattr(algorithms, "run_algorithms",  # the recipe cases only, two of them: compile is the cost
                        lambda name, workdir=None, recipe=(): real(name, (), workdir, ("clip_higher", "token_mean")))
    ok = CliRunner().invoke(main, ["conformance", "--algorithms", "--backend", "trl"])
    assert ok.exit_code == 0, ok.output
    recipe = ok.stdout.strip().split("\n\n")[1].splitlines()
    assert recipe[0].split()[-1] == "trl" and recipe[0].startswith("recipe (grpo)")
    statuses = {line.split()[0]: line.split()[1:] for line in recipe[1:]}
    assert statuses["clip=0.1/0.3"][0] in ("✔", "≈") and statuses["loss_agg=token_mean"][0] in ("✔", "≈")
    monkeypatch.setattr(config, "recipe_kwargs", _without("epsilon_high"))
    broken = CliRunner().invoke(main, ["conformance", "--algorithms", "--backend", "trl"])
    assert broken.exit_code == 1, broken.output
    rows = {line.split()[0]: line.split(None, 1)[1] for line in broken.stdout.strip().split("\n\n")[1].splitlines()}
    assert rows["clip=0.1/0.3"] == "✘ loss,clip_fraction" and rows["loss_agg=token_mean"] in ("✔", "≈")
    assert "difference: grpo@clip_higher trl loss max|Δ|=" in broken.stderr

"""RLinf's training math on the golden batch (agentbridge's algorithm conformance), where RLinf imports: RLinf's
registered advantages and actor loss, configured as each compiled job configures them, equal agentbridge's reference,
or the difference is one the adapter documents (``DIFFERENCES``)."""

from __future__ import annotations

from pathlib import Path

from conftest import needs_rlinf

from agentbridge.conformance.algorithms import (
    IDENTICAL,
    KL_COEF,
    golden_algorithm_spec,
    golden_batch,
    max_delta,
    problem_lines,
    reference,
    run_algorithms,
)
from agentbridge.conformance.suite import golden_spec
from agentbridge_rlinf.backend import RlinfBackend

pytestmark = needs_rlinf


def test_rlinfs_math_equals_the_reference_or_says_why() -> None:
    cells = {c.algorithm: c for c in run_algorithms("rlinf")}
    assert not [c for c in cells.values() if c.status == "✘"], problem_lines(list(cells.values()))
    assert {a for a, c in cells.items() if c.status == "≠"} == {"grpo", "dapo", "reinforce_pp"}
    # grpo differs only in the KL term's direction (and its logged clip fraction, per micro-batch): its advantages
    # and clipped loss are the reference's
    assert cells["grpo"].differing() == ["clip_fraction", "kl"]
    assert cells["grpo"].deltas["advantages"] <= IDENTICAL and cells["grpo"].deltas["loss"] <= IDENTICAL
    assert cells["dapo"].deltas["advantages"] <= IDENTICAL  # grpo advantages; clip-higher leaves them alone
    assert {a for a, c in cells.items() if c.status == "n/a"} == {"dr_grpo", "gspo", "rloo", "ppo"}
    assert "backends that can" in cells["rloo"].why


def test_reinforce_pp_advantages_differ_only_with_kl_on(tmp_path: Path) -> None:
    from agentbridge_rlinf.algorithm_probe import probe

    backend, batch = RlinfBackend(), golden_batch()
    for coef in (0.0, KL_COEF):
        job = backend.compile(golden_algorithm_spec("reinforce_pp", "rlinf", coef), tmp_path / str(coef)).path
        delta = max_delta(reference("reinforce_pp", batch, coef)["advantages"], probe(job, batch)["advantages"])
        assert (delta <= IDENTICAL) == (coef == 0.0), (coef, delta)


def test_token_mean_matches_when_one_micro_batch_holds_the_step(tmp_path: Path) -> None:
    """The documented dapo / reinforce_pp loss difference is RLinf's per-micro-batch token mean: with the whole
    golden batch in one micro-batch, RLinf's loss is the reference's."""
    from agentbridge_rlinf.algorithm_probe import probe

    backend, batch = RlinfBackend(), golden_batch()
    for name in ("dapo", "reinforce_pp"):
        sets = ["backend.name=rlinf", f"algorithm.name={name}", "algorithm.group_size=4", "algorithm.kl_coef=0.0"]
        whole = backend.compile(golden_spec("text", [*sets, "backend.options.micro_batch_size=12"]),
                                tmp_path / f"{name}-whole").path
        per_seq = backend.compile(golden_spec("text", sets), tmp_path / name).path
        want = reference(name, batch, 0.0)["loss"]
        assert abs(probe(whole, batch)["loss"] - want) <= IDENTICAL
        assert abs(probe(per_seq, batch)["loss"] - want) > IDENTICAL


def test_documented_differences_reach_the_job_manifest(tmp_path: Path) -> None:
    from agentbridge.conformance.algorithms import difference_lines, job_differences

    backend = RlinfBackend()
    job = backend.compile(golden_algorithm_spec("dapo", "rlinf", 0.0), tmp_path / "dapo")
    lines = job_differences(job)
    assert any("kept differs" in line for line in lines) and not any(" kl " in line for line in lines)
    assert any(" kl differs" in line for line in difference_lines(backend, "grpo", KL_COEF))
    assert difference_lines(backend, "grpo", 0.0) == []


def test_the_recipe_row_equals_the_reference_or_says_why() -> None:
    """Each recipe knob (grpo, KL off) through RLinf's advantages and policy_loss as the compiled job configures
    them: the reference's loss, except token_mean (per micro-batch); the logged clip fraction per micro-batch
    (pinned); loss_agg seq_mean_token_sum_norm and scale_advantages none / batch refused at check."""
    from agentbridge.conformance.algorithms import RECIPE_CASES

    cells = {c.algorithm.split("@")[1]: c for c in run_algorithms("rlinf", (), recipe=tuple(RECIPE_CASES))}
    assert list(cells) == list(RECIPE_CASES)
    assert not [c for c in cells.values() if c.status == "✘"], problem_lines(list(cells.values()))
    assert {case: c.differing() for case, c in cells.items() if c.status == "≠"} == {
        "clip_higher": ["clip_fraction"], "dual_clip": ["clip_fraction"], "token_mean": ["loss", "clip_fraction"],
        "seq_mean_token_sum": ["clip_fraction"]}
    assert all(cells[case].deltas["loss"] <= IDENTICAL for case in ("clip_higher", "dual_clip", "seq_mean_token_sum"))
    for case in ("seq_mean_token_sum_norm", "scale_none", "scale_batch"):
        assert cells[case].status == "n/a" and "rlinf cannot run grpo with " in cells[case].why, case

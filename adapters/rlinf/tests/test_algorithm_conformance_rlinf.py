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
    assert "backends that can" in cells["rloo"].why or "no installed backend can" in cells["rloo"].why


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
    """Each recipe knob (grpo) through RLinf's advantages, its actor's IS fix and policy_loss and its KL loss as the
    compiled job configures them: the reference's loss, except token_mean (per micro-batch); the reference's KL term
    with k2; the logged clip fraction per micro-batch (pinned); the knobs RLinf 0.3.0 has no setting for refused at
    check (seq_mean_token_sum_norm, scale_advantages none / batch, k1 in the FSDP actor's loss, KL in the grpo
    reward, IS correction other than token truncate)."""
    from agentbridge.conformance.algorithms import RECIPE_CASES

    cells = {c.algorithm.split("@")[1]: c for c in run_algorithms("rlinf", (), recipe=tuple(RECIPE_CASES))}
    assert list(cells) == list(RECIPE_CASES)
    assert not [c for c in cells.values() if c.status == "✘"], problem_lines(list(cells.values()))
    assert {case: c.differing() for case, c in cells.items() if c.status == "≠"} == {
        "clip_higher": ["clip_fraction"], "dual_clip": ["clip_fraction"], "token_mean": ["loss", "clip_fraction"],
        "seq_mean_token_sum": ["clip_fraction"], "kl_k2": ["clip_fraction"], "is_token_truncate": ["clip_fraction"]}
    assert all(cells[case].deltas["loss"] <= IDENTICAL for case in ("clip_higher", "dual_clip", "seq_mean_token_sum",
                                                                    "kl_k2", "is_token_truncate"))
    assert cells["kl_k2"].deltas["kl"] <= IDENTICAL and cells["kl_k2"].deltas["advantages"] <= IDENTICAL
    refused = {"seq_mean_token_sum_norm", "scale_none", "scale_batch", "kl_k1", "kl_in_reward", "is_token_mask",
               "is_sequence_truncate", "is_sequence_mask"}
    assert {case for case, c in cells.items() if c.status == "n/a"} == refused
    for case in refused:
        assert "rlinf cannot run grpo with " in cells[case].why, case


def _recipe_job(tmp_path: Path, case: str, edit: dict[str, object] | None = None) -> Path:
    """The recipe case's RLinf job, its ``algorithm`` keys then set to ``edit`` (a mapping broken on purpose)."""
    import yaml

    from agentbridge.conformance.algorithms import RECIPE_CASES

    job = RlinfBackend().compile(golden_algorithm_spec("grpo", "rlinf", 0.0, RECIPE_CASES[case][1]),
                                 tmp_path / case).path
    if edit:
        path = job / "rlinf_job.yaml"
        config = yaml.safe_load(path.read_text())
        config["algorithm"].update(edit)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
    return job


def test_the_recipe_cells_follow_the_compiled_keys(tmp_path: Path) -> None:
    """The probe reads the knobs from the job: with RLinf's key broken on purpose the cell's quantity leaves the
    reference (k2 as low_var_kl: its KL term; no importance_sampling_fix, or another clip: its loss)."""
    from agentbridge.conformance.algorithms import CLOSE, recipe_of_case
    from agentbridge_rlinf.algorithm_probe import probe

    batch = golden_batch()

    def delta(case: str, quantity: str, edit: dict[str, object] | None = None) -> float:
        knobs = recipe_of_case(case, "rlinf")
        want = reference("grpo", batch, knobs.kl_coef, knobs)[quantity]
        return max_delta(want, probe(_recipe_job(tmp_path / str(len(str(edit))), case, edit), batch)[quantity])

    assert delta("kl_k2", "kl") <= IDENTICAL < CLOSE < delta("kl_k2", "kl", {"kl_penalty_type": "low_var_kl"})
    assert delta("is_token_truncate", "loss") <= IDENTICAL
    assert delta("is_token_truncate", "loss", {"importance_sampling_fix": False}) > CLOSE
    assert delta("is_token_truncate", "loss", {"importance_sampling_clip": 100.0}) > CLOSE


def test_the_probe_repeats_what_rlinfs_actor_holds() -> None:
    """The probe repeats FSDPActor.training_step's IS fix and KL-loss lines (the actor module does not import
    without transformers 4 and accelerate): the installed RLinf holds each of them."""
    from agentbridge_rlinf.algorithm_probe import ACTOR_LINES, actor_source_problems

    assert actor_source_problems() == [] and len(ACTOR_LINES) == 8

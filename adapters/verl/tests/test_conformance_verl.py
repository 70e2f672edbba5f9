"""veRL passes the conformance suite (through the pytest plugin) on both trainer paths, and the suite fails when
either is broken."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

import agentbridge_verl.rollout as verl_loop
from agentbridge.conformance import run_suite
from agentbridge.conformance.golden import cases
from agentbridge.conformance.pytest_plugin import conformance_tests, suite_result
from agentbridge.conformance.suite import ConformanceError
from agentbridge_verl.conformance import golden_records
from agentbridge_verl.inprocess_v1 import WorkerTQ

test_verl_conforms = conformance_tests("verl")


def test_the_suite_fails_on_a_mask_off_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deliberately broken adapter: the response mask the agent loop hands veRL is shifted by one token."""
    honest = verl_loop.to_output

    def off_by_one(*args: Any, **kwargs: Any) -> Any:
        out = honest(*args, **kwargs)
        out.response_mask = [1, *out.response_mask[:-1]]
        return out

    monkeypatch.setattr(verl_loop, "to_output", off_by_one)
    (result,) = run_suite("verl", ("text",))
    assert not result.ok
    assert all(": response_mask differs at " in line for line in result.problems), result.problems
    assert {case for case, fields in result.case_fields().items() if fields} == set(cases("text"))
    assert all(fields == ["response_mask", "response_mask"] for fields in result.case_fields().values())


def reward_plus_one(honest: Any) -> Any:
    """``_agent_loop_postprocess`` of one worker class with each episode's reward raised by one."""

    async def postprocess(self: Any, output: Any, *args: Any, **kwargs: Any) -> Any:
        output.reward_score += 1.0
        return await honest(self, output, *args, **kwargs)

    return postprocess


def test_a_v1_path_that_differs_from_the_driver_fails_per_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job launches veRL's V1 trainer: its records are the ones the suite compares, case by case."""
    monkeypatch.setattr(WorkerTQ, "_agent_loop_postprocess", reward_plus_one(WorkerTQ._agent_loop_postprocess))
    (result,) = run_suite("verl", ("vlm",))
    moved = "token_rewards differs at 54 of 55 (driver 1.35, backend 2.34999990463"  # on the last token, float32
    assert [p.split("]: ")[0] for p in result.problems] == [f"verl: case image[{i}" for i in (0, 0, 1, 1)]
    assert result.problems[0::2] == [f"verl: case image[{i}]: reward is 2.35, the driver's is 1.35" for i in range(2)]
    assert all(moved in p for p in result.problems[1::2])


def test_a_legacy_path_that_differs_from_the_driver_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The legacy trainer (trainer.use_v1=false, still selectable) must give the V1 trainer's records."""
    monkeypatch.setattr(AgentLoopWorker, "_agent_loop_postprocess",
                        reward_plus_one(AgentLoopWorker._agent_loop_postprocess))
    (result,) = run_suite("verl", ("vlm",))
    [problem] = result.problems
    legacy = "veRL's legacy trainer (trainer.use_v1=false)"
    assert problem.startswith("the job runs veRL's V1 trainer (trainer.use_v1=true), but its other path differs "
                              f"from the driver: {legacy}: case image[0]: reward is 2.35, the driver's is 1.35; ")
    parts = problem.split("; ")
    assert len(parts) == 4 and parts[2] == f"{legacy}: case image[1]: reward is 2.35, the driver's is 1.35"
    assert [p.count("token_rewards differs at 54 of 55") for p in parts] == [0, 1, 0, 1]


def test_a_job_on_the_legacy_path_is_conformance_checked_on_it(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """With trainer.use_v1=false the legacy trainer's records are returned, and the V1 trainer's must agree."""
    import agentbridge_verl.inprocess as inprocess

    compose = inprocess.compose_worker_config

    def legacy_job(job_dir: Path) -> Any:
        cfg = compose(job_dir)
        cfg.trainer.use_v1 = False
        return cfg

    monkeypatch.setattr(inprocess, "compose_worker_config", legacy_job)
    monkeypatch.setattr(AgentLoopWorker, "_agent_loop_postprocess",
                        reward_plus_one(AgentLoopWorker._agent_loop_postprocess))
    rewards = [r.reward for r in golden_records("vlm", tmp_path / "a")]  # legacy's: the suite compares them
    assert rewards == pytest.approx([2.35, 2.35])
    monkeypatch.undo()
    monkeypatch.setattr(inprocess, "compose_worker_config", legacy_job)
    monkeypatch.setattr(WorkerTQ, "_agent_loop_postprocess", reward_plus_one(WorkerTQ._agent_loop_postprocess))
    with pytest.raises(ConformanceError, match=r"runs veRL's legacy trainer \(trainer.use_v1=false\), but its "
                       r"other path differs .*veRL's V1 trainer \(trainer.use_v1=true\): case image\[0\]: reward"):
        golden_records("vlm", tmp_path / "b")


@pytest.mark.parametrize("path", ["V1", "legacy"])
def test_pixels_that_are_not_the_handed_images_fail_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            path: str) -> None:
    """veRL's worker (of one trainer path) processes other pixels than the images the agent loop handed it: the run
    stops, naming the row (the digests alone come from the handed images and could not show it)."""
    from PIL import ImageOps

    honest = AgentLoopWorker._compute_multi_modal_inputs

    def inverted(self: Any, output: Any, input_ids: Any) -> Any:
        images = (output.multi_modal_data or {}).get("images")
        if not images or isinstance(self, WorkerTQ) != (path == "V1"):
            return honest(self, output, input_ids)
        other = [ImageOps.invert(images[0].convert("RGB")), *images[1:]]
        return honest(self, output.model_copy(update={"multi_modal_data": {"images": other}}), input_ids)

    monkeypatch.setattr(AgentLoopWorker, "_compute_multi_modal_inputs", inverted)
    where = "veRL V1 trajectory 0" if path == "V1" else "veRL batch row 0"
    with pytest.raises(ConformanceError, match=rf"{where} \(case image\): the batch's pixel_values"):
        golden_records("vlm", tmp_path)


def test_turn_credit_off_the_turn_ends_fails_per_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """The credit kind: each turn's process reward must reach veRL's rm_scores on the turn's last token. An agent
    loop that hands veRL the episode's sum on the last token instead (as veRL does by default) fails every case
    with per-turn rewards, naming the first misplaced token; the sums still agree."""
    monkeypatch.setattr(verl_loop.TurnCreditOutput, "as_dict", verl_loop.AgentLoopOutput.as_dict)
    (result,) = run_suite("verl", ("credit",))
    assert result.problems and all(": token_rewards differs at " in line for line in result.problems), result.problems
    failing = {case for case, fields in result.case_fields().items() if fields}
    assert failing == {"tools", "tool_error", "truncation", "reward_error", "max_turns"}  # a tool call in a turn
    assert not any(" reward is " in line for line in result.problems)


def test_turn_credit_reaches_verls_returns_turn_by_turn() -> None:
    """What the credit kind's rm_scores do in veRL's own math: REINFORCE++'s returns (``core_algos``, gamma 1) on
    each turn's tokens are what is still to be earned from that turn on, where one reward on the last token would
    give every token the episode's total. (The records are the plugin's credit run above, not a run of their own.)"""
    import torch
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.core_algos import compute_reinforce_plus_plus_outcome_advantage

    record = next(r for r in suite_result("verl", "credit").records if r.case == "tools" and not r.job)
    mask = torch.tensor([record.response_mask], dtype=torch.float32)
    _, returns = compute_reinforce_plus_plus_outcome_advantage(torch.tensor([record.token_rewards]), mask,
                                                               config=AlgoConfig(gamma=1.0))
    # per trained turn (runs of mask 1): add (0.5), add (0.5), answer (exact 1 + format 0.1 + fragile 0.5 + 0.25)
    runs, prev = [], 0
    for value, m in zip(returns[0].tolist(), record.response_mask, strict=True):
        if m and not prev:
            runs.append(set())
        if m:
            runs[-1].add(round(value, 4))
        prev = m
    assert runs == [{2.85}, {2.35}, {1.85}] and record.reward == pytest.approx(2.85)

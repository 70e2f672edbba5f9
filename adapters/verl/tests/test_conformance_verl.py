"""veRL passes the conformance suite (through the pytest plugin), and the suite fails when the adapter is broken."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

import agentbridge_verl.agent_loop as verl_loop
from agentbridge.conformance import run_suite
from agentbridge.conformance.pytest_plugin import conformance_tests
from agentbridge.conformance.suite import ConformanceError
from agentbridge_verl.conformance import golden_records, reward_position

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
    assert {case for case, fields in result.case_fields().items() if fields} == {"tools", "tool_error",
                                                                                 "parse_error", "truncation"}
    assert all(fields == ["response_mask", "response_mask"] for fields in result.case_fields().values())


def test_pixels_that_are_not_the_handed_images_fail_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """veRL's worker processes other pixels than the images the agent loop handed it: the run stops, naming the row
    (the digests alone come from the handed images and could not show it)."""
    from PIL import ImageOps

    honest = AgentLoopWorker._compute_multi_modal_inputs

    def inverted(self: Any, output: Any, input_ids: Any) -> Any:
        images = (output.multi_modal_data or {}).get("images")
        if not images:
            return honest(self, output, input_ids)
        other = [ImageOps.invert(images[0].convert("RGB")), *images[1:]]
        return honest(self, output.model_copy(update={"multi_modal_data": {"images": other}}), input_ids)

    monkeypatch.setattr(AgentLoopWorker, "_compute_multi_modal_inputs", inverted)
    with pytest.raises(ConformanceError, match=r"veRL batch row 0 \(case image\): the batch's pixel_values"):
        golden_records("vlm", tmp_path)


def test_a_reward_off_the_last_response_token_fails_the_run() -> None:
    """A summed reward cannot show where it sits; the veRL side checks that it is on the last response token."""
    import torch

    scores = torch.zeros(8)
    reward_position(0, "tools", scores, 5)  # no reward: nothing to place
    scores[4] = 1.25
    reward_position(0, "tools", scores, 5)
    with pytest.raises(ConformanceError, match=r"row 3 \(case tools\): the reward sits on response token\(s\) 3, "
                       r"not on the last one \(4\)"):
        reward_position(3, "tools", scores.roll(-1), 5)

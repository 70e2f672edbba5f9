"""OpenRLHF passes the conformance suite (through the pytest plugin), and the suite fails when the path is broken.

Both kinds run in this process (OpenRLHF imports here): ``agentbridge_openrlhf.conformance.golden_records`` on
OpenRLHF's own rollout path, each on a local Ray cluster of its own.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from agentbridge.conformance import reference_records, run_suite
from agentbridge.conformance.golden import cases
from agentbridge.conformance.pytest_plugin import conformance_tests
from agentbridge_openrlhf.backend import OpenRLHFBackend

test_openrlhf_conforms = conformance_tests("openrlhf")


def test_the_backend_declares_its_module_and_conformance() -> None:
    backend = OpenRLHFBackend()
    assert backend.module == "openrlhf" and callable(backend.conformance)


def test_the_suite_reports_broken_experience_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenRLHF's Experience building is handed each action range one token too long and the reward plus one: the
    suite must say exactly that, one response_mask line and one reward line per episode, and nothing else."""
    from agentbridge_openrlhf.standins import use_vllm_standin

    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # restored after the test
    use_vllm_standin()  # samples_generator imports vllm
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    honest = SamplesGenerator._process_response_into_experience

    def broken(self: Any, response: dict[str, Any], **kwargs: Any) -> Any:
        response = {**response, "action_ranges": [(s, e + 1) for s, e in response["action_ranges"]],
                    "reward": response["reward"] + 1.0}
        return honest(self, response, **kwargs)

    monkeypatch.setattr(SamplesGenerator, "_process_response_into_experience", broken)
    (result,) = run_suite("openrlhf", ("text",))
    assert not result.ok
    want = set()
    for ref in reference_records("text"):
        first_env = ref.response_mask.index(0)  # the token after the first turn's end: now inside the range
        for i in range(2):
            if 1 in ref.response_mask:  # the empty-episode fallback has no action range to lengthen
                want.add(f"openrlhf: case {ref.case}[{i}]: response_mask differs at {first_env} of "
                         f"{len(ref.response_mask)} (driver 0, backend 1)")
            want.add(f"openrlhf: case {ref.case}[{i}]: reward is {ref.reward + 1:g}, the driver's is {ref.reward:g}")
    assert set(result.problems) == want and len(result.problems) == len(want), result.problems
    assert result.case_fields() == {c: (["reward"] if c == "early_error" else ["response_mask", "reward"]) * 2
                                    for c in cases("text")}

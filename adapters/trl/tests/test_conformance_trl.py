"""TRL passes the conformance suite (through the pytest plugin), and the suite fails when the adapter is broken."""

from __future__ import annotations

from typing import Any

import pytest

import agentbridge_trl.rollout as trl_rollout
from agentbridge.conformance import run_suite
from agentbridge.conformance.golden import cases
from agentbridge.conformance.pytest_plugin import conformance_tests

test_trl_conforms = conformance_tests("trl")


def test_the_suite_fails_on_a_mask_off_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deliberately broken adapter: the env mask handed to TRL is shifted by one token."""
    honest = trl_rollout.to_rollout_output

    def off_by_one(*args: Any, **kwargs: Any) -> dict[str, Any]:
        out = honest(*args, **kwargs)
        out["env_mask"] = [[1, *mask[:-1]] for mask in out["env_mask"]]
        return out

    monkeypatch.setattr(trl_rollout, "to_rollout_output", off_by_one)
    (result,) = run_suite("trl", ("text",))
    assert not result.ok
    assert all(": response_mask differs at " in line for line in result.problems), result.problems
    assert {case for case, fields in result.case_fields().items() if fields} == set(cases("text"))

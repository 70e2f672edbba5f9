"""A run whose episodes keep ending in error stops with one line (agent.max_error_rate) instead of training on
reward-0 episodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbridge.rollout.agent_edge import ErrorRateGuard, TooManyErrors
from agentbridge.spec import load_spec
from agentbridge.training.logger import RunLogger
from agentbridge.trajectory import Trajectory


def episode(failed: bool) -> Trajectory:
    traj = Trajectory(task_id="t", prompt_ids=[1])
    traj.finish_reason = "error" if failed else "done"
    traj.error = "ConnectionRefusedError: http://localhost:9/search\nTraceback..." if failed else None
    return traj


def test_the_guard_waits_for_a_full_window_then_stops_past_the_rate() -> None:
    guard = ErrorRateGuard(0.5, window=8)
    for _ in range(7):
        guard.record(episode(True))  # 7 errors, but fewer than a window of episodes seen
    with pytest.raises(TooManyErrors) as info:
        guard.record(episode(True))
    assert str(info.value) == ("8 of the last 8 episodes ended in error, more than agent.max_error_rate 0.5; the "
                               "first: ConnectionRefusedError: http://localhost:9/search")
    half = ErrorRateGuard(0.5, window=8)
    for i in range(64):
        half.record(episode(i % 2 == 0))  # exactly half: allowed
    never = ErrorRateGuard(1.0, window=2)
    for _ in range(10):
        never.record(episode(True))


def test_the_run_logger_stops_a_failing_run(tmp_path: Path) -> None:
    assert load_spec("examples/calculator.yaml").agent.max_error_rate == 0.5
    logger = RunLogger(tmp_path, prefix="trl", max_error_rate=0.25)
    logger.add_batch([episode(i >= 24) for i in range(32)], 1.0)  # 8 of 32: at the rate, kept
    assert len(logger.pending) == 32
    with pytest.raises(TooManyErrors, match="of the last 32 episodes ended in error"):
        logger.add_batch([episode(True) for _ in range(4)], 1.0)

"""verifiers' scores as agentbridge rewards (read from the episode's last step, where the environment put them)."""

from __future__ import annotations

from typing import Any

SCORE, WEIGHT = "verifiers/score/", "verifiers/weight/"


def rubric(trajectory: Any, task: Any, weighted: bool = True) -> dict[str, float]:
    """Each of the task's rewards (``@vf.reward`` functions, plugged rewards, judges, rewards the env recorded) as
    one component, by its verifiers name: its score times its verifiers weight (``weighted: false``: the bare
    score). With the spec weight 1 the weighted components sum to verifiers' own ``trace.reward``. The rewards the
    task class declares (``task.data["rewards"]``) are components of every episode, 0 where verifiers did not score
    it (cut by the driver, failed)."""
    m = trajectory.metrics
    declared = dict(getattr(task, "data", {}).get("rewards") or {}) if task is not None else {}
    out = {name: 0.0 for name in declared}
    for key, value in m.items():
        if key.startswith(SCORE):
            name = key[len(SCORE):]
            out[name] = float(value) * (float(m.get(WEIGHT + name, declared.get(name, 1.0))) if weighted else 1.0)
    return out


def total(trajectory: Any, task: Any) -> float:
    """verifiers' own total reward of the episode (``trace.reward``: the weighted sum), 0 when it was not scored."""
    return float(trajectory.metrics.get("verifiers/reward", 0.0))

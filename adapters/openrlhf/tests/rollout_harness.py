"""OpenRLHF 0.11.2's own rollout path for the tests: ``agentbridge_openrlhf.rollout_path`` with the scripted engine.

The path, what is real and what stands in: see :mod:`agentbridge_openrlhf.rollout_path` (the stand-ins live in
:mod:`agentbridge_openrlhf.standins`, shared with the conformance run). Here the vLLM stand-in plays a script, two
engine actors share the work and every executor keeps its episodes, so tests can compare them with the Experiences.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentbridge_openrlhf import rollout_path
from agentbridge_openrlhf.rollout_path import Rollout, on_path

__all__ = ["Rollout", "match_episodes", "on_path", "run_rollout"]


def run_rollout(job: Path, model: str, script: list[list[str]], *, engines: int = 2, keep: int = 64) -> Rollout:
    """One rollout batch of ``job`` through OpenRLHF's rollout path, the vLLM stand-in playing ``script``.

    ``script``: per assistant turn, the texts the scripted engine picks from (seeded per engine). The job's
    executors keep their last ``keep`` episodes for comparison.
    """
    return rollout_path.run_rollout(job, model, engine="scripted", script=script, engines=engines, keep=keep)


def match_episodes(rollout: Rollout) -> list[tuple[Any, Any]]:
    """Pair each Experience with the driver's Trajectory it came from (a bijection, or AssertionError).

    Samples of one prompt can share tokens; their rollout log-probs (random per call when the job asks vLLM for
    them) or, failing that, their order tell them apart.
    """
    unmatched = list(rollout.episodes)
    pairs = []
    for exp in rollout.experiences:
        task_id, seq = json.loads(exp.labels[0])["id"], exp.sequences[0].tolist()
        got = exp.rollout_log_probs[0].tolist() if exp.rollout_log_probs is not None else None

        def same(t: Any, task_id: str = task_id, seq: list[int] = seq, got: list[float] | None = got) -> bool:
            if t.task_id != task_id or t.prompt_ids + t.response_ids != seq:
                return False
            want = ([0.0] * len(t.prompt_ids) + t.logprobs)[1:]
            return got is None or all(abs(a - b) <= 1e-6 for a, b in zip(want, got, strict=True))

        traj = next((t for t in unmatched if same(t)), None)
        assert traj is not None, f"an Experience of task {task_id} matches no driver episode"
        unmatched.remove(traj)
        pairs.append((exp, traj))
    assert unmatched == [], f"{len(unmatched)} driver episodes reached no Experience"
    return pairs

"""What RL changed in a search run, per question kind: the share of held-out questions answered after every hop's
search, and supporting-passage recall, before RL (the warm start kept in ``warm_start.pt``) and after it
(``model/``), both greedy.

    python bench/search_rl_effect.py RUN_DIR [RUN_DIR ...]

A run of ``examples/search.yaml`` (its warm start must have been kept: ``warm_start.pt`` is written when the
SFT-only control is on). The job's spec and held-out tasks are read from the job directory the run's manifest names.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any


def per_kind(agent: Any, model: Any, tasks: list[Any]) -> dict[str, tuple[float, float, int]]:
    """kind -> (share answered after one search per hop, mean supporting-passage recall, n), greedy."""
    from agentbridge.training.evaluate import greedy_policy

    model.eval()
    trajs = asyncio.run(agent.run(tasks, greedy_policy(agent, model),
                                  sampling=replace(agent.sampling, temperature=0.0)))
    rows: dict[str, list[tuple[bool, float]]] = defaultdict(list)
    for task, t in zip(tasks, trajs, strict=True):
        hops = len(task.data["queries"])
        rows[task.data["kind"]].append((t.metrics.get("search/queries", 0.0) >= hops,
                                        t.reward_components.get("search/support", 0.0)))
    return {k: (sum(a for a, _ in v) / len(v), sum(b for _, b in v) / len(v), len(v)) for k, v in sorted(rows.items())}


def main(runs: list[str]) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from agentbridge.models import load_model
    from agentbridge.rollout.agent import Agent, read_tasks_jsonl
    from agentbridge.spec import load_spec

    for run in map(Path, runs):
        job = Path(json.loads((run / "manifest.json").read_text())["job"])
        spec = load_spec(job / "spec.yaml")
        agent = Agent.from_spec(spec)
        tasks = read_tasks_jsonl(job / "data" / "eval.jsonl")
        before = load_model(spec.model.path, seed=spec.seed)
        before.load_state_dict(torch.load(run / "warm_start.pt", weights_only=True)["model"])
        after = AutoModelForCausalLM.from_pretrained(run / "model")
        print(f"{run} (seed {spec.seed}): share searched once per hop | supporting-passage recall")
        for arm, model in (("before RL", before), ("after RL", after)):
            for kind, (searched, recall, n) in per_kind(agent, model, tasks).items():
                print(f"  {arm:9} {kind:20} n={n:3}  {searched:.3f} | {recall:.3f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])

"""``python -m agentbridge_mini.run JOB RUN_DIR``: collect one batch per step and write it to the run directory."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

from agentbridge.adapter import append_jsonl, write_jsonl
from agentbridge.adapter.rollout import Agent, fit_limits
from agentbridge.spec import Spec, load_spec
from agentbridge_mini.batch import decode_task, to_batch


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def make_agent(spec: Spec, max_len: int) -> Agent:
    """The spec's agent, its budgets cut to what a batch row keeps (``max_len`` tokens, prompt + response) by
    agentbridge's one budget rule, so no episode is cut after the driver let it through."""
    agent = Agent.from_spec(spec)
    agent.limits = fit_limits(agent.limits, max_total=max_len)
    return agent


def collect_batch(agent: Agent, rows: list[dict[str, Any]], policy: Any, group_size: int) -> list[dict[str, Any]]:
    """``group_size`` episodes of each dataset row through agentbridge's driver, as one batch of this backend.

    ``policy`` is a Policy, or a callable making one per environment (e.g. the scripted expert).
    """
    tasks = [decode_task(row) for row in rows for _ in range(group_size)]
    trajectories = asyncio.run(agent.run(tasks, policy))
    tok = agent.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else agent.renderer.eos_token_id
    return to_batch(trajectories, tasks, renderer=agent.renderer, pad_id=pad,
                    system_prompt=agent.spec.agent.system_prompt, group_size=group_size)


def make_policy(agent: Agent, kind: str) -> Any:
    """The spec's model sampled with transformers (``model``), or the environment's scripted expert (``expert``)."""
    if kind == "expert":
        from agentbridge.adapter.rollout import ScriptedPolicy

        return lambda env: ScriptedPolicy.for_env(env, agent.tokenizer)
    from agentbridge.adapter.models import load_model
    from agentbridge.adapter.rollout import HFPolicy

    return HFPolicy(load_model(agent.spec.model.path, agent.spec.seed), agent.tokenizer, seed=agent.spec.seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentbridge_mini.run")
    parser.add_argument("job", type=Path)
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args(argv)
    config = json.loads((args.job / "mini.json").read_text())
    agent = make_agent(load_spec(args.job / "spec.yaml"), config["max_len"])
    rows = read_jsonl(args.job / "data" / "train.jsonl")
    if not rows:
        raise SystemExit("error: the job has no training tasks")
    policy = make_policy(agent, config["policy"])
    size = config["batch_size"]
    for step in range(config["steps"]):
        picked = [rows[(step * size + i) % len(rows)] for i in range(size)]
        batch = collect_batch(agent, picked, policy, config["group_size"])
        write_jsonl(args.run_dir / "batches" / f"step_{step:05d}.jsonl", batch)
        append_jsonl(args.run_dir / "metrics.jsonl",
                     {"step": step, "reward/mean": statistics.fmean(r["reward"] for r in batch)})
    print(f"mini: {config['steps']} batches in {args.run_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

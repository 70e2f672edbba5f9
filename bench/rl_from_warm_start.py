"""RL again from a finished run's warm start, with settings changed: what one RL setting does, same warm start.

    python bench/rl_from_warm_start.py RUN_DIR OUT_DIR [--set KEY=VALUE ...]

RUN_DIR is a TRL run of ``agentbridge train`` that kept its warm start (``warm_start.pt``, written when the SFT-only
control is on). The job's spec (with the ``--set`` overrides) and held-out tasks are read from the job directory
the run's manifest names. The warm start's weights are scored greedily, RL runs ``algorithm.steps`` steps with the
job's TRL trainer, and the policy is scored again; the run report's paired tests (exact McNemar on success,
Wilcoxon on every other reward component) are printed and written to ``OUT_DIR/eval.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main(run: Path, out: Path, overrides: list[str]) -> None:
    import torch

    from agentbridge.models import load_model
    from agentbridge.rollout.agent import Agent, read_tasks_jsonl
    from agentbridge.spec import load_spec
    from agentbridge.training.evaluate import evaluate
    from agentbridge.training.experiment import write_evals
    from agentbridge.training.logger import RunLogger
    from agentbridge_trl.config import grpo_config_kwargs
    from agentbridge_trl.trainer import build_trainer

    job = Path(json.loads((run / "manifest.json").read_text())["job"])
    spec = load_spec(job / "spec.yaml", overrides)
    agent = Agent.from_spec(spec)
    tasks = read_tasks_jsonl(job / "data" / "eval.jsonl")
    model = load_model(spec.model.path, seed=spec.seed)
    model.load_state_dict(torch.load(run / "warm_start.pt", weights_only=True)["model"])
    out.mkdir(parents=True, exist_ok=True)
    before = evaluate(agent, model, tasks)
    print(f"warm start ({run}): success {before.mean:.3f} on {len(tasks)} held-out tasks", flush=True)
    started = time.perf_counter()
    trainer, _ = build_trainer(agent, model, grpo_config_kwargs(spec, str(out / "trainer")), agent.tasks("train"),
                               RunLogger(out, prefix="trl"))
    trainer.train()
    after = evaluate(agent, model, tasks)
    print(f"after {spec.algorithm.steps} RL steps ({time.perf_counter() - started:.0f} s, {' '.join(overrides)}): "
          f"success {before.mean:.3f} -> {after.mean:.3f}")
    paired = write_evals(out, {"before_rl": before, "after_rl": after})["paired"]
    counts = paired["rl_vs_warm_start"]
    print(f"  McNemar p = {paired['rl_vs_warm_start_p']:.2g} ({counts['rl_only']} tasks solved only after RL, "
          f"{counts['before_rl_only']} only by the warm start)")
    means = before.summary().get("components", {}), after.summary().get("components", {})
    for name, test in paired.get("components", {}).get("rl_vs_warm_start", {}).items():
        print(f"  {name}: {means[0][name]:.3f} -> {means[1][name]:.3f} (Wilcoxon p = {test['p']:.2g})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished run directory with warm_start.pt")
    parser.add_argument("out", type=Path, help="where the RL run's metrics, trainer and eval.json go")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a spec override for the RL run, e.g. agent.sampling.temperature=1.0")
    args = parser.parse_args()
    main(args.run, args.out, args.overrides)

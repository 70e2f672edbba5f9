"""The learning guard: a reduced main job must still learn, measured, with a fixed seed.

A warm start on the scripted expert must reach a dev-success floor within a step cap, and a few GRPO steps from
there must not fall below it on held-out tasks. A change that breaks learning — rendering, masks, the tokenizer, the
SFT or RL loss — fails here, because the assertions are on measured success.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from agentbridge.models import load_model
from agentbridge.rollout.agent import Agent
from agentbridge.spec import load_spec
from agentbridge.training.evaluate import evaluate
from agentbridge.training.experiment import Experiment
from agentbridge.training.logger import RunLogger
from agentbridge_trl.config import grpo_config_kwargs
from agentbridge_trl.trainer import build_trainer

TARGET = 0.3         # dev success (40 tasks) at which the reduced warm start stops
FLOOR = 0.15         # held-out success (80 tasks) it must reach, and RL must keep; below TARGET for the dev noise
# the perfect expert (no answers done in the head): the guard checks that learning works, fast
GUARD = ["seed=0", "environment.args.expert_in_head=0.0", "algorithm.warm_start.demos=3000",
         f"algorithm.warm_start.target={TARGET}", "algorithm.warm_start.group_floor=null",
         "algorithm.warm_start.dev_every=30", "algorithm.warm_start.max_steps=700",  # it stops near 330 here
         "algorithm.warm_start.control=false", "data.dev.size=40", "data.eval.size=80", "algorithm.steps=3"]


def test_warm_start_reaches_the_floor_and_rl_keeps_it(tmp_path: Path) -> None:
    started = time.perf_counter()
    spec = load_spec("examples/calculator.yaml", GUARD)
    agent = Agent.from_spec(spec)
    model = load_model(spec.model.path, seed=spec.seed)
    held_out = agent.tasks("eval")
    lines: list[str] = []

    def progress(label: str, total: int | None) -> Any:
        return lambda step, info, done: None

    experiment = Experiment(agent, model, tmp_path, held_out, say=lines.append, progress=progress)
    experiment.warm_start()
    warm = json.loads((tmp_path / "warm_start.json").read_text())
    assert warm["stopped"] == "target", f"the warm start never reached dev success {TARGET}: {warm['dev']}"
    before = evaluate(agent, model, held_out)
    assert before.mean >= FLOOR, f"held-out success after the warm start: {before.mean:.3f} < {FLOOR}"
    trainer, _ = build_trainer(agent, model, grpo_config_kwargs(spec, str(tmp_path / "trainer")), agent.tasks("train"),
                               RunLogger(tmp_path, prefix="trl"))
    trainer.train()
    after = evaluate(agent, model, held_out)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["reward/mean"] > 0 for r in rows), rows  # RL saw solved episodes
    assert after.mean >= FLOOR, f"held-out success fell after RL: {before.mean:.3f} -> {after.mean:.3f}"
    print(f"guard: warm start {warm['steps']} steps, dev {warm['dev'][-1]['success']:.2f}; held-out "
          f"{before.mean:.2f} -> {after.mean:.2f} after RL; {time.perf_counter() - started:.0f} s")

"""The learning guards: reduced example jobs must still learn, measured, with a fixed seed.

A warm start on the scripted expert must reach a dev-success target within a step cap (calculator and search), and
held-out success must reach a floor after it. A change that breaks learning — rendering, masks, the tokenizer, the
SFT loss, the search tool's results — fails here, because the assertions are on measured success.

Whether RL itself learns is ``test_rl_guard.py``'s question: the search guard's few GRPO steps here only show that
RL runs on the search agent and keeps the floor (a broken RL update passes that; see issue 38).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from agentbridge.models import load_model
from agentbridge.rollout.agent import Agent
from agentbridge.spec import load_spec
from agentbridge.training.evaluate import EvalResult, evaluate
from agentbridge.training.experiment import Experiment
from agentbridge.training.logger import RunLogger
from agentbridge_trl.config import grpo_config_kwargs
from agentbridge_trl.trainer import build_trainer

# calculator: dev success (40 tasks) at which the reduced warm start stops, and the held-out floor (80 tasks) it must
# reach (below the target for the dev noise); the perfect expert (no sums done in the head)
CALCULATOR_TARGET, CALCULATOR_FLOOR = 0.3, 0.15
CALCULATOR = ["seed=0", "environment.args.expert_in_head=0.0", "algorithm.warm_start.demos=3000",
              f"algorithm.warm_start.target={CALCULATOR_TARGET}", "algorithm.warm_start.group_floor=null",
              "algorithm.warm_start.dev_every=30", "algorithm.warm_start.max_steps=700",  # it stops near 330 here
              "algorithm.warm_start.control=false", "data.dev.size=40", "data.eval.size=80"]

# search: a small world (200 people, 30 companies, 20 towns) where the copy of names into queries and answers comes
# after ~350 SFT steps instead of 550-900 (it stops at 360-400 here, by thread count; dev is checked every 100
# steps, every 20 once past a quarter of the target, which keeps the guard under 3 minutes); the perfect expert; exact
# match is the success, and the floor (40 held-out questions; 0.000 before training) holds for exact match and
# supporting-passage recall
SEARCH_WORLD = {"towns": 20, "companies": 30, "people": 200, "distractors": 100}
SEARCH_TARGET, SEARCH_FLOOR = 0.25, 0.1
SEARCH = ["seed=0", "environment.args.expert_in_head.fic_company_leader=0.0", "data.train.size=400",
          "algorithm.warm_start.demos=400", "algorithm.warm_start.batch_size=16",
          f"algorithm.warm_start.target={SEARCH_TARGET}", "algorithm.warm_start.dev_every=100",
          "algorithm.warm_start.max_steps=800", "algorithm.warm_start.control=false", "data.dev.size=30",
          "data.eval.size=40", "algorithm.steps=2",
          *[f"{where}.world.{k}={v}" for where in ("environment.args", "data.train.args", "data.dev.args",
                                                   "data.eval.args") for k, v in SEARCH_WORLD.items()]]


def reduced_run(tmp_path: Path, example: str, overrides: list[str], floor: float,
                rl: bool = True) -> tuple[dict[str, Any], EvalResult, EvalResult | None]:
    """Warm start ``example`` with ``overrides`` to its dev target, then (``rl``) a few RL steps; held-out success
    after the warm start, and after RL, must reach ``floor``. Returns warm_start.json and the held-out results."""
    spec = load_spec(example, overrides)
    agent = Agent.from_spec(spec)
    model = load_model(spec.model.path, seed=spec.seed)
    held_out = agent.tasks("eval")

    def progress(label: str, total: int | None) -> Any:
        return lambda step, info, done: None

    Experiment(agent, model, tmp_path, held_out, say=lambda line: None, progress=progress).warm_start()
    warm = json.loads((tmp_path / "warm_start.json").read_text())
    target = spec.algorithm.warm_start.target  # type: ignore[union-attr]
    assert warm["stopped"] == "target", f"the warm start never reached dev success {target}: {warm['dev']}"
    before = evaluate(agent, model, held_out)
    assert before.mean >= floor, f"held-out success after the warm start: {before.mean:.3f} < {floor}"
    if not rl:
        return warm, before, None
    trainer, _ = build_trainer(agent, model, grpo_config_kwargs(spec, str(tmp_path / "trainer")), agent.tasks("train"),
                               RunLogger(tmp_path, prefix="trl"))
    trainer.train()
    after = evaluate(agent, model, held_out)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == spec.algorithm.steps and all(r["reward/mean"] > 0 for r in rows), rows  # solved episodes
    assert after.mean >= floor, f"held-out success fell after RL: {before.mean:.3f} -> {after.mean:.3f}"
    return warm, before, after


def test_warm_start_reaches_the_floor(tmp_path: Path) -> None:
    started = time.perf_counter()
    warm, before, _ = reduced_run(tmp_path, "examples/calculator.yaml", CALCULATOR, CALCULATOR_FLOOR, rl=False)
    print(f"guard: warm start {warm['steps']} steps, dev {warm['dev'][-1]['success']:.2f}; held-out "
          f"{before.mean:.2f}; {time.perf_counter() - started:.0f} s")


def test_search_warm_start_learns_to_copy_and_rl_keeps_it(tmp_path: Path) -> None:
    """The search agent: names copied into both queries and the answer (exact match on held-out questions, whose
    two supporting passages must be found by the agent's own searches)."""
    started = time.perf_counter()
    warm, before, after = reduced_run(tmp_path, "examples/search.yaml", SEARCH, SEARCH_FLOOR)
    assert after is not None
    recall = sum(before.components["search/support"]) / len(before.scores)
    assert recall >= SEARCH_FLOOR, f"supporting-passage recall after the warm start: {recall:.3f}"
    print(f"search guard: warm start {warm['steps']} steps, dev {warm['dev'][-1]['success']:.2f}; held-out exact "
          f"match {before.mean:.2f} -> {after.mean:.2f} after RL, recall {recall:.2f}; "
          f"{time.perf_counter() - started:.0f} s")

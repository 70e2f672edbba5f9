"""Same machine, same seed, same commit: a warm start gives bit-identical losses, dev checks and weights.

A short warm start of the calculator agent on the built-in tiny model (six SFT steps, dev checked every two)
runs twice in one process; every step's loss, every dev check (success, each task's score and the tokens the
greedy policy generated) and the final weights must be equal, not close. A third run without dev checks must give the
same losses and weights: evaluating dev neither draws from the data order nor changes the model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentbridge.models import load_model
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.hf_policy import HFPolicy
from agentbridge.spec import load_spec
from agentbridge.training import experiment
from agentbridge.training.experiment import Experiment
from agentbridge.training.warm_start import SFTRun

# 6 SFT steps of 8 demonstrations; dev (4 tasks) every 2 steps; a target no check reaches, so every run takes
# the same steps and the comparison is of the computation, not of where it stopped
SHORT = ["seed=0", "algorithm.warm_start.demos=100", "algorithm.warm_start.batch_size=8",
         "algorithm.warm_start.max_steps=6", "algorithm.warm_start.dev_every=2", "algorithm.warm_start.target=0.99",
         "algorithm.warm_start.group_floor=null", "algorithm.warm_start.control=false", "data.dev.size=4",
         "data.eval.size=4"]


def short_warm_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sets: Sequence[str] = ()) -> dict[str, Any]:
    """One warm start of the calculator agent; returns its per-step losses, warm_start.json, every dev check's
    scores and greedy generations, and the final weights."""
    spec = load_spec("examples/calculator.yaml", [*SHORT, *sets])
    agent = Agent.from_spec(spec)
    model = load_model(spec.model.path, seed=spec.seed)
    losses: list[float] = []
    checks: list[Any] = []
    generations: list[Any] = []
    train_step, evaluate, generate_batch = SFTRun.train_step, experiment.evaluate, HFPolicy.generate_batch

    def recorded_step(self: SFTRun) -> float:
        losses.append(train_step(self))
        return losses[-1]

    def recorded_evaluate(*args: Any, **kwargs: Any) -> Any:
        result = evaluate(*args, **kwargs)
        checks.append((result.scores, result.components))
        return result

    def recorded_generate(self: HFPolicy, prompts: list[list[int]], *args: Any) -> Any:
        outs = generate_batch(self, prompts, *args)
        generations.extend((tuple(p), tuple(o.token_ids)) for p, o in zip(prompts, outs, strict=True))
        return outs

    monkeypatch.setattr(SFTRun, "train_step", recorded_step)
    monkeypatch.setattr(experiment, "evaluate", recorded_evaluate)
    monkeypatch.setattr(HFPolicy, "generate_batch", recorded_generate)
    tmp_path.mkdir(parents=True, exist_ok=True)
    Experiment(agent, model, tmp_path, [], say=lambda line: None,
               progress=lambda label, total: lambda step, info, done: None).warm_start()
    monkeypatch.undo()
    warm = json.loads((tmp_path / "warm_start.json").read_text())
    for entry in warm["dev"]:
        entry.pop("seconds")
    return {"losses": losses, "warm": {k: v for k, v in warm.items() if k != "seconds"}, "checks": checks,
            "generations": sorted(generations), "weights": {k: v.clone() for k, v in model.state_dict().items()}}


def same_weights(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The names of the tensors that differ (bit for bit)."""
    import torch

    return [k for k in a if not torch.equal(a[k], b[k])]


def test_a_warm_start_twice_with_one_seed_is_bit_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = short_warm_start(tmp_path / "first", monkeypatch)
    second = short_warm_start(tmp_path / "second", monkeypatch)
    assert len(first["losses"]) == 6 and len(first["checks"]) == 3, (first["losses"], first["warm"])
    assert first["losses"] == second["losses"]                 # every step's loss, exactly
    assert first["warm"] == second["warm"]                     # steps, last loss, each dev check's success
    assert first["checks"] == second["checks"]                 # each dev task's score and other components
    assert first["generations"] == second["generations"]       # the greedy tokens behind the dev scores
    assert not same_weights(first["weights"], second["weights"])
    # dev checks read the model and draw nothing: without them the data order and the weights are the same
    unchecked = short_warm_start(tmp_path / "unchecked", monkeypatch, ["algorithm.warm_start.target=null"])
    assert not unchecked["checks"] and unchecked["losses"] == first["losses"]
    assert not same_weights(unchecked["weights"], first["weights"])

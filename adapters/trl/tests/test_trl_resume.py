"""Checkpoints and ``--resume``: a TRL run stopped after a few steps and resumed reaches the same per-step data,
rewards, losses and final weights as the run that was never stopped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from expert_mix import mix_in_expert
from safetensors.torch import load_file

import agentbridge_trl.trainer as trl_trainer
from agentbridge.backends import compile_job, get_backend
from agentbridge.cli import main
from agentbridge.spec import load_spec
from agentbridge_trl.entry import run_job

# 4 train tasks at 2 prompts a step: 2 steps an epoch, so 5 steps cover three epochs; checkpoints at steps 3 and 5
# (only the newest kept). Stopped after step 4, the run resumes from step 3: mid-epoch, in the second epoch.
SETS = ["algorithm.steps=5", "algorithm.batch_size=2", "algorithm.group_size=4", "algorithm.warm_start=null",
        "data.dev=null", "data.train.size=4", "data.eval.size=2", "agent.max_turns=2", "agent.sampling.temperature=1.0",
        "backend.options.save_steps=3", "backend.options.save_total_limit=1"]


class Stopped(Exception):
    """Stands for a crash or a kill in the middle of RL."""


@pytest.fixture(autouse=True)
def with_rewards(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every other episode plays the scripted expert, so rewards vary and each step really moves the weights."""
    build = trl_trainer.build_trainer

    def mixed(agent: Any, *args: Any, **kwargs: Any) -> Any:
        trainer, rollout = build(agent, *args, **kwargs)
        mix_in_expert(rollout, agent.tokenizer)
        return trainer, rollout

    monkeypatch.setattr(trl_trainer, "build_trainer", mixed)


def stop_after(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """The next run raises ``Stopped`` once ``step`` is logged (its rows written), before any save at that step."""
    from transformers import TrainerCallback

    class Stop(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if state.global_step == step:
                raise Stopped

    build = trl_trainer.build_trainer

    def stopping(*args: Any, **kwargs: Any) -> Any:
        trainer, rollout = build(*args, **kwargs)
        trainer.add_callback(Stop())
        return trainer, rollout

    monkeypatch.setattr(trl_trainer, "build_trainer", stopping)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = load_spec("examples/calculator.yaml", SETS)
    return compile_job(spec, get_backend("trl"), tmp_path_factory.mktemp("job") / "job").path


def steps(run: Path) -> dict[int, list[tuple[str, float, str]]]:
    """Per step: the task id, reward and generated text of each episode, in order."""
    out: dict[int, list[tuple[str, float, str]]] = {}
    for line in (run / "episodes.jsonl").read_text().splitlines():
        row = json.loads(line)
        text = "|".join(t["text"] for t in row["turns"])
        out.setdefault(row["step"], []).append((row["task_id"], row["reward"], text))
    return out


def losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["trl/loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


def test_a_resumed_run_matches_the_uninterrupted_one(job: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    run_job(job, whole, quiet=True)
    assert sorted(p.name for p in (whole / "trainer").iterdir() if p.name.startswith("checkpoint-")) == \
        ["checkpoint-5"]  # bounded: save_total_limit
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"} <= \
        {p.name for p in (whole / "trainer" / "checkpoint-5").iterdir()}
    order = steps(whole)
    assert sorted(order) == [1, 2, 3, 4, 5]
    assert [t for t, *_ in order[2]] != [t for t, *_ in order[4]]  # epochs differ in order: the check has teeth

    with monkeypatch.context() as m:
        stop_after(m, 4)
        with pytest.raises(Stopped):
            run_job(job, parts, quiet=True)
    assert [s for s, _ in losses(parts)] == [1, 2, 3, 4]  # step 4 was logged but not saved
    assert [p.name for p in (parts / "trainer").iterdir() if p.name.startswith("checkpoint-")] == ["checkpoint-3"]
    capfd.readouterr()
    run_job(job, parts, resume=True)
    said = capfd.readouterr().err
    assert "resuming from" in said and "step 3" in said
    assert "evaluating before_training" not in said and "evaluating after_rl" in said

    assert steps(parts) == order  # the same tasks in the same order at every step, the same samples and rewards
    (ours, theirs) = (losses(parts), losses(whole))
    assert [s for s, _ in ours] == [1, 2, 3, 4, 5]  # no duplicate step rows
    assert [x for _, x in ours] == pytest.approx([x for _, x in theirs], rel=1e-5, abs=1e-7)
    a, b = load_file(whole / "model" / "model.safetensors"), load_file(parts / "model" / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a)
    evals, resumed = json.loads((whole / "eval.json").read_text()), json.loads((parts / "eval.json").read_text())
    assert {arm: evals[arm]["mean"] for arm in ("before_training", "after_rl")} == \
        {arm: resumed[arm]["mean"] for arm in ("before_training", "after_rl")}
    assert [r["from"] for r in json.loads((parts / "manifest.json").read_text())["resumed"]] == \
        [str(Path("trainer") / "checkpoint-3")]


def test_resume_needs_a_checkpoint_and_never_overwrites(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["train", "examples/calculator.yaml", *[x for s in SETS for x in ("--set", s)]]
    res = runner.invoke(main, [*base, "--resume", "--overwrite", "-o", str(tmp_path / "run")])
    assert res.exit_code == 2 and "--resume" in res.output
    res = runner.invoke(main, [*base, "--resume", "-o", str(tmp_path / "run")])
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [f"error: --resume: no run in {tmp_path / 'run'} to resume"]
    spec = load_spec("examples/calculator.yaml", SETS)
    from agentbridge.spec import spec_hash

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text(json.dumps({"spec_hash": spec_hash(spec)}))
    res = runner.invoke(main, [*base, "--resume", "-o", str(tmp_path / "run")])
    assert res.exit_code == 1 and "has no checkpoint to resume from" in res.output
    res = runner.invoke(main, [*base, "--set", "seed=1", "--resume", "-o", str(tmp_path / "run")])
    assert res.exit_code == 1 and "trained with another spec" in res.output

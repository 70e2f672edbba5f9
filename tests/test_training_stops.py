"""Runs that would train nothing stop with one line: a train set smaller than one batch or zero steps (before
training), and a reward that raised on every episode of a step. Also: where `check` looked for a backend's
environment, and `short_training_run` writing nothing into the current folder."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentbridge.backend_envs import no_environment, where_looked
from agentbridge.env import Task
from agentbridge.rewards import RewardSet, WeightedReward, reward_errors
from agentbridge.rollout.driver import _score
from agentbridge.spec import load_spec
from agentbridge.training.guards import (
    NoTrainingSteps,
    RewardAlwaysFails,
    always_failing_reward,
    check_rl_steps,
    zero_steps_problem,
)
from agentbridge.training.logger import RunLogger
from agentbridge.trajectory import Trajectory

CALC = "examples/calculator.yaml"
TRL = Path(__file__).resolve().parents[1] / "adapters" / "trl"


def ok(trajectory: Any, task: Any) -> float:
    return 1.0


def missing_answer(trajectory: Any, task: Any) -> float:
    return float(task.data["answer"])


def episode(rewards: RewardSet, data: dict[str, Any], finish: str = "done") -> Trajectory:
    """A scored episode, its components and error set by the driver's own scoring."""
    traj = Trajectory(task_id="t", prompt_ids=[1], finish_reason=finish)
    if finish == "error":
        traj.error = "environment setup failed: RuntimeError: down"
    asyncio.run(_score(traj, Task(id="t", prompt="p", data=data), rewards, 0.0))
    return traj


REWARDS = RewardSet([WeightedReward("my/ok", ok), WeightedReward("my/answer", missing_answer)])


def test_reward_errors_are_read_back_per_reward() -> None:
    error = ("reward a/b: ValueError: bad; really bad; reward c (turn 2): KeyError: 'k'; "
             "reward c (turn 3): KeyError: 'j'")
    assert reward_errors(error, ["a/b", "c", "d"]) == {"a/b": "ValueError: bad; really bad", "c": "KeyError: 'k'"}
    assert reward_errors(None, ["a/b"]) == {}
    assert reward_errors("reward a/bc: X: y", ["a/b"]) == {}
    traj = episode(REWARDS, {})
    assert reward_errors(traj.error, ["my/ok", "my/answer"]) == {"my/answer": "KeyError: 'answer'"}


def test_a_reward_failing_on_every_episode_of_a_step_stops_the_run(tmp_path: Path) -> None:
    logger = RunLogger(tmp_path, prefix="trl")
    batch = [episode(REWARDS, {}) for _ in range(3)] + [episode(REWARDS, {}, finish="error")]
    with pytest.raises(RewardAlwaysFails) as info:
        logger.add_batch(batch, 1.0)
    assert str(info.value) == ("reward my/answer raised on every episode of a training step (3 of 3), so its "
                               "component would train as 0; the first error: KeyError: 'answer'")
    assert "\n" not in str(info.value)


def test_a_reward_that_scores_some_episodes_goes_on(tmp_path: Path) -> None:
    logger = RunLogger(tmp_path, prefix="trl")
    batch = [episode(REWARDS, {}), episode(REWARDS, {}), episode(REWARDS, {"answer": 3})]
    logger.add_batch(batch, 1.0)
    assert logger.pending == batch
    unscored = [episode(REWARDS, {}, finish="error") for _ in range(2)]  # nothing was scored: not the reward's fault
    assert always_failing_reward(unscored) is None


def test_only_the_watched_rewards_stop_the_run() -> None:
    batch = [episode(REWARDS, {}) for _ in range(2)]
    assert always_failing_reward(batch, ["my/ok"]) is None
    assert "reward my/answer raised" in (always_failing_reward(batch, ["my/ok", "my/answer"]) or "")


def test_zero_steps() -> None:
    assert zero_steps_problem(8, 8, 30) is None
    assert zero_steps_problem(3, 4, 30) == (
        "data.train has 3 task(s), fewer than one RL step's batch of 4 prompts (algorithm.batch_size): the RL phase "
        "would make 0 steps; give data.train at least 4 tasks (data.train.size) or lower algorithm.batch_size")
    assert "resolves to 0 steps" in (zero_steps_problem(100, 4, 0) or "")
    with pytest.raises(NoTrainingSteps):
        check_rl_steps(1, 2, 5)


@pytest.fixture
def trl_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TRL))


@pytest.mark.parametrize("sets", [["algorithm.batch_size=3"], ["algorithm.batch_size=6", "algorithm.group_size=2",
                                                                "backend.options={micro_batch_size: 4}"]])
def test_trl_prompts_per_step_is_the_spec_batch(trl_adapter: None, sets: list[str]) -> None:
    from agentbridge_trl.config import grpo_config_kwargs, rl_step_plan

    spec = load_spec(CALC, sets)
    kwargs = grpo_config_kwargs(spec, "out")
    assert rl_step_plan(kwargs, 1, 100) == (spec.algorithm.batch_size, spec.algorithm.steps)


def test_trl_steps_from_overrides(trl_adapter: None) -> None:
    from agentbridge_trl.config import grpo_config_kwargs, rl_step_plan

    kwargs = grpo_config_kwargs(load_spec(CALC, ["algorithm.batch_size=4"]), "out")
    assert rl_step_plan({**kwargs, "max_steps": -1, "num_train_epochs": 2}, 1, 10) == (4, 4)  # 2 whole batches
    assert rl_step_plan({**kwargs, "max_steps": -1, "num_train_epochs": 0}, 1, 10) == (4, 0)


def test_trl_validation_refuses_a_train_set_smaller_than_a_batch(trl_adapter: None, tmp_path: Path) -> None:
    from agentbridge_trl.config import grpo_config_kwargs
    from agentbridge_trl.validate import rl_steps_problems

    spec = load_spec(CALC, ["algorithm.batch_size=4"])
    kwargs = grpo_config_kwargs(spec, "out")
    (tmp_path / "data").mkdir()
    rows = [json.dumps({"id": str(i), "prompt": "1+1", "data": {}}) for i in range(3)]
    (tmp_path / "data" / "train.jsonl").write_text("\n".join(rows) + "\n")
    (problem,) = rl_steps_problems(tmp_path, kwargs, spec)
    assert str(problem).startswith("data/train.jsonl: data.train has 3 task(s), fewer than one RL step's batch of 4")
    (tmp_path / "data" / "train.jsonl").write_text("\n".join(rows * 2) + "\n")
    assert rl_steps_problems(tmp_path, kwargs, spec) == []


def test_trl_job_stops_before_loading_anything(trl_adapter: None, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("accelerate")
    from agentbridge_trl.backend import TrlBackend
    from agentbridge_trl.entry import main

    spec = load_spec(CALC, ["data.train.size=3", "algorithm.batch_size=4", "data.eval.size=2"])
    job = TrlBackend().compile(spec, tmp_path / "job")
    run = tmp_path / "run"
    assert main([str(job.path), "--run-dir", str(run), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == ("error: data.train has 3 task(s), fewer than one RL step's batch of 4 prompts "
                           "(algorithm.batch_size): the RL phase would make 0 steps; give data.train at least 4 tasks "
                           "(data.train.size) or lower algorithm.batch_size")
    assert not run.exists()  # no evaluation, no warm start, no report


def test_no_environment_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "my-plugin"
    folder.mkdir()
    (folder / "pyproject.toml").write_text("[project]\nname = 'my-plugin'\n")
    monkeypatch.chdir(folder)
    monkeypatch.delenv("AGENTBRIDGE_HOME", raising=False)
    monkeypatch.delenv("AGENTBRIDGE_NOPE_PYTHON", raising=False)
    looked = where_looked("nope", "agentbridge_no_such_module")
    assert "agentbridge_no_such_module in " in looked and "(not installed)" in looked
    assert "$AGENTBRIDGE_NOPE_PYTHON (not set)" in looked
    assert (f"{folder}/.agentbridge/environments.json (no such file; the record of the checkout {folder})"
            in looked)
    assert f"{folder}/.venv-nope/bin/python (does not exist)" in looked
    (folder / ".agentbridge").mkdir()
    (folder / ".agentbridge" / "environments.json").write_text(json.dumps({"nope": {"python": "/gone/python"}}))
    monkeypatch.setenv("AGENTBRIDGE_NOPE_PYTHON", "/also/gone")
    line = no_environment("nope", "agentbridge_no_such_module")
    assert "records /gone/python, which does not exist" in line and "(/also/gone, which does not exist)" in line
    assert "\n" not in line and "agentbridge backends setup nope" in line


@pytest.fixture
def plugin_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A plugin's own folder, the current one: a spec reading its tasks from a relative path."""
    folder = tmp_path / "my-plugin"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train.jsonl").write_text(json.dumps({"id": "1", "prompt": "1+1", "data": {}}) + "\n")
    spec = Path(CALC).read_text()
    spec = spec.replace("train: {id: math/arithmetic, split: train, size: 2000, seed: 0}",
                        "train: {path: data/train.jsonl}")
    (folder / "spec.yaml").write_text(spec)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("AGENTBRIDGE_HOME", raising=False)
    return folder


def fake_train(calls: list[dict[str, Any]]) -> Any:
    """``subprocess.run`` standing in for ``agentbridge train``: records the call, writes a job where a train
    writes one by default (its working directory) and one metrics row in the run directory."""

    def run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append({"args": args, **kwargs})
        (Path(kwargs["cwd"]) / "jobs").mkdir()
        run_dir = Path(args[args.index("-o") + 1])
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")
        return subprocess.CompletedProcess(args, 0, "", "")

    return run


def test_short_training_run_writes_nothing_into_the_current_folder(plugin_folder: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbridge.testing import short_training_run

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(subprocess, "run", fake_train(calls))
    before = sorted(p.name for p in plugin_folder.iterdir())
    rows = short_training_run("spec.yaml", plugin_folder.parent / "run", ["algorithm.warm_start=null"])
    assert rows == [{"step": 1}]
    assert sorted(p.name for p in plugin_folder.iterdir()) == before  # no jobs/ here
    (call,) = calls
    workdir = Path(call["cwd"])
    assert plugin_folder not in (workdir, *workdir.parents) and not workdir.exists()  # a temporary one, removed
    args = call["args"]
    assert args[args.index("train") + 1] == str(plugin_folder / "spec.yaml")
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert sets[-1] == f'data.train.path="{plugin_folder / "data" / "train.jsonl"}"'
    assert "algorithm.warm_start=null" in sets
    assert call["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(plugin_folder)
    assert call["env"]["AGENTBRIDGE_HOME"] == str(plugin_folder / ".agentbridge")


def test_short_training_run_keeps_the_warm_start_and_uses_the_given_workdir(plugin_folder: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbridge.testing import short_training_run

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(subprocess, "run", fake_train(calls))
    short_training_run(plugin_folder / "spec.yaml", tmp_path / "run", workdir=tmp_path / "work")
    (call,) = calls
    assert call["cwd"] == str(tmp_path / "work") and (tmp_path / "work" / "jobs").is_dir()
    assert not any("warm_start" in a for a in call["args"])

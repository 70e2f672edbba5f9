"""Record and replay (``environment.record`` / ``environment.replay``, ``agentbridge rollout --record/--replay``):
every environment output and reward score is kept per task and action history and served back without the live
environment, judge or reward model; an action the recording lacks is one line naming the step; the comparison
report says when two runs saw different environment outputs for the same task and actions."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentbridge import reward_model
from agentbridge.compare.episodes import environment_differences
from agentbridge.compare.report import write_comparison
from agentbridge.conformance.golden import GoldenPolicy
from agentbridge.conformance.suite import golden_spec
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.rollout.recording import Recording, RecordingWriter
from agentbridge.spec import SpecError, load_spec, spec_hash
from agentbridge.trajectory import Trajectory

CALCULATOR = "examples/calculator.yaml"
TIMINGS = ("generate_s", "env_s")


def comparable(traj: Trajectory) -> dict[str, Any]:
    """Everything of an episode but its wall-clock timings."""
    d = traj.to_dict()
    for turn in d["turns"]:
        for key in TIMINGS:
            turn.pop(key)
    for key in ("time/generate_s", "time/env_s"):
        d["metrics"].pop(key)
    return d


def expert(agent: Agent) -> Any:
    return lambda env: ScriptedPolicy.for_env(env, agent.tokenizer)


def no_live_environment(**kwargs: Any) -> Any:
    raise AssertionError("the live environment was built during a replay")


def run(spec: Any, policy: Any = None, size: int = 8, split: str = "eval") -> tuple[Agent, list[Trajectory]]:
    agent = Agent.from_spec(spec)
    tasks = agent.tasks(split, size=size)
    return agent, asyncio.run(agent.run(tasks, policy or expert(agent)))


def recorded_calculator(tmp_path: Path, size: int = 8) -> tuple[Path, list[Trajectory]]:
    rec = tmp_path / "rec"
    _, trajs = run(load_spec(CALCULATOR, [f"environment.record={rec}"]), size=size)
    return rec, trajs


def test_replay_gives_identical_episodes_without_the_live_environment(tmp_path: Path) -> None:
    rec, live = recorded_calculator(tmp_path)
    assert {t.finish_reason for t in live} == {"done"} and any(len(t.turns) > 1 for t in live)  # tools were called
    [written] = list(rec.glob("*.jsonl"))  # one file for this process, named after it
    assert written.name.endswith(f"-{__import__('os').getpid()}.jsonl")

    agent = Agent.from_spec(load_spec(CALCULATOR, [f"environment.replay={rec}"]))
    agent.env_factory = no_live_environment  # replay must never build the live environment
    replayed = asyncio.run(agent.run(agent.tasks("eval", size=8), expert(agent)))
    assert [comparable(t) for t in replayed] == [comparable(t) for t in live]
    for a, b in zip(live, replayed, strict=True):  # the same tokens, rewards and reward components
        assert (a.prompt_ids, a.response_ids, a.response_mask) == (b.prompt_ids, b.response_ids, b.response_mask)
        assert a.reward == b.reward and a.reward_components == b.reward_components and b.error is None


def test_a_changed_action_is_a_missing_key_naming_the_step(tmp_path: Path) -> None:
    rec, live = recorded_calculator(tmp_path)
    tooled = next(t for t in live if len(t.turns) >= 2 and t.turns[0].tool_calls)
    agent = Agent.from_spec(load_spec(CALCULATOR, [f"environment.replay={rec}"]))
    task = next(t for t in agent.tasks("eval", size=8) if t.id == tooled.task_id)
    changed = ScriptedPolicy(agent.tokenizer, [tooled.turns[0].text, "<answer>-1</answer>"])  # step 1 as recorded
    [traj] = asyncio.run(agent.run([task], changed))
    assert traj.finish_reason == "error" and traj.error is not None and "\n" not in traj.error
    assert traj.error == (f"ReplayMissing: replay {rec}: no recorded environment output for task '{task.id}' at "
                          "step 2: action 2 (or one before it) differs from every recorded episode of this task")
    assert traj.turns[0].observations == tooled.turns[0].observations  # step 1 was served
    assert traj.reward == 0.0  # an error episode earns nothing (its rewards are not looked up)

    unrecorded = agent.tasks("eval", size=9)[8]  # a task the recording never saw
    [traj] = asyncio.run(agent.run([unrecorded], changed))
    assert traj.error == (f"ReplayMissing: replay {rec}: no recorded reset (step 0) for task '{unrecorded.id}': this "
                          "task was not recorded")


def test_errors_per_turn_scores_and_truncations_replay_as_recorded(tmp_path: Path) -> None:
    """The golden episodes (an environment that fails at reset, a reward that raises, per-turn process rewards, a
    truncated turn, max turns) under their token-level policy: replayed exactly, errors included."""
    rec = tmp_path / "rec"
    _, live = _golden(rec, "record")
    _, replayed = _golden(rec, "replay")
    assert [comparable(t) for t in replayed] == [comparable(t) for t in live]
    by_id = {t.task_id: t for t in replayed}
    assert by_id["early_error"].error == ("ConnectionError: golden environment: reset failed on purpose (case "
                                          "early_error)")
    assert "reward conformance/fragile: RuntimeError: golden reward: raised on purpose" in (
        by_id["reward_error"].error or "")
    assert [t.scores["conformance/tool_turn"] for t in by_id["tools"].turns] == [1.0, 1.0, 0.0]
    assert by_id["truncation"].finish_reason == "length"


def _golden(rec: Path, mode: str) -> tuple[Agent, list[Trajectory]]:
    agent = Agent.from_spec(golden_spec("credit", [f"environment.{mode}={rec}"]))
    if mode == "replay":
        agent.env_factory = no_live_environment
    return agent, asyncio.run(agent.run(agent.tasks("train"), GoldenPolicy(agent.tokenizer)))


def test_reward_model_scores_replay_without_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reward model scoring every turn (``per: turn``): its scores are recorded per turn prefix and replayed with
    no model loaded."""
    monkeypatch.setattr(reward_model, "_MODELS", {})
    args = {"path": "builtin:tiny-rm", "template": "{prompt} => {response}", "batch_size": 16}
    rewards = json.dumps([{"id": "core/exact_answer"}, {"id": "core/reward_model", "per": "turn", "weight": 0.1,
                                                         "args": args}])
    rec = tmp_path / "rec"
    _, live = run(load_spec(CALCULATOR, [f"reward={rewards}", f"environment.record={rec}"]), size=6)
    [model] = reward_model._MODELS.values()  # the live run scored with the model, turns still batched
    assert max(model.batches) > 1
    scores = [t.scores["core/reward_model"] for traj in live for t in traj.turns]
    assert len(set(scores)) > 1  # real, differing scores

    monkeypatch.setattr(reward_model, "_MODELS", {})
    agent, replayed = run(load_spec(CALCULATOR, [f"reward={rewards}", f"environment.replay={rec}"]), size=6)
    assert reward_model._MODELS == {}  # no reward model was loaded to replay its scores
    assert [comparable(t) for t in replayed] == [comparable(t) for t in live]
    assert [t.scores["core/reward_model"] for traj in replayed for t in traj.turns] == scores


def test_images_in_observations_replay_pixel_for_pixel(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    live_agent = Agent.from_spec(golden_spec("vlm", [f"environment.record={rec}"]))
    live = asyncio.run(live_agent.run(live_agent.tasks("train"), GoldenPolicy(live_agent.tokenizer)))
    agent = Agent.from_spec(golden_spec("vlm", [f"environment.replay={rec}"]))
    agent.env_factory = no_live_environment
    replayed = asyncio.run(agent.run(agent.tasks("train"), GoldenPolicy(agent.tokenizer)))
    assert [comparable(t) for t in replayed] == [comparable(t) for t in live]
    pairs = [(a, b) for x, y in zip(live, replayed, strict=True) for a, b in zip(x.images, y.images, strict=True)]
    assert pairs and all(a.mode == b.mode and a.size == b.size and a.tobytes() == b.tobytes() for a, b in pairs)


def _write_many(directory: str, start: int) -> None:
    writer = RecordingWriter(directory)
    for i in range(start, start + 300):
        writer.put(f"k{i}", {"kind": "step", "value": {"observation": [{"role": "tool", "content": "x" * 5000}]}})


def test_processes_write_their_own_files_and_are_read_back_as_one(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_many, args=(str(tmp_path), start)) for start in (0, 300)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    files = sorted(tmp_path.glob("*.jsonl"))
    assert len(files) == 2 and {f.name.rsplit("-", 1)[1] for f in files} == {f"{p.pid}.jsonl" for p in procs}
    with files[0].open("a") as f:
        f.write('{"key": "cut", "kind": "st')  # a writer killed mid-line: skipped
    recording = Recording(tmp_path)
    assert set(recording.records) == {f"k{i}" for i in range(600)}
    (tmp_path / "bad.jsonl").write_text("not json\n{}\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: not a recorded line"):
        Recording(tmp_path)


def test_the_spec_fields(tmp_path: Path) -> None:
    plain = load_spec(CALCULATOR)
    assert "record" not in plain.model_dump()["environment"] and "replay" not in plain.model_dump()["environment"]
    assert spec_hash(plain) == spec_hash(load_spec(CALCULATOR, ["environment.record=null"]))
    assert load_spec(CALCULATOR, [f"environment.record={tmp_path}"]).model_dump()["environment"]["record"] == str(
        tmp_path)
    with pytest.raises(SpecError, match=r"environment\.replay: no such directory '.*nowhere'"):
        load_spec(CALCULATOR, [f"environment.replay={tmp_path / 'nowhere'}"])
    with pytest.raises(SpecError, match=r"environment\.record: '.*pyproject\.toml' is a file, not a directory"):
        load_spec(CALCULATOR, ["environment.record=pyproject.toml"])
    with pytest.raises(SpecError, match="give at most one of 'record' and 'replay'"):
        load_spec(CALCULATOR, [f"environment.replay={tmp_path}", f"environment.record={tmp_path}"])
    with pytest.raises(ValueError, match=r"holds no recordings \(\*\.jsonl\)"):
        Agent.from_spec(load_spec(CALCULATOR, [f"environment.replay={tmp_path}"]))


def write_run(run_dir: Path, trajs: list[Trajectory], backend: str) -> Path:
    """A run directory as a backend writes it: manifest and the episodes its workers append."""
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"backend": backend, "spec_hash": "s", "seed": 0}))
    (run_dir / "episodes.jsonl").write_text("".join(json.dumps({"backend": backend, **t.to_dict()}) + "\n"
                                                    for t in trajs))
    return run_dir


def test_the_report_says_when_runs_saw_different_environment_outputs(tmp_path: Path) -> None:
    rec, live = recorded_calculator(tmp_path)
    tooled = next(t for t in live if len(t.turns) >= 2 and t.turns[0].tool_calls)
    answer = tooled.turns[0].observations[0]["content"]
    changed = tmp_path / "changed"  # the recording with one tool result changed: another environment
    shutil.copytree(rec, changed)
    for path in changed.glob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            if row.get("task") == tooled.task_id and row.get("step") == 1:
                row["value"]["observation"][0]["content"] = f"{answer}0"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, same = run(load_spec(CALCULATOR, [f"environment.replay={rec}"]))
    _, other = run(load_spec(CALCULATOR, [f"environment.replay={changed}"]))
    runs = [write_run(tmp_path / "a", live, "trl"), write_run(tmp_path / "b", same, "verl"),
            write_run(tmp_path / "c", other, "openrlhf")]

    assert environment_differences([("a", runs[0]), ("b", runs[1])]) == []  # a replay agrees with its recording
    path, problems = write_comparison(runs, tmp_path / "report")
    said = [p for p in problems if "saw different environment outputs" in p]
    assert said == [f"warning: runs a (trl) and c (openrlhf) saw different environment outputs for task "
                    f"{tooled.task_id} after 1 action",
                    f"warning: runs b (verl) and c (openrlhf) saw different environment outputs for task "
                    f"{tooled.task_id} after 1 action"]
    page = path.read_text()
    assert "<h2>Environment outputs</h2>" in page and f"for task {tooled.task_id} after 1 action</li>" in page
    _, quiet = write_comparison(runs[:2], tmp_path / "quiet")
    assert not any("environment outputs" in p for p in quiet)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentbridge.cli", *args], capture_output=True, text=True,
                          timeout=600)


def test_rollout_record_and_replay_flags_end_to_end(tmp_path: Path) -> None:
    rec, live_dir, replay_dir = tmp_path / "rec", tmp_path / "live", tmp_path / "replayed"
    res = cli("rollout", CALCULATOR, "-n", "6", "--record", str(rec), "-o", str(live_dir))
    assert res.returncode == 0, res.stderr
    assert f"recorded the environment outputs and reward scores of 6 episodes in {rec}" in res.stdout
    assert list(rec.glob("*.jsonl"))
    res = cli("rollout", CALCULATOR, "-n", "6", "--replay", str(rec), "-o", str(replay_dir))
    assert res.returncode == 0, res.stderr

    def rows(d: Path) -> list[dict[str, Any]]:
        out = [json.loads(x) for x in (d / "trajectories.jsonl").read_text().splitlines()]
        for row in out:
            for turn in row["turns"]:
                for key in TIMINGS:
                    turn.pop(key)
            row["metrics"] = {k: v for k, v in row["metrics"].items() if not k.startswith("time/")}
        return out

    assert rows(replay_dir) == rows(live_dir) and len(rows(live_dir)) == 6
    report = cli("report", str(live_dir), str(replay_dir), "-o", str(tmp_path / "report"))
    assert report.returncode == 0 and "saw different environment outputs" not in report.stderr

    missing = cli("rollout", CALCULATOR, "-n", "2", "--replay", str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines() == [
        f"error: --replay {tmp_path / 'nowhere'}: environment.replay: no such directory '{tmp_path / 'nowhere'}' "
        "(record one with agentbridge rollout SPEC --record DIR)"]
    both = cli("rollout", CALCULATOR, "-n", "2", "--replay", str(rec), "--record", str(tmp_path / "again"))
    assert both.returncode == 1 and "give at most one of 'record' and 'replay'" in both.stderr


def test_a_long_replay_path_is_still_blamed_on_the_flag(tmp_path: Path) -> None:
    """A problem names a --set item shortened past 100 characters; the --replay flag is still the one blamed."""
    from click.testing import CliRunner

    from agentbridge.cli import main as cli

    nowhere = tmp_path / ("d" * 120)
    result = CliRunner().invoke(cli, ["rollout", "examples/calculator.yaml", "--replay", str(nowhere)])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert lines and lines[0].startswith(f"error: --replay {nowhere}: environment.replay: no such directory"), lines

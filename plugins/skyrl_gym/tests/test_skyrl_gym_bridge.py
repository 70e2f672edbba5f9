"""The SkyRL-gym bridge against SkyRL-gym 0.4.0 itself: its offline envs (gsm8k, gsm8k_multi_turn, text2sql with
its SQL tool group) played by the scripted expert through agentbridge's environment checker, multi-turn state and
turn-level rewards through the driver, the token sequence equal to the chat template's rendering of SkyRL's
messages, SkyRL's parquet rows, validate + compile for every backend, and a short training run on CPU."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.env import Task
from agentbridge.plugins import get_plugins
from agentbridge.rewards import PROCESS
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.testing import check_environment, short_training_run
from agentbridge_skyrl_gym.env import SkyRLGymEnv, final_reward, solved
from agentbridge_skyrl_gym.tasks import arithmetic_tasks, database_file, dataset_rows, sql_tasks

SPEC = "examples/skyrl_gym.yaml"


@pytest.mark.parametrize("env_class", ["gsm8k", "gsm8k_multi_turn"])
def test_the_expert_solves_the_gsm8k_envs(env_class: str) -> None:
    tasks = arithmetic_tasks("eval", 6, env_class=env_class)
    check_environment(functools.partial(SkyRLGymEnv, env_class, max_turns=5), tasks,
                      rewards={"skyrl/solved": solved, "skyrl/final": final_reward}, max_turns=5)


def test_the_expert_solves_text2sql_with_its_sql_tool(tmp_path: Path) -> None:
    tasks = sql_tasks("eval", 8)
    env = functools.partial(SkyRLGymEnv, "text2sql", env_config={"db_path": str(tmp_path)}, max_turns=4)
    check_environment(env, tasks, rewards={"skyrl/solved": solved}, max_turns=4)
    assert {t.data["skyrl"]["db_id"] for t in tasks} <= {f"shop_{i}" for i in range(20_000, 20_008)}
    assert not {t.data["skyrl"]["db_id"] for t in tasks} & {t.data["skyrl"]["db_id"] for t in sql_tasks(
        "train", 64)}  # each split its own databases


def test_multi_turn_state_and_turn_rewards_through_the_driver() -> None:
    agent = Agent.from_spec(load_spec(SPEC, ["environment.args.env_class=gsm8k_multi_turn",
                                             "environment.args.env_config={}", "agent.max_turns=5",
                                             "environment.args.max_turns=5"]))
    [task] = arithmetic_tasks("eval", 1, env_class="gsm8k_multi_turn")
    truth = task.data["skyrl"]["reward_spec"]["ground_truth"]
    script = ["I think it is #### 100000", "no answer yet", f"#### {truth}"]
    [traj] = asyncio.run(agent.run([task], lambda env: ScriptedPolicy(agent.tokenizer, script)))
    assert traj.finish_reason == "done" and traj.error is None
    # SkyRL-gym's own turn-level rewards: format score 0.2 / max_turns for a well-formed wrong answer, 0 without
    # one, 1 for the right answer (which ends the episode)
    assert [turn.reward for turn in traj.turns] == pytest.approx([0.04, 0.0, 1.0])
    assert traj.reward_components[PROCESS] == pytest.approx(1.04)
    hints = [m["content"] for m in traj.messages if m["role"] == "user"][1:]
    assert hints == ["Please provide your step-by-step reasoning, and also include a tentative numeric answer at "
                     "the end in the exact format: '#### ANSWER'."] * 2
    assert traj.metrics["skyrl/steps"] == 3.0  # the env's get_metrics() at the end


def test_the_tokens_are_the_chat_templates_rendering_of_skyrls_messages(tmp_path: Path) -> None:
    """What SkyRL's generator shows the model (its messages, rendered by the chat template) is what the driver
    built, token for token, across a tool turn."""
    agent = Agent.from_spec(load_spec(SPEC, [f"environment.args.env_config.db_path={tmp_path}"]))
    tasks = sql_tasks("eval", 3)
    for traj in asyncio.run(agent.run(tasks, ScriptedPolicy.expert_factory(agent))):
        assert traj.finish_reason == "done" and traj.reward_components["skyrl/solved"] == 1.0
        assert traj.metrics["tools/calls"] == 1.0 and "<observation>" in traj.messages[3]["content"]
        assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "user", "assistant"]
        rendered = agent.tokenizer.apply_chat_template(traj.messages, tokenize=False)
        assert agent.tokenizer.decode(traj.prompt_ids + traj.response_ids) == rendered.rstrip("\n")
        env_tokens = [i for i, m in zip(traj.response_ids, traj.response_mask, strict=True) if m == 0]
        assert agent.tokenizer.decode(env_tokens).startswith("\n<|im_start|>user\n\n\n<observation>")


def test_skyrl_parquet_rows_are_tasks(tmp_path: Path) -> None:
    import pandas as pd

    rows = [t.data["skyrl"] for t in arithmetic_tasks("train", 5)]
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")  # as SkyRL's gsm8k_dataset.py writes them
    tasks = dataset_rows("train", 5, path=str(tmp_path / "train.parquet"))
    assert [t.data["skyrl"] for t in tasks] == rows and tasks[0].prompt == rows[0]["prompt"][0]["content"]
    check_environment(functools.partial(SkyRLGymEnv, "gsm8k"), tasks, rewards={"skyrl/solved": solved})
    with pytest.raises(ValueError, match="at most 5 distinct train tasks"):
        dataset_rows("train", 6, path=str(tmp_path / "train.parquet"))


def test_a_wrong_env_name_and_a_missing_row_are_one_line() -> None:
    with pytest.raises(ValueError, match="no SkyRL-gym env 'gsm9k' \\(registered: aime, gsm8k"):
        SkyRLGymEnv("gsm9k")
    env = SkyRLGymEnv("gsm8k")
    with pytest.raises(ValueError, match="no SkyRL dataset row"):
        asyncio.run(env.reset(Task(id="x", prompt="2+2?")))


def test_the_env_writes_a_missing_database_and_the_dataset_writes_nothing(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    [task] = sql_tasks("dev", 1)
    assert list(tmp_path.iterdir()) == []
    env = SkyRLGymEnv("text2sql", env_config={"db_path": str(tmp_path / "b")})
    asyncio.run(env.reset(task))
    assert database_file(str(tmp_path / "b"), task.data["skyrl"]["db_id"]).is_file()


def test_the_example_validates_and_compiles_for_every_backend(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["validate", SPEC])
    assert result.exit_code == 0, result.output
    backends = sorted(get_plugins().backends.ids())
    assert {"trl", "verl", "openrlhf"} <= set(backends)
    for backend in backends:
        result = CliRunner().invoke(main, ["compile", SPEC, "--backend", backend, "-o", str(tmp_path / backend),
                                           "--set", "data.dev.size=4",
                                           "--set", "data.train.size=8", "--set", "data.eval.size=4"])
        assert result.exit_code == 0, f"{backend}: {result.output}"
        manifest = json.loads((tmp_path / backend / "manifest.json").read_text())
        assert manifest["backend"] == backend and manifest["tasks"]["train"] == 8


def test_a_short_training_run_on_cpu(tmp_path: Path) -> None:
    rows = short_training_run(SPEC, tmp_path / "run", ["data.dev.size=4", "data.eval.size=4", "agent.max_turns=2",
                                                       "environment.args.max_turns=2", "algorithm.warm_start.demos=16",
                                                       "algorithm.warm_start.max_steps=2",
                                                       "algorithm.warm_start.dev_every=2",
                                                       "algorithm.warm_start.batch_size=8"])
    assert [r["step"] for r in rows] == [1, 2] and all("reward/skyrl/solved" in r for r in rows)
    assert all(f"reward/{PROCESS}" in r for r in rows)  # SkyRL-gym's step rewards
    assert {"before_training", "before_rl", "after_rl"} <= set(json.loads((tmp_path / "run" / "eval.json").read_text()))

"""The GEM bridge against gem-llm 0.1.0 itself, in its own venv (``.venv-gem``, made by ``gem_env.sh`` on first use):
GEM's offline envs (Guess The Number, reasoning-gym questions) played by the expert through agentbridge's
environment checker, a multi-turn episode's hints, rewards and end through the driver with the tokens equal to
the chat template's rendering of GEM's messages, GEM's python tool wrapper as the model's tool, episodes
interleaved in one worker playing as they would alone, a worker killed mid-episode, one-line errors,
validate + compile for every backend, and a short training run on CPU."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.plugins import get_plugins
from agentbridge.rewards import PROCESS
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.testing import check_environment, short_training_run
from agentbridge.trajectory import Trajectory
from agentbridge_gem.client import GemError, gem_python, pool
from agentbridge_gem.env import GemEnvironment, final_reward, success
from agentbridge_gem.tasks import gem_episodes

SPEC = "examples/gem.yaml"


@pytest.fixture(scope="module", autouse=True)
def gem_venv() -> Path:
    """GEM's python (``gem_env.sh`` creates ``.venv-gem`` the first time)."""
    try:
        return gem_python()
    except GemError as e:
        pytest.fail(str(e), pytrace=False)


def _agent(*sets: str) -> Agent:
    return Agent.from_spec(load_spec(SPEC, list(sets)))


@pytest.mark.parametrize("env_id", ["game:GuessTheNumber-v0-hard", "rg:leg_counting"])
def test_the_expert_solves_every_episode(env_id: str) -> None:
    check_environment(functools.partial(GemEnvironment, env_id), gem_episodes("eval", 4, env_id=env_id),
                      rewards={"gem/success": success, "gem/final": final_reward}, max_turns=8)


def test_a_multi_turn_episode_is_gems_messages_token_for_token() -> None:
    agent = _agent("environment.args.env_id=game:GuessTheNumber-v0-hard", "agent.max_turns=7")
    trajs = asyncio.run(agent.run(gem_episodes("eval", 6, env_id="game:GuessTheNumber-v0-hard"),
                                  ScriptedPolicy.expert_factory(agent)))
    for traj in trajs:
        assert traj.finish_reason == "done" and traj.error is None and traj.reward_components["gem/success"] == 1.0
        assert [t.reward for t in traj.turns] == [0.0] * (len(traj.turns) - 1) + [1.0]  # GEM's rewards per step
        first = traj.messages[0]["content"]
        assert first.startswith("You are playing language games. Make valid actions to win.\nObservation: You are "
                                "playing Guess The Number.") and "Enter your next guess." in first  # GEM's suffix
        hints = [m["content"] for m in traj.messages[2::2]]
        assert all(h.startswith(f"At turn {i + 1}, you guessed ") and h.endswith("\nEnter your next guess.")
                   for i, h in enumerate(hints))
        rendered = agent.tokenizer.apply_chat_template(traj.messages, tokenize=False)
        assert agent.tokenizer.decode(traj.prompt_ids + traj.response_ids) == rendered.rstrip("\n")
    assert max(len(t.turns) for t in trajs) >= 4  # several steps of one GEM session


def test_gems_python_tool_is_the_models_tool() -> None:
    agent = _agent("environment.args.env_id=rg:basic_arithmetic", "environment.args.wrappers=[python_tool]",
                   "environment.args.template=null", "agent.max_tokens_per_turn=32")
    [task] = gem_episodes("eval", 1, env_id="rg:basic_arithmetic")

    def script(env: GemEnvironment) -> ScriptedPolicy:
        turns = iter(["<python>print(6 * 7)</python>", "<python>print(6 *</python>", None])
        return ScriptedPolicy(agent.tokenizer, lambda: next(turns) or env.expert_action())

    [traj] = asyncio.run(agent.run([task], script))
    assert traj.finish_reason == "done" and traj.reward_components["gem/success"] == 1.0, traj.error
    assert "wrapped within <python>...</python> tags" in traj.messages[0]["content"]  # GEM's tool instructions
    replies = [m for m in traj.messages if m["role"] == "tool"]
    assert replies[0]["content"] == "Code execution result: 42\n\n" and "SyntaxError" in replies[1]["content"]
    assert traj.metrics["tools/calls"] == 2.0 and traj.metrics["tools/failures"] == 1.0
    # GEM's python_tool rewards: 0.05 a use, +0.25 when it runs; then the answer's 1.0
    assert [t.reward for t in traj.turns] == pytest.approx([0.3, 0.05, 1.0])
    assert traj.reward_components[PROCESS] == pytest.approx(1.35)


def test_interleaved_episodes_play_as_they_would_alone() -> None:
    """Game2048 draws a new tile from the global RNG at every step: each session keeps its own RNG state."""
    moves = ["\\boxed{up}", "\\boxed{left}", "\\boxed{down}", "\\boxed{right}"] * 3
    tasks = gem_episodes("eval", 2, env_id="game:Game2048-v0-easy")

    async def play(interleave: bool) -> list[list[str]]:
        a, b = GemEnvironment("game:Game2048-v0-easy"), GemEnvironment("game:Game2048-v0-easy")
        seen: list[list[str]] = [[(await a.reset(tasks[0]))[0]["content"]], []]
        if interleave:
            seen[1].append((await b.reset(tasks[1]))[0]["content"])
        for move in moves:
            seen[0] += [m["content"] for m in (await a.step({"role": "assistant", "content": move})).observation]
            if interleave:
                seen[1] += [m["content"] for m in (await b.step({"role": "assistant", "content": move})).observation]
        await a.close()
        await b.close()
        return seen

    alone, together = asyncio.run(play(False)), asyncio.run(play(True))
    assert alone[0] == together[0] and len(alone[0]) > 5
    assert together[1][0] != together[0][0]  # another seed, another board


def test_bad_ids_and_wrappers_are_one_line() -> None:
    with pytest.raises(ValueError, match="not a GEM env id"):
        GemEnvironment("GuessTheNumber")
    task = gem_episodes("eval", 1)[0]
    wrong = "no GEM env 'game:GuessTheNumber-v9' \\(did you mean: game:GuessTheNumber-v0-hard"
    for env, match in [(GemEnvironment("game:GuessTheNumber-v9"), wrong),
                       (GemEnvironment(wrappers=["concat_chat"]), "rewrites the observation history as text"),
                       (GemEnvironment(wrappers=["pyhton_tool"]), "no GEM wrapper 'pyhton_tool' \\(tool wrappers: ")]:
        with pytest.raises(GemError, match=match):
            asyncio.run(env.reset(task))


def test_a_worker_killed_mid_episode_errors_that_episode_and_the_next_starts_a_new_one() -> None:
    agent = _agent("environment.args.env_id=game:GuessTheNumber-v0-hard", "agent.max_turns=7",
                   "environment.args.workers=1")
    tasks = gem_episodes("eval", 2, env_id="game:GuessTheNumber-v0-hard")

    class KillOnSecondTurn:
        def __init__(self, env: GemEnvironment) -> None:
            self.env, self.expert, self.turns = env, ScriptedPolicy.for_env(env, agent.tokenizer), 0

        async def generate(self, *args: object, **kwargs: object) -> object:
            self.turns += 1
            if self.turns == 2:
                assert self.env.worker is not None
                self.env.worker.proc.kill()
                self.env.worker.proc.wait()
            return await self.expert.generate(*args, **kwargs)  # type: ignore[arg-type]

    [dead] = asyncio.run(agent.run(tasks[:1], lambda env: KillOnSecondTurn(env)))
    # the expert's second move asks the dead worker: the episode ends there, with one line
    assert dead.finish_reason == "error" and len(dead.turns) == 1 and "\n" not in (dead.error or ""), dead.error
    assert "the GEM worker" in (dead.error or "") and "exited -9" in (dead.error or "")
    again: list[Trajectory] = asyncio.run(agent.run(tasks, ScriptedPolicy.expert_factory(agent)))
    assert all(t.finish_reason == "done" and t.reward_components["gem/success"] == 1.0 for t in again)
    assert pool(None, 1).workers[0] is not None and pool(None, 1).workers[0].alive


def test_the_example_validates_and_compiles_for_every_backend(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["validate", SPEC])
    assert result.exit_code == 0, result.output
    backends = sorted(get_plugins().backends.ids())
    assert {"trl", "verl", "openrlhf"} <= set(backends)
    for backend in backends:
        result = CliRunner().invoke(main, ["compile", SPEC, "--backend", backend, "-o", str(tmp_path / backend),
                                           "--set", "data.train.size=8", "--set", "data.eval.size=4",
                                           "--set", "data.dev.size=4"])
        assert result.exit_code == 0, f"{backend}: {result.output}"
        manifest = json.loads((tmp_path / backend / "manifest.json").read_text())
        assert manifest["backend"] == backend and manifest["tasks"]["train"] == 8


def test_a_short_training_run_on_cpu(tmp_path: Path) -> None:
    rows = short_training_run(SPEC, tmp_path / "run", ["data.dev.size=4", "data.eval.size=4",
                                                       "algorithm.warm_start.demos=16",
                                                       "algorithm.warm_start.max_steps=2",
                                                       "algorithm.warm_start.dev_every=2",
                                                       "algorithm.warm_start.batch_size=8"])
    assert [r["step"] for r in rows] == [1, 2] and all("reward/gem/success" in r for r in rows)
    assert all(f"reward/{PROCESS}" in r for r in rows)  # GEM's step rewards
    assert {"before_training", "before_rl", "after_rl"} <= set(json.loads((tmp_path / "run" / "eval.json").read_text()))

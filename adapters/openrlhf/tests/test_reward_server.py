"""``core/reward_model`` with ``serve: backend`` on OpenRLHF: the job serves the reward model with OpenRLHF's own
``serve_rm`` (checked with its own parser), the driver scores each step's episodes through it in batches, a dead
server costs counted reward errors, and ``submit.sh`` hands the server's address to the Job's workers."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_job import train_ray_init_runtime_env

from agentbridge import reward_model
from agentbridge.backends import compile_job
from agentbridge.models import resolve_model_path
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.spec import load_spec
from agentbridge.testing import merge_as_ray_init, ray_driver_env, ray_job_submitted
from agentbridge_openrlhf.backend import OpenRLHFBackend
from agentbridge_openrlhf.reward_server import wait_ready

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = "Question: {prompt}\nAnswer: {answer}"


def served_spec(args: dict[str, Any] | None = None, sets: list[str] | None = None) -> Any:
    rm = {"path": "builtin:tiny-rm", "serve": "backend", "template": TEMPLATE, "batch_size": 8, **(args or {})}
    reward = json.dumps([{"id": "core/exact_answer"}, {"id": "core/reward_model", "weight": 0.1, "args": rm}])
    return load_spec(ROOT / "examples/calculator.yaml", [f"reward={reward}", *(sets or [])])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """OpenRLHF's serve_rm over builtin:tiny-rm, started as the job's launch.sh starts it (its flags from the
    compiled job), with the CPU stand-ins for deepspeed and flash-attn."""
    job = compile_job(served_spec(), OpenRLHFBackend(), tmp_path_factory.mktemp("job") / "job")
    flags = [str(resolve_model_path("builtin:tiny-rm")) if a == "@RM@" else a
             for a in job.manifest["reward_server"][3:]]
    port = free_port()
    log = tmp_path_factory.mktemp("rm") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "agentbridge_openrlhf.standins.serve_rm", *flags,
                                 "--host", "127.0.0.1", "--port", str(port)], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/get_reward"
    try:
        wait_ready(url, pid=proc.pid, log=str(log), timeout_s=300)
        yield url, proc
    finally:
        proc.kill()
        proc.wait()


def run(spec: Any, n: int) -> list[Any]:
    agent = Agent.from_spec(spec)
    tasks = agent.tasks("eval", size=n)
    return asyncio.run(agent.run(tasks, lambda env: ScriptedPolicy.for_env(env, agent.tokenizer)))


def test_the_job_serves_the_reward_model_with_serve_rm_checked_by_its_own_parser(tmp_path: Path) -> None:
    job = compile_job(served_spec(), OpenRLHFBackend(), tmp_path / "job")
    assert job.manifest["reward_server"][:3] == ["python", "-m", "openrlhf.cli.serve_rm"]
    launch = (job.path / "launch.sh").read_text()
    assert launch.index("openrlhf.cli.serve_rm") < launch.index("reward_server wait") < launch.index(
        "openrlhf.cli.train_ppo_ray")  # served, and answering, before the trainer starts
    assert OpenRLHFBackend().validate(job).ok
    # serve_rm's own parser refuses a flag it does not have, and a causal LM is no reward model
    manifest = json.loads((job.path / "manifest.json").read_text())
    manifest["reward_server"] += ["--ds.no_such_flag", "1"]
    (job.path / "manifest.json").write_text(json.dumps(manifest))
    [problem] = OpenRLHFBackend().validate(job).problems
    assert "serve_rm rejects the reward server's flags: unrecognized arguments: --ds.no_such_flag 1" in str(problem)
    lm = compile_job(served_spec({"path": "builtin:tiny"}), OpenRLHFBackend(), tmp_path / "lm")
    [problem] = OpenRLHFBackend().validate(lm).problems
    assert "not a sequence-classification reward model" in str(problem)


def test_episodes_are_scored_by_serve_rm_in_batches_with_the_models_scores(
        server: tuple[str, subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    url, _ = server
    monkeypatch.setenv(reward_model.URL_ENV, url)  # what launch.sh exports for the trainer's workers
    trajs = run(served_spec(), 16)
    [served] = [m for m in reward_model._MODELS.values() if isinstance(m, reward_model.ServedRewardModel)
                and m.url == url]
    assert sum(served.batches) == 16 and max(served.batches) > 1  # a step's episodes, batched
    here = reward_model.RewardModel(reward_model.RewardModelArgs(path="builtin:tiny-rm", template=TEMPLATE))
    agent = Agent.from_spec(served_spec())
    tasks = agent.tasks("eval", size=16)
    texts = [reward_model.episode_text(t, task, TEMPLATE, here.tokenizer) for t, task in zip(trajs, tasks,
                                                                                         strict=True)]
    scores = [t.reward_components["core/reward_model"] for t in trajs]
    # serve_rm runs the model in bf16 (its recipe's dtype), the driver's own copy in fp32
    assert scores == pytest.approx(here.score_batch(texts), abs=0.02)
    assert len({round(s, 4) for s in scores}) > 1 and all(t.metrics["reward/errors"] == 0 for t in trajs)


def test_a_dead_server_costs_counted_reward_errors_not_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()  # nothing listens there
    trajs = run(served_spec({"url": f"http://127.0.0.1:{port}/get_reward", "retries": 1}), 4)
    assert all(t.finish_reason == "done" and t.metrics["reward/errors"] == 1 for t in trajs)
    assert all(t.reward_components["core/reward_model"] == 0.0 for t in trajs)
    assert "reward-model server http://127.0.0.1" in (trajs[0].error or "") and "after 1 retries" in trajs[0].error
    monkeypatch.delenv(reward_model.URL_ENV, raising=False)
    trajs = run(served_spec({"batch_size": 4}), 2)  # serve: backend, but no job served it
    assert all(t.metrics["reward/errors"] == 1 for t in trajs)
    assert f"{reward_model.URL_ENV} is not set" in (trajs[0].error or "")


def test_submit_hands_the_servers_address_to_the_jobs_workers(tmp_path: Path) -> None:
    job = OpenRLHFBackend().compile(served_spec(sets=["resources.nodes=2", "resources.gpus_per_node=8"]),
                                    tmp_path / "job")
    env = {"PYTHON": sys.executable, "OUT": str(tmp_path / "shared")}
    refused = subprocess.run(["bash", str(job.path / "submit.sh")], capture_output=True, text=True,
                             env={**os.environ, **env, "AGENTBRIDGE_REWARD_MODEL_URL": ""})
    assert refused.returncode == 2 and "set AGENTBRIDGE_REWARD_MODEL_URL to its http://HOST:PORT/get_reward" in \
        refused.stderr and "openrlhf.cli.serve_rm --reward.model_name_or_path" in refused.stderr
    url = "http://10.0.0.7:18500/get_reward"
    job_env, entrypoint = ray_job_submitted(job.path / "submit.sh", tmp_path,
                                            {**env, "AGENTBRIDGE_REWARD_MODEL_URL": url})
    assert job_env["env_vars"] == {"AGENTBRIDGE_REWARD_MODEL_URL": url, "AGENTBRIDGE_RUN_DIR": env["OUT"]}
    assert entrypoint[-2:] == ["bash", "submit.sh"]  # itself, in the job: its check finds the address there
    init_env = train_ray_init_runtime_env("openrlhf.cli.train_ppo_ray",
                                          {**ray_driver_env(job_env), "TOKENIZERS_PARALLELISM": "false"})
    merged = merge_as_ray_init(job_env, init_env)  # OpenRLHF's own ray.init inside the Job keeps the address
    assert merged["env_vars"]["AGENTBRIDGE_REWARD_MODEL_URL"] == url

"""``core/reward_model`` with ``serve: backend`` on veRL: the job turns on veRL's own reward-model server (checked by
veRL's config code), and the driver inside veRL's ``AgentLoopWorker`` scores each step's episodes through veRL's
reward router, whose address it gets from the ``RewardLoopWorker`` veRL's ``RewardLoopManager`` handed it to.

Real: veRL's ``RewardLoopManager`` and its ``RewardLoopWorker`` Ray actors (on a local Ray), ``AgentLoopWorker``,
the composed job config. Stand-ins, named as such: the vLLM server and router behind the address
(``vllm_classify_standin``: ``/classify`` over ``builtin:tiny-rm``) and the policy's LLM server (scripted turns).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import SMALL, compile_job
from omegaconf import open_dict
from vllm_classify_standin import ClassifyServerStandIn, serving
from worker_harness import (
    ScriptedServer,
    calculator_script,
    compose_worker_config,
    input_batch,
    record_trajectories,
    unpadded_rows,
)

from agentbridge import reward_model
from agentbridge.backends import Job
from agentbridge.models import load_tokenizer
from agentbridge.rollout.agent import load_tasks
from agentbridge.spec import load_spec
from agentbridge_verl import reward_server
from agentbridge_verl.backend import VerlBackend

PROMPTS = 2


def served_reward(**args: Any) -> str:
    rm = {"path": "builtin:tiny-rm", "serve": "backend", "batch_size": 8, **args}
    return "reward=" + json.dumps([{"id": "core/exact_answer"}, {"id": "core/reward_model", "weight": 0.1,
                                                                 "args": rm}])


@pytest.fixture(scope="module")
def served_job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    return compile_job(tmp_path_factory.mktemp("rm") / "job", served_reward(retries=1, timeout_s=20),
                       'backend.options={"reward_workers": 1}')


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@contextmanager
def reward_loop(cfg: Any, router: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """veRL's ``RewardLoopManager`` for the job, its reward-model servers and router standing in at ``router``."""
    import ray
    import verl.experimental.reward_loop.reward_loop as verl_reward_loop

    class RewardServersStandIn:
        """Stand-in for veRL's ``RewardModelManager`` (vLLM servers + reward router): only its router address."""

        def __init__(self, config: Any, resource_pool: Any = None) -> None:
            self.config = config

        def get_router_address(self) -> str:
            return router

        def wake_up(self) -> None:
            pass

        def sleep(self) -> None:
            pass

    monkeypatch.setattr(verl_reward_loop, "RewardModelManager", RewardServersStandIn)
    manager = verl_reward_loop.RewardLoopManager(cfg)
    try:
        yield manager
    finally:
        for worker in manager.reward_loop_workers:
            ray.kill(worker)
        reward_server.disconnect()


def rollout(cfg: Any, manager: Any, job: Job) -> tuple[Any, list[Any]]:
    """One ``AgentLoopWorker.generate_sequences`` with the reward-loop handles the trainer hands it."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    spec = load_spec(job.path / "spec.yaml")
    tokenizer = load_tokenizer(spec.model.path)
    server = ScriptedServer(tokenizer, calculator_script(load_tasks(spec, "train")))
    recorder = record_trajectories()

    async def go() -> Any:
        worker = AgentLoopWorker(cfg, llm_client=server, reward_loop_worker_handles=manager.reward_loop_worker_handles)
        return await worker.generate_sequences(input_batch(cfg, tokenizer, PROMPTS))

    return asyncio.run(go()), list(recorder.trajectories)


def worker_config(job: Job) -> Any:
    cfg = compose_worker_config(job.path)
    assert cfg.reward.reward_model.enable and cfg.reward.reward_model.enable_resource_pool
    with open_dict(cfg):
        cfg.reward.num_workers = 1
    return cfg


def test_verl_serves_reward_models_and_agentbridge_backends_says_so() -> None:
    from click.testing import CliRunner

    from agentbridge.backends import known_capabilities
    from agentbridge.cli import main

    assert VerlBackend().capabilities().serves_reward_models
    assert known_capabilities()["verl"].serves_reward_models
    result = CliRunner().invoke(main, ["backends"], terminal_width=400)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = [c.strip() for c in next(line for line in lines if "┃ backend" in line).split("┃")]
    row = [c.strip() for c in next(line for line in lines if line.startswith("│ verl ")).split("│")]
    assert row[header.index("serves RMs")] == "yes"
    bad = load_spec("examples/calculator.yaml", [*SMALL, served_reward(), 'backend.options={'
                    '"reward_model_gpus_per_node": 0, "reward_model_gpu_memory_utilization": 1.5}'])
    assert [str(p) for p in VerlBackend().check(bad)] == [
        "backend.options.reward_model_gpus_per_node: must be an integer >= 1, got 0",
        "backend.options.reward_model_gpu_memory_utilization: must be a number in (0, 1], got 1.5"]


def test_serve_backend_compiles_to_verls_reward_model_server_checked_by_verl(tmp_path: Path) -> None:
    from agentbridge.backends import compile_job as checked_compile

    spec = load_spec("examples/calculator.yaml", [*SMALL, served_reward()])
    job = checked_compile(spec, VerlBackend(), tmp_path / "job")  # no longer refused
    cfg = compose_worker_config(job.path)
    rm = cfg.reward.reward_model
    assert (rm.enable, rm.enable_resource_pool, rm.nnodes, rm.n_gpus_per_node) == (True, True, 1, 1)
    assert (rm.rollout.name, rm.rollout.free_cache_engine, rm.rollout.tensor_model_parallel_size) == ("vllm", False, 1)
    assert (Path(rm.model_path) / "config.json").is_file()  # launch.sh's RM_MODEL: builtin:tiny-rm, built
    assert '"reward.reward_model.model_path=$RM_MODEL"' in (job.path / "launch.sh").read_text()
    report = VerlBackend().validate(job)
    assert report.ok, report.problems
    # veRL's own checks refuse a bad reward-model setting, one line each
    wide = compile_job(tmp_path / "wide", served_reward(), 'backend.overrides={"reward": {"reward_model": '
                       '{"rollout": {"tensor_model_parallel_size": 2}}}}')
    [problem] = VerlBackend().validate(wide).problems
    assert str(problem) == ("reward.reward_model.rollout.tensor_model_parallel_size: not enough GPUs to run the "
                            "reward model: its pool has 1, one server needs 2 (tensor x data x pipeline parallel)")
    pool = compile_job(tmp_path / "pool", served_reward(), 'backend.overrides={"reward.reward_model.nnodes": 0}')
    [problem] = VerlBackend().validate(pool).problems
    assert "veRL's trainer rejects its resource pool: config.reward.reward_model.nnodes must be greater than 0" in str(
        problem)
    colocated = compile_job(tmp_path / "colocated", served_reward(),
                            'backend.overrides={"reward.reward_model.enable_resource_pool": false}')
    [problem] = VerlBackend().validate(colocated).problems
    assert str(problem).startswith("reward.reward_model.enable_resource_pool: must be true")
    lm = compile_job(tmp_path / "lm", served_reward(path="builtin:tiny"))
    [problem] = VerlBackend().validate(lm).problems
    assert "core/reward_model path builtin:tiny: a Qwen2ForCausalLM, not a sequence-classification" in str(problem)


def test_the_driver_scores_through_verls_reward_router_in_batches(
        served_job: Job, local_ray: None, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = worker_config(served_job)
    standin = ClassifyServerStandIn(cfg.reward.reward_model.model_path)
    with serving(standin) as router, reward_loop(cfg, router, monkeypatch) as manager:
        gen, trajectories = rollout(cfg, manager, served_job)
    episodes = PROMPTS * cfg.actor_rollout_ref.rollout.n
    assert len(trajectories) == len(gen) == episodes
    # veRL's /classify request, with the model named as veRL's servers serve it; a step's episodes batched
    assert all(r["model"] == cfg.reward.reward_model.model_path and r["use_activation"] is False
               for r in standin.requests)
    sizes = [len(r["input"]) for r in standin.requests]
    assert sum(sizes) == episodes and max(sizes) > 1
    [served] = [m for m in reward_model._MODELS.values() if isinstance(m, reward_model.ServedRewardModel)
                and m.url == f"http://{router}/classify"]
    assert served.protocol == "classify"
    # the scores are the model's: the same as the driver loading it, episode by episode
    args = reward_model.RewardModelArgs(path="builtin:tiny-rm")
    here = reward_model.RewardModel(args)
    tasks = {t.id: t for t in load_tasks(load_spec(served_job.path / "spec.yaml"), "train")}
    texts = [reward_model.episode_text(t, tasks[t.task_id], args.template, here.tokenizer) for t in trajectories]
    scores = [t.reward_components["core/reward_model"] for t in trajectories]
    assert scores == pytest.approx([here.score_batch([text])[0] for text in texts], abs=1e-5)
    assert len({round(s, 6) for s in scores}) > 1 and all(t.metrics["reward/errors"] == 0 for t in trajectories)
    # and reach veRL's batch inside each episode's reward: exact answer + 0.1 x the reward model's score
    assert all(t.reward == pytest.approx(t.reward_components["core/exact_answer"] + 0.1 * s)
               for t, s in zip(trajectories, scores, strict=True))
    assert sorted(r["reward"] for r in unpadded_rows(gen)) == pytest.approx(sorted(t.reward for t in trajectories))


def test_a_router_that_is_down_costs_counted_reward_errors_not_the_batch(
        served_job: Job, local_ray: None, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = worker_config(served_job)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        router = f"127.0.0.1:{s.getsockname()[1]}"
    with reward_loop(cfg, router, monkeypatch) as manager:
        gen, trajectories = rollout(cfg, manager, served_job)
    assert len(gen) == len(trajectories) == PROMPTS * cfg.actor_rollout_ref.rollout.n
    assert all(t.finish_reason == "done" and t.metrics["reward/errors"] == 1 for t in trajectories)
    assert all(t.reward_components["core/reward_model"] == 0.0 for t in trajectories)
    assert f"reward-model server http://{router}/classify" in (trajectories[0].error or "")
    assert "after 1 retries" in (trajectories[0].error or "")

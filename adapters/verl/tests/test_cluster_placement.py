"""A compiled 2x8 veRL job on a Ray cluster of two raylets with 8 logical GPUs each, up to where CUDA would start.

veRL 0.9.1's own ``main_ppo.main`` runs on the job's config as Hydra composes it from launch.sh's command line:
``validate_config``, then ``run_ppo``: its ``ray.init`` (veRL's runtime env; it joins the cluster through
``RAY_ADDRESS``, as in a Ray job) and the TaskRunner. The TaskRunner (a Ray actor that builds the V1 trainer) is
stood in by :class:`PlacementTaskRunner`, which runs in this process what the trainer's ``_setup`` and
``RayWorkerGroup`` do first: ``_init_resource_pool_mgr``, ``ResourcePoolManager.create_resource_pool`` (veRL's
check of the cluster's GPUs) and ``RayResourcePool.get_placement_groups`` (one STRICT_PACK group per node). It stops
where CUDA would start: ``RayWorkerGroup._create_worker`` (the FSDP actor/rollout workers, which the vLLM rollout
replicas share in the hybrid engine). ``ray.get`` in veRL's placement code gives up after ``WAIT`` seconds, where
veRL would wait forever.
"""

from __future__ import annotations

import time
import types
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import compile_job

from agentbridge.spec import load_spec
from agentbridge.testing import TimedRay

WAIT = 30.0  # seconds a placement group may take to be ready here
# 96 episodes a step: divisible by the 16 GPUs of 2x8 and the 24 of 3x8 (veRL's validate_config)
SIZE = ("algorithm.batch_size=24", "algorithm.group_size=4")



class PlacementTaskRunner:
    """Stands in for ``main_ppo.TaskRunnerV1``: the V1 trainer's resource pools and their placement groups, in this
    process, and nothing after them."""

    placed: ClassVar[list[Any]] = []

    def __init__(self) -> None:
        self.run = types.SimpleNamespace(remote=self._run)

    @classmethod
    def remote(cls) -> PlacementTaskRunner:
        return cls()

    def _run(self, config: Any) -> Any:
        import ray
        from omegaconf import OmegaConf
        from verl.trainer.ppo.v1 import get_trainer_cls

        config.transfer_queue.enable = True  # as TaskRunnerV1.run
        OmegaConf.resolve(config)
        trainer = object.__new__(get_trainer_cls(config.trainer.v1.trainer_mode))
        trainer.config = config
        trainer._init_resource_pool_mgr()
        manager = trainer.resource_pool_manager
        manager.create_resource_pool()
        for pool in manager.resource_pool_dict.values():  # RayWorkerGroup._init_with_resource_pool (bin_pack)
            self.placed += pool.get_placement_groups(strategy="STRICT_PACK", device_name=config.trainer.device)
        return ray.put(None)


@pytest.fixture
def run_main(gpu_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``main_ppo.main`` on a compiled job, joined to the cluster; this process leaves the cluster afterwards."""
    import ray
    from verl.single_controller.ray import base
    from verl.trainer import main_ppo

    from agentbridge.models import resolve_model_path
    from agentbridge_verl.validate import compose_job

    monkeypatch.setenv("RAY_ADDRESS", gpu_cluster.address)
    monkeypatch.setattr(main_ppo, "TaskRunnerV1", PlacementTaskRunner)
    monkeypatch.setattr(base, "ray", TimedRay(WAIT))
    PlacementTaskRunner.placed = []

    def run(job: Path) -> list[Any]:
        spec = load_spec(job / "spec.yaml")
        main_ppo.main.__wrapped__(compose_job(job, spec, str(resolve_model_path(spec.model.path))))
        return PlacementTaskRunner.placed

    yield run
    ray.shutdown()  # the job's placement groups go with its driver


def _live_groups() -> list[dict[str, Any]]:
    from ray.util.placement_group import placement_group_table

    return [g for g in placement_group_table().values() if g["state"] != "REMOVED"]


def test_2x8_job_places_one_group_per_node(run_main: Any, gpu_cluster: Any, tmp_path: Path) -> None:
    import ray
    from ray.util.placement_group import placement_group_table

    job = compile_job(tmp_path / "job", "resources.nodes=2", "resources.gpus_per_node=8", *SIZE)
    groups = run_main(job.path)
    assert ray.get_runtime_context().gcs_address == gpu_cluster.address
    env = ray.get_runtime_context().runtime_env
    assert env["env_vars"]["NCCL_DEBUG"] == "WARN"  # main_ppo's runtime env (get_ppo_ray_runtime_env)
    nodes = [Counter(placement_group_table(pg)["bundles_to_node_id"].values()) for pg in groups]
    assert [list(n.values()) for n in nodes] == [[8], [8]]  # each group on one node (STRICT_PACK) ...
    assert len({node for n in nodes for node in n}) == 2  # ... and the two on different nodes
    assert placement_group_table(groups[0])["bundles"][0] == {"CPU": 3.0, "GPU": 1.0}


def test_3_node_job_fails_fast_on_the_2_node_cluster(run_main: Any, tmp_path: Path) -> None:
    """veRL checks the cluster's GPUs before it creates a placement group: 24 asked of 16 is one line, at once."""
    job = compile_job(tmp_path / "job", "resources.nodes=3", "resources.gpus_per_node=8", *SIZE)
    start = time.monotonic()
    with pytest.raises(ValueError) as failed:
        run_main(job.path)
    assert str(failed.value) == "Total available GPUs 16.0 is less than total desired GPUs 24"
    assert time.monotonic() - start < WAIT and _live_groups() == []


def test_a_job_whose_nodes_fit_no_node_of_the_cluster_is_refused_before_veRL_waits(gpu_cluster: Any,
                                                                                    tmp_path: Path) -> None:
    """1x16 on the 2x8 cluster passes veRL's total-GPU check (16 of 16) and then waits forever for a 16-GPU group
    on one node; launch.sh's cluster check refuses it first, with one line, and lets 2x8 through."""
    import os
    import subprocess
    import sys

    from agentbridge_verl.cluster import job_shape, placement_problem

    job = compile_job(tmp_path / "job", "resources.nodes=1", "resources.gpus_per_node=16", *SIZE).path
    assert job_shape(job, []) == (1, 16)
    assert job_shape(job, ["trainer.nnodes=2", "trainer.n_gpus_per_node=8", "x=1"]) == (2, 8)  # submit.sh's
    assert placement_problem(2, 8, gpu_cluster.address) is None
    problem = placement_problem(1, 16, gpu_cluster.address)
    assert problem is not None and "has 0 such node(s) (GPUs per node: 8, 8)" in problem
    assert "but the Ray cluster at" in (placement_problem(3, 8, gpu_cluster.address) or "")
    start = time.monotonic()  # a RAY_ADDRESS nobody answers at: one line at once, not Ray's minute of retries
    nowhere = placement_problem(2, 8, "127.0.0.1:1")
    assert nowhere is not None and nowhere.startswith("cannot reach the Ray cluster at RAY_ADDRESS=127.0.0.1:1: "
                                                      "nothing answers at 127.0.0.1:1")
    assert time.monotonic() - start < 10
    assert "RAY_ADDRESS is not set" in (placement_problem(2, 8, None) or "")
    assert placement_problem(1, 8, None) is None  # one machine: veRL's own check says it at once

    env = {**os.environ, "RAY_ADDRESS": gpu_cluster.address, "PYTHON": sys.executable, "RUN_DIR": str(tmp_path / "r")}
    started = time.monotonic()
    res = subprocess.run(["bash", str(job / "launch.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and time.monotonic() - started < WAIT
    [line] = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: {job / 'launch.sh'}: the job asks for 1 node(s) with 16 GPUs each"), res.stderr
    assert not (tmp_path / "r" / "eval.json").exists()  # refused before the warm start and evaluations

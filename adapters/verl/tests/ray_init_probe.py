"""Run ``python -m verl.trainer.main_ppo ARGS`` (as ``$PYTHON`` in launch.sh) and stop at its ``ray.init``.

Prints the keyword arguments of that call as one JSON line prefixed ``RAY_INIT `` and exits 0; a real
``ray.init`` would start the trainer on a GPU cluster. Invoked as ``python ray_init_probe.py -m MODULE ARGS``; any
other command line (the launch script's other steps, its cluster check included, and the Ray workers this
interpreter starts as ``py_executable``) runs as it would with this interpreter.

With ``RAY_INIT_PROBE_WORKERS=1`` the probe makes that ``ray.init`` call for real (joining ``$RAY_ADDRESS``, inside
the Job when Ray's job config is in the environment), then starts workers the way veRL 0.9.1 does: a TaskRunner
(``@ray.remote`` actor, default options) that opens veRL's own file logger, one rank per node of the cluster on a
STRICT_SPREAD placement group, each with the ``env_vars`` a ``RayWorkerGroup`` gives its ranks, and one agent-loop
worker per node by node affinity, as ``AgentLoopManager`` places them (the agent loop records there). Every worker
records one episode with :func:`agentbridge.runs.record_episode`; the line ``WORKERS [...]`` says what each saw.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from typing import Any

TRAINER = "verl.trainer.main_ppo"
WORKERS_ENV = "RAY_INIT_PROBE_WORKERS"
SEEN_ENV = ("AGENTBRIDGE_RUN_DIR", "VERL_FILE_LOGGER_PATH", "RANK", "AGENTBRIDGE_JOB")


def _seen(label: str, file_logger: bool = False) -> dict[str, Any]:
    """In a Ray worker: record an episode as the agent loop does, optionally log one row with veRL's FileLogger (the
    TaskRunner's tracker), and say where this worker runs and what its environment holds."""
    import os

    import ray

    from agentbridge.runs import record_episode
    from agentbridge.trajectory import Trajectory

    record_episode(Trajectory(task_id=label, prompt_ids=[1, 2], response_ids=[3], response_mask=[1]), "verl")
    if file_logger:
        from verl.utils.tracking import FileLogger

        tracker = FileLogger("agentbridge", label)
        tracker.log({"probe/step": 1.0}, step=1)
        tracker.finish()
    return {"label": label, "node": ray.get_runtime_context().get_node_id(), "cwd": os.getcwd(),
            "env": {name: os.environ.get(name) for name in SEEN_ENV}}


def _start_workers() -> list[dict[str, Any]]:
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

    @ray.remote
    class TaskRunner:  # main_ppo: task_runner_class.remote()
        def run(self) -> dict[str, Any]:
            return _seen("task_runner", file_logger=True)

    @ray.remote
    class Worker:  # RayWorkerGroup: runtime_env={"env_vars": {WORLD_SIZE, RANK, ...}} on a placement group bundle
        def run(self, label: str) -> dict[str, Any]:
            return _seen(label)

    nodes = [n for n in ray.nodes() if n["Alive"]]
    pg = placement_group([{"CPU": 1, "GPU": 1}] * len(nodes), strategy="STRICT_SPREAD")
    ray.get(pg.ready(), timeout=120)
    ranks = [Worker.options(  # type: ignore[attr-defined]
        runtime_env={"env_vars": {"WORLD_SIZE": str(len(nodes)), "RANK": str(rank)}}, num_cpus=1, num_gpus=1,
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=rank)).remote()
        for rank in range(len(nodes))]
    # AgentLoopManager: one AgentLoopWorker per node, round-robin, by node affinity (where the agent loop records)
    loops = [Worker.options(  # type: ignore[attr-defined]
        name=f"agent_loop_worker_{i}", scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=True))
        .remote() for i, node in enumerate(nodes)]
    runner = TaskRunner.remote()  # type: ignore[attr-defined]
    return list(ray.get([runner.run.remote(), *(w.run.remote(f"rank{i}") for i, w in enumerate(ranks)),
                         *(w.run.remote(f"agent_loop_worker_{i}") for i, w in enumerate(loops))], timeout=300))


if __name__ == "__main__":
    if sys.argv[1:3] != ["-m", TRAINER]:
        os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
    import ray

    module, real_init = sys.argv[2], ray.init

    def _stop(*args: Any, **kwargs: Any) -> None:
        print("RAY_INIT " + json.dumps(kwargs, default=str), flush=True)
        if os.environ.get(WORKERS_ENV) == "1":
            real_init(*args, **kwargs)
            print("WORKERS " + json.dumps(_start_workers()), flush=True)
            ray.shutdown()
        raise SystemExit(0)

    ray.init = _stop
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    raise SystemExit(f"{module} returned without calling ray.init")

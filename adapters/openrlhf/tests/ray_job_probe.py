"""``$PYTHON`` for a replayed ``submit.sh`` Ray job: ``python ray_job_probe.py ARGS`` runs ``python ARGS``, except

- ``-m openrlhf.cli.train_ppo_ray ARGS`` (its ``train`` does not import on CPU): logs its argv, prints the runtime
  env its ``train`` passes to ``ray.init`` (evaluated from the installed source with this environment) as
  ``RAY_INIT {...}``, and with ``RAY_JOB_PROBE_WORKERS=1`` makes that call for real (joining ``$RAY_ADDRESS``, inside
  the Job when Ray's job config is in the environment) and starts workers the way OpenRLHF 0.11.2 does: one actor per
  node on a placement group's ``{"GPU": 1, "CPU": 1}`` bundles, with no runtime env of its own (its vLLM engines,
  where the agent executor runs, and its DeepSpeed actors). Each records an episode with
  :func:`agentbridge.runs.record_episode`; ``WORKERS [...]`` says what each saw. With ``RAY_JOB_PROBE_TRAINED=1`` it
  leaves a trained model's ``config.json`` in ``--ckpt.output_dir``, as the trainer would.
- ``-m agentbridge.training.phases ARGS``: logs its argv; ``prepare`` prints ``$RAY_JOB_PROBE_WARM`` (the
  warm-started model's directory, none when empty).

The log (``$RAY_JOB_PROBE_LOG``) holds one JSON argv per line, in the order of the calls.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

TRAINER = "openrlhf.cli.train_ppo_ray"
PHASES = "agentbridge.training.phases"
SEEN_ENV = ("AGENTBRIDGE_RUN_DIR", "TOKENIZERS_PARALLELISM", "NCCL_DEBUG")


def _seen(label: str) -> dict[str, Any]:
    """In a Ray worker: record an episode as the agent executor does; where this worker runs, what it sees."""
    import os

    import ray

    from agentbridge.runs import record_episode
    from agentbridge.trajectory import Trajectory

    record_episode(Trajectory(task_id=label, prompt_ids=[1, 2], response_ids=[3], response_mask=[1]), "openrlhf")
    return {"label": label, "node": ray.get_runtime_context().get_node_id(), "cwd": os.getcwd(),
            "env": {name: os.environ.get(name) for name in SEEN_ENV}}


def _start_workers(runtime_env: dict[str, Any]) -> list[dict[str, Any]]:
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(runtime_env=runtime_env)  # train()'s own call

    @ray.remote
    class Engine:  # create_vllm_engines: RolloutRayActor.options(num_cpus, num_gpus, scheduling_strategy)
        def run(self, label: str) -> dict[str, Any]:
            return _seen(label)

    nodes = [n for n in ray.nodes() if n["Alive"]]
    pg = placement_group([{"GPU": 1, "CPU": 1}] * len(nodes), strategy="STRICT_SPREAD")
    ray.get(pg.ready(), timeout=120)
    engines = [Engine.options(  # type: ignore[attr-defined]
        num_cpus=1, num_gpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_capture_child_tasks=True, placement_group_bundle_index=i)).remote()
        for i in range(len(nodes))]
    seen = ray.get([e.run.remote(f"engine{i}") for i, e in enumerate(engines)], timeout=300)
    ray.shutdown()
    return list(seen)


def _log(argv: list[str]) -> None:
    with open(os.environ["RAY_JOB_PROBE_LOG"], "a") as f:
        f.write(json.dumps(argv) + "\n")


def _trainer(argv: list[str]) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from ray_job import train_ray_init_runtime_env

    _log(["-m", TRAINER, *argv])
    runtime_env = train_ray_init_runtime_env(TRAINER, dict(os.environ))
    print("RAY_INIT " + json.dumps(runtime_env), flush=True)
    if os.environ.get("RAY_JOB_PROBE_WORKERS") == "1":
        print("WORKERS " + json.dumps(_start_workers(runtime_env)), flush=True)
    if os.environ.get("RAY_JOB_PROBE_TRAINED") == "1":
        out = Path(argv[argv.index("--ckpt.output_dir") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text("{}")


if __name__ == "__main__":
    if sys.argv[1:3] == ["-m", TRAINER]:
        _trainer(sys.argv[3:])
    elif sys.argv[1:3] == ["-m", PHASES]:
        _log(sys.argv[1:])
        if sys.argv[3] == "prepare":
            print(os.environ.get("RAY_JOB_PROBE_WARM", ""))
    else:
        os.execv(sys.executable, [sys.executable, *sys.argv[1:]])

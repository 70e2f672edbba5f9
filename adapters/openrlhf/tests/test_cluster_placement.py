"""A compiled 2x8 OpenRLHF job on a Ray cluster of two raylets with 8 logical GPUs each, up to where CUDA would start.

OpenRLHF 0.11.2's own ``train()`` (``openrlhf/cli/train_ppo_ray.py``, from the installed source) runs on the parsed
args of the compiled launch.sh: its ``ray.init`` (joining the cluster through ``RAY_ADDRESS``, as in a Ray job), the
actor/ref placement group, and ``create_vllm_engines`` (``openrlhf/trainer/ray/vllm_engine.py``) with its own
placement group when the engines get GPUs of their own. Where CUDA would start, the test stops: ``train()`` before
``RayActorGroup`` (the DeepSpeed actors), ``create_vllm_engines`` before its ``LLMRayActor`` loop (vLLM).
``get_strategy`` (DeepSpeed) is a printer that prints nothing. ``ray.get`` gives up after ``WAIT`` seconds, where
``train()`` would wait forever.

The infeasible jobs (more GPUs than the cluster; more nodes without ``RAY_ADDRESS``) run their launch.sh, which
refuses them with one line before anything else runs (``agentbridge_openrlhf.cluster``).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import signal
import subprocess
import sys
import types
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import pytest

from agentbridge.backends import Job
from agentbridge.spec import load_spec
from agentbridge.testing import TimedRay
from agentbridge_openrlhf.backend import OpenRLHFBackend
from agentbridge_openrlhf.cluster import local_gpus, placement_problem
from agentbridge_openrlhf.config import flag_getter, flag_values, gpu_demand
from agentbridge_openrlhf.validate import job_argv, parse_args

WAIT = 30.0  # seconds a placement group may take to be ready here
ROOT = Path(__file__).resolve().parents[3]


def _compile(out: Path, *sets: str) -> Job:
    spec = load_spec(ROOT / "examples/calculator.yaml", ["backend.name=openrlhf", *sets])
    return OpenRLHFBackend().compile(spec, out)


@pytest.fixture(scope="module")
def model() -> str:
    from agentbridge.models import resolve_model_path

    return str(resolve_model_path("builtin:tiny"))



def _cut(path: Path, name: str, stop: Callable[[ast.stmt], bool], returns: str, namespace: dict[str, Any]) -> Any:
    """Function ``name`` of the source file ``path``, cut before its first top-level statement ``stop`` matches and
    returning the expression ``returns`` there."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    cut = next(i for i, s in enumerate(fn.body) if stop(s))
    fn.body = [*fn.body[:cut], ast.Return(ast.parse(returns, mode="eval").body)]
    exec(compile(ast.fix_missing_locations(ast.Module([fn], [])), str(path), "exec"), namespace)  # noqa: S102
    return namespace[name]


def _placement(job: Path, model: str) -> dict[str, Any]:
    """``train()``'s locals when it would create the DeepSpeed actors: its placement groups, ready."""
    from ray.util.placement_group import placement_group

    spec = importlib.util.find_spec("openrlhf")
    assert spec is not None and spec.origin is not None
    package = Path(spec.origin).parent
    ray = TimedRay(WAIT)
    engines = _cut(package / "trainer/ray/vllm_engine.py", "create_vllm_engines",
                   lambda s: isinstance(s, ast.For), "shared_pg",
                   {"ray": ray, "placement_group": placement_group, "Optional": Optional})
    train = _cut(package / "cli/train_ppo_ray.py", "train", lambda s: "RayActorGroup(" in ast.unparse(s), "locals()",
                 {"ray": ray, "os": os, "placement_group": placement_group, "create_vllm_engines": engines,
                  "get_strategy": lambda args: types.SimpleNamespace(print=lambda *a, **k: None)})
    return train(parse_args(job_argv(job, model)))


def _nodes(pg: Any) -> Counter[str]:
    from ray.util.placement_group import placement_group_table

    return Counter(placement_group_table(pg)["bundles_to_node_id"].values())


@pytest.fixture
def on_cluster(gpu_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``RAY_ADDRESS`` names the cluster (as Ray sets it for a Ray job); this process leaves it afterwards."""
    import ray

    monkeypatch.setenv("RAY_ADDRESS", gpu_cluster.address)
    yield gpu_cluster
    ray.shutdown()  # the job's placement groups go with its driver


def test_2x8_job_places_actor_and_engines_on_both_nodes(on_cluster: Any, tmp_path: Path, model: str) -> None:
    import ray

    job = _compile(tmp_path / "job", "resources.nodes=2", "resources.gpus_per_node=8")
    placed = _placement(job.path, model)
    assert ray.is_initialized() and ray.get_runtime_context().gcs_address == on_cluster.address
    pg = placed["pg"]
    assert pg.bundle_count == 16 and placed["vllm_engines"] is pg  # colocate_all: the engines share it
    assert sorted(_nodes(pg).values()) == [8, 8]


@pytest.mark.parametrize("asynchronous", ["backend.options.async=true", "algorithm.rollout.mode=one_step_off"])
def test_async_2x8_job_splits_the_gpus_between_actor_and_engines(on_cluster: Any, tmp_path: Path, model: str,
                                                                 asynchronous: str) -> None:
    """With ``async`` (the option, or the spec's one-step-off rollouts) the vLLM engines get GPUs of their own: the
    actor takes one node's 8, the engines the other's (OpenRLHF's async recipe halves the GPUs the same way); 16 + 16
    would wait forever on 16 GPUs."""
    import ray

    job = _compile(tmp_path / "job", "resources.nodes=2", "resources.gpus_per_node=8", asynchronous)
    placed = _placement(job.path, model)
    actor, engines = placed["pg"], placed["vllm_engines"]
    assert actor.bundle_count == 8 and engines.bundle_count == 8
    assert sorted((_nodes(actor) + _nodes(engines)).values()) == [8, 8]  # both nodes, all 16 GPUs
    assert ray.available_resources().get("GPU", 0) == 0


def _launch(job: Path, model: str, out: Path, address: str | None) -> tuple[int, str]:
    """launch.sh's exit status and stderr; what it started is ended after 120 s (a job that waits forever)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env |= {"PYTHON": sys.executable, "MODEL": model, "OUT": str(out), **({"RAY_ADDRESS": address} if address else {})}
    proc = subprocess.Popen(["bash", str(job / "launch.sh")], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("launch.sh was still running after 120 s")
    return proc.returncode, err


def test_launch_refuses_a_3_node_job_on_the_2_node_cluster(gpu_cluster: Any, tmp_path: Path, model: str) -> None:
    job = _compile(tmp_path / "job", "resources.nodes=3", "resources.gpus_per_node=8")
    code, err = _launch(job.path, model, tmp_path / "run", gpu_cluster.address)
    assert code == 1 and err.strip().splitlines() == [
        f"error: {job.path / 'launch.sh'}: the job asks for 24 GPUs (actor 24) but the Ray cluster at "
        f"{gpu_cluster.address} has 16; OpenRLHF would wait forever for its placement groups"], err[-2000:]
    assert not (tmp_path / "run").exists()  # refused before the held-out eval and the trainer


def test_launch_refuses_a_2_node_job_without_ray_address(tmp_path: Path, model: str) -> None:
    job = _compile(tmp_path / "job", "resources.nodes=2", "resources.gpus_per_node=8")
    code, err = _launch(job.path, model, tmp_path / "run", None)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err[-2000:]
    assert lines[0].startswith(f"error: {job.path / 'launch.sh'}: the job spans 2 nodes but RAY_ADDRESS is not set")
    assert "submit.sh" in lines[0] and not (tmp_path / "run").exists()


def test_a_1_node_job_is_checked_against_this_machines_gpus(tmp_path: Path, model: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Without RAY_ADDRESS, OpenRLHF's ray.init() starts a Ray cluster of this machine: Ray's own GPU count (none
    on this CPU machine) is the supply."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    job = _compile(tmp_path / "job", "resources.gpus_per_node=8")
    have = local_gpus()
    problem = placement_problem(parse_args(job_argv(job.path, model)), None)
    assert problem == (f"the job asks for 8 GPUs (actor 8) but this machine has {have}; OpenRLHF would wait forever "
                       "for its placement groups" if have < 8 else None)


def test_check_names_a_gpu_demand_beyond_the_declared_resources() -> None:
    """Async on one GPU cannot give the vLLM engines GPUs of their own: 2 GPUs asked of 1."""
    spec = load_spec(ROOT / "examples/calculator.yaml", ["backend.name=openrlhf", "resources.gpus_per_node=1",
                                                         "backend.options.async=true"])
    values = flag_values(spec, model="m", job="j", out="o", train_size=1, eval_size=0)
    assert gpu_demand(flag_getter(values)) == {"actor": 1, "vLLM engines": 1}
    assert [str(p) for p in OpenRLHFBackend().check(spec) if p.where == "resources"] == [
        "resources: the OpenRLHF job asks for 2 GPUs (actor 1, vLLM engines 1), more than 1x1 = 1; its placement "
        "groups would wait forever"]

"""The harness for backend test suites and plugins' end-to-end tests.

:func:`short_training_run` trains a spec for a few CPU steps with ``agentbridge train`` (what a plugin's tests use
to show its environment trains end to end) and returns the run's metric rows.

:func:`logical_gpu_cluster` and :class:`TimedRay` let a backend's tests drive its multi-node placement on a CPU
machine: a local Ray cluster whose raylets declare GPUs no CUDA stands behind, and a ``ray`` whose ``get`` gives
up instead of waiting forever on a placement group that cannot be placed. :func:`ray_job_submitted`,
:func:`ray_driver_env` and :func:`merge_as_ray_init` replay a job's ``submit.sh`` up to the backend's ``ray.init``
with Ray's own code. :class:`ExitAfterReport` ends a test process that holds Ray or ZMQ threads once pytest has
written its report.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pluggy import HookimplMarker


@contextmanager
def logical_gpu_cluster(*, nodes: int = 2, gpus_per_node: int = 8, cpus_per_node: int = 8) -> Iterator[Any]:
    """A local Ray cluster (``ray.cluster_utils.Cluster``) of ``nodes`` raylets, each declaring ``gpus_per_node``
    logical GPUs and ``cpus_per_node`` CPUs; no dashboard, no prestarted worker. Shut down (and this process's Ray
    connection with it) on exit. Give ``cpus_per_node`` what the backend's placement bundles ask per GPU."""
    import ray
    from ray.cluster_utils import Cluster

    node = {"num_cpus": cpus_per_node, "num_gpus": gpus_per_node}
    cluster = Cluster(initialize_head=True, head_node_args={
        **node, "include_dashboard": False, "_system_config": {"prestart_worker_first_driver": False}})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**node)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


class TimedRay:
    """``ray`` for a backend's placement code under test, but ``get`` gives up after ``wait`` seconds (a placement
    group that cannot be placed fails the test instead of hanging it)."""

    def __init__(self, wait: float) -> None:
        self.wait = wait

    def __getattr__(self, name: str) -> Any:
        import ray

        return getattr(ray, name)

    def get(self, refs: Any, timeout: float | None = None) -> Any:
        import ray

        return ray.get(refs, timeout=self.wait if timeout is None else timeout)


RAY_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # ray._private.runtime_env.constants


def ray_job_submitted(submit: Any, tmp: Any, env: Mapping[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """A compiled job's ``submit.sh`` run against a recorder standing in for the ``ray`` CLI (no cluster here):
    the Job's runtime env, as Ray's own CLI parser builds it from the recorded options, and its entrypoint argv."""
    import os
    import subprocess
    from pathlib import Path

    from ray.dashboard.modules.dashboard_sdk import parse_runtime_env_args

    bin_dir, record = Path(tmp) / "ray-cli", Path(tmp) / "ray-argv"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ray").write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" > {record}\n")
    (bin_dir / "ray").chmod(0o755)
    res = subprocess.run(["bash", str(submit)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **(env or {}), "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert res.returncode == 0, res.stderr
    argv = record.read_text().split("\0")[:-1]
    assert argv[:2] == ["job", "submit"], argv
    cut = argv.index("--")
    options = dict(zip(argv[2:cut:2], argv[3:cut:2], strict=True))
    runtime_env = parse_runtime_env_args(runtime_env_json=options.get("--runtime-env-json"),
                                         working_dir=options.get("--working-dir"))
    return runtime_env, argv[cut + 1:]


def ray_driver_env(job_runtime_env: dict[str, Any], address: str | None = None) -> dict[str, str]:
    """The environment Ray's job supervisor gives the Job's driver: the Job's ``env_vars``, its job config and, when
    ``address`` (the cluster's GCS address) is given, ``RAY_ADDRESS``."""
    import os

    env = {**os.environ, **job_runtime_env.get("env_vars", {}),
           RAY_JOB_CONFIG_ENV: json.dumps({"runtime_env": job_runtime_env})}
    if address is not None:
        env["RAY_ADDRESS"] = address
    return env


def merge_as_ray_init(job_runtime_env: dict[str, Any], init_runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """``ray.init(runtime_env=init_runtime_env)`` inside the Job: Ray's merge, and its error on a conflict."""
    import os

    from ray.job_config import JobConfig
    from ray.runtime_env.runtime_env import _merge_runtime_env

    injected = JobConfig.from_json({"runtime_env": job_runtime_env})
    merged = _merge_runtime_env(injected.runtime_env, init_runtime_env,
                                override=os.getenv("RAY_OVERRIDE_JOB_RUNTIME_ENV") == "1")
    if merged is None:
        raise ValueError(f"Failed to merge the Job's runtime env {injected.runtime_env} with a ray.init's runtime "
                         f"env {init_runtime_env} because of a conflict")
    return dict(merged)


SHORT_RUN = ["algorithm.steps=2", "algorithm.batch_size=2", "data.train.size=64", "data.eval.size=8"]


class ExitAfterReport:
    """A pytest plugin that ends the process with pytest's exit status once the report is written, Ray shut down
    first. The interpreter's own shutdown, with native threads left by Ray's core worker, gRPC or ZMQ sockets, can
    segfault after every test has passed and fail a green run. Register it from a ``conftest.py``::

        def pytest_configure(config):
            config.pluginmanager.register(ExitAfterReport(), "exit-after-report")
    """

    def __init__(self) -> None:
        self.exitstatus: int | None = None

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        self.exitstatus = int(exitstatus)

    @HookimplMarker("pytest")(trylast=True)  # pytest.hookimpl, without importing pytest here
    def pytest_unconfigure(self) -> None:
        if self.exitstatus is None:
            return
        try:
            ray = sys.modules.get("ray")
            if ray is not None and ray.is_initialized():
                ray.shutdown()
        finally:  # a failing shutdown must not keep the process from ending with pytest's status
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(self.exitstatus)


def short_training_run(spec: str | os.PathLike[str], run_dir: str | os.PathLike[str], sets: Sequence[str] = (), *,
                       timeout_s: float = 900, workdir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """``agentbridge train SPEC -o RUN_DIR`` for a few CPU steps (:data:`SHORT_RUN`, then ``sets``), in a process of
    its own; returns the rows of ``metrics.jsonl``. Fails with the run's last output lines when it fails.

    Everything the run writes goes under ``run_dir`` or ``workdir``, the process's working directory (default: a
    temporary directory, removed afterwards), never the current folder. Paths are still read as from the current
    folder: ``spec``, ``run_dir``, the spec's ``model.path``, ``model.chat_template`` and ``data.*.path`` (other
    relative paths in the spec, such as an environment's arguments, are read from ``workdir``); its modules stay
    importable, and the backend environments recorded for its checkout stay found.

    The spec's warm start is kept: pass ``"algorithm.warm_start=null"`` in ``sets`` to train from the spec's model.
    """
    import subprocess
    import tempfile
    from contextlib import nullcontext

    items = [*SHORT_RUN, *sets]
    items += _absolute_path_sets(Path(spec), items)
    args = [sys.executable, "-m", "agentbridge.cli", "train", str(Path(spec).absolute()), "-o",
            str(Path(run_dir).absolute())]
    for item in items:
        args += ["--set", item]
    env = _short_run_env(Path.cwd())
    place = nullcontext(str(workdir)) if workdir is not None else tempfile.TemporaryDirectory(prefix="agentbridge-")
    with place as cwd:
        Path(cwd).mkdir(parents=True, exist_ok=True)
        result = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, cwd=cwd, env=env)
    if result.returncode != 0:
        raise AssertionError(f"agentbridge train {spec} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    rows = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in rows if line.strip()]


def _absolute_path_sets(spec: Path, sets: Sequence[str]) -> list[str]:
    """``--set`` items giving the spec's relative file paths (``model.path``, ``model.chat_template``,
    ``data.*.path``) that exist from the current folder as absolute ones; none when the spec does not load."""
    from agentbridge.spec import SpecError, load_spec

    try:
        loaded = load_spec(spec, list(sets))
    except (SpecError, OSError, ValueError):
        return []  # `agentbridge train` reports it
    candidates = {"model.path": loaded.model.path, "model.chat_template": loaded.model.chat_template}
    for split in ("train", "eval", "dev"):
        ds = getattr(loaded.data, split)
        candidates[f"data.{split}.path"] = ds.path if ds is not None else None
    return [f"{key}={json.dumps(str(Path(value).absolute()))}" for key, value in candidates.items()
            if value and not Path(value).is_absolute() and Path(value).exists()]


def _short_run_env(here: Path) -> dict[str, str]:
    """The environment of a run started in another working directory that finds what it would find in ``here``:
    ``here`` on ``PYTHONPATH``, the backend environments recorded for ``here``'s checkout (``AGENTBRIDGE_HOME``) and
    its ``.venv-<backend>`` directories (``AGENTBRIDGE_<BACKEND>_PYTHON``)."""
    from agentbridge.backend_envs import home

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(here), env.get("PYTHONPATH")) if p)
    env.setdefault("AGENTBRIDGE_HOME", str(home().absolute()))
    for python in sorted(here.glob(".venv-*/bin/python")):
        backend = python.parent.parent.name.removeprefix(".venv-")
        env.setdefault(f"AGENTBRIDGE_{backend.upper()}_PYTHON", str(python.absolute()))
    return env




def assert_refusal_names_who_can(line: str, field: str, spec: Any, refusing: str) -> None:
    """Assert that a recipe refusal by backend ``refusing`` is one line whose hint names exactly the installed
    backends that run the spec's algorithm and whose own check raises nothing at ``field``."""
    from agentbridge.plugins import get_plugins

    head, _, hint = line.rpartition("; ")
    assert head and "\n" not in line
    named = set() if hint == "no installed backend can" else set(hint.removeprefix("backends that can: ").split(", "))
    registry = get_plugins().backends
    for name in registry.ids():
        if name == refusing:
            continue
        other = registry.get(name)
        can = spec.algorithm.name in other.capabilities().algorithms and \
            not [p for p in other.check(spec) if p.where == field]
        assert (name in named) == can, (name, line)


def assert_only_the_adapter_trained(before: Mapping[str, Any], after1: Mapping[str, Any], after2: Mapping[str, Any],
                                    params: Mapping[str, Any]) -> None:
    """Assert a LoRA step's weights (snapshots ``before``, after one and two optimizer steps; ``params`` the trained
    module's parameters): every base weight bit-identical and frozen, every ``lora_`` weight trainable; B starts at
    zero, so the first step moves only B and the second every adapter weight."""
    import torch

    adapter = [n for n in before if "lora_" in n]
    frozen = [n for n in before if "lora_" not in n]
    assert adapter and frozen and set(before) == set(after2) == set(params)
    for name in frozen:
        assert torch.equal(after1[name], before[name]) and torch.equal(after2[name], before[name]), name
    assert all(params[n].requires_grad for n in adapter) and not any(params[n].requires_grad for n in frozen)
    assert all(float(before[n].abs().max()) == 0.0 for n in adapter if ".lora_B." in n)
    assert all(not torch.equal(after1[n], before[n]) for n in adapter if ".lora_B." in n)
    assert all(not torch.equal(after2[n], before[n]) for n in adapter), \
        [n for n in adapter if torch.equal(after2[n], before[n])]


def assert_reference_is_the_base(step: Mapping[str, Any], tol: float) -> None:
    """Assert a LoRA step's log-probs against the base model's (``step["base"]`` on ``step["mask"]``): the reference
    before (``ref0``) and after training (``ref2``) and the policy before its first step (``policy0``: B = 0) within
    ``tol`` relative to |log-prob| (>= 1); the trained policy (``policy2``) not, so the checks can tell them apart."""
    m, base = step["mask"], step["base"]

    def gap(logp: Any) -> float:
        return float(((logp[m] - base[m]).abs() / base[m].abs().clamp(min=1.0)).max())

    for name in ("ref0", "policy0", "ref2"):
        assert gap(step[name]) <= tol, (name, gap(step[name]))
    assert gap(step["policy2"]) > 1e-3, gap(step["policy2"])

"""A compiled job's manifest, its spec read back, its launch, and the dotted-key helpers of config tables."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentbridge.backends import Job, JobError, backend_python
from agentbridge.runs import manifest, package_version
from agentbridge.spec import Spec, load_spec, spec_hash


def new_job(backend: Any, spec: Spec, out: Path, *, version: str, pin: str | None = None,
            tasks: dict[str, int], notes: Iterable[str] = (), **extra: Any) -> Job:
    """The job compiled under ``out``, its manifest filled: the spec's hash and seed, the adapter's ``version`` (with
    ``pin``, also the backend package's installed and pinned versions), the job's files, its task counts, ``extra``
    and the notes on what the job does differently from the spec."""
    versions: dict[str, str | None] = {f"agentbridge-{backend.name}": version}
    if pin is not None:
        versions |= {backend.module: package_version(backend.module), f"{backend.name}_pin": pin}
    files = sorted({p.name for p in out.iterdir()} | {"manifest.json"})
    record = manifest(kind="job", backend=backend.name, spec_hash=spec_hash(spec), seed=spec.seed,
                      versions=versions, files=files, tasks=tasks, **extra, notes=list(notes))
    return Job(backend=backend.name, path=out, manifest=record, spec=spec)


def job_spec(job: Job) -> Spec:
    """The job's spec: the one it was compiled from in this process, else its ``spec.yaml`` read back (once)."""
    if job.spec is None:
        job.spec = load_spec(job.path / "spec.yaml")
    return job.spec


def set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """``tree['a']['b']['c'] = value`` for ``'a.b.c'``, creating mappings on the way (Hydra-style configs)."""
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = tree.get(part)
        if not isinstance(node, dict):
            node = tree[part] = {}
        tree = node
    tree[leaf] = value


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings to ``{'a.b.c': value}`` (lists, scalars and empty mappings are leaves)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def launch_job(job: Job, runner: Any, run_dir: Path | None, backend: Any, *, label: str,
               run_dir_variable: str = "RUN_DIR", extra_args: Iterable[str] = ()) -> Path:
    """Run the job's ``launch.sh`` with ``PYTHON`` set to ``runner``'s interpreter (else the backend's environment's,
    else this one) and ``run_dir_variable`` to the run directory (default ``runs/<spec name>``), which it returns;
    raises JobError with one line when the job fails."""
    run_dir = Path(run_dir) if run_dir else Path("runs") / job_spec(job).name
    python = getattr(runner, "python", None) or backend_python(backend.name, backend.module) or sys.executable
    env = {**os.environ, run_dir_variable: str(run_dir), "PYTHON": python}
    result = subprocess.run(["bash", str(job.path / "launch.sh"), *extra_args], env=env)
    if result.returncode != 0:
        raise JobError(f"the {label} job failed (exit {result.returncode}); see the output above")
    return run_dir

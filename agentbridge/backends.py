"""The Backend protocol and the objects it exchanges: Capabilities, Problem, Job, Report (DESIGN §7)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentbridge.spec.models import Spec


class JobError(RuntimeError):
    """A launched job failed; the message is one line, the job's own output says why."""


@dataclass
class Capabilities:
    """What a backend can run with agentbridge's driver inside it."""

    algorithms: list[str]
    multimodal: bool = False
    tool_images: bool = False
    max_turns: int | None = None
    async_rollout: bool = False
    scale_out: str = ""
    cpu_training: bool = False  # whether a job can train on a machine without GPUs
    notes: list[str] = field(default_factory=list)


@dataclass
class Problem:
    """One thing wrong, as one line: ``where: what``."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class Report:
    """A validation's verdict: problems fail the job; ``warnings`` (and ``details["skipped"]``) are shown only."""

    ok: bool
    problems: list[Problem] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        """Warnings, then the checks this environment could not run."""
        return [*self.warnings, *(f"skipped: {s}" for s in self.details.get("skipped", []))]


@dataclass
class Job:
    """A compiled, self-contained job directory."""

    backend: str
    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> Job:
        path = Path(path)
        manifest = json.loads((path / "manifest.json").read_text())
        return cls(backend=manifest["backend"], path=path, manifest=manifest)

    def write_manifest(self) -> None:
        if "algorithm_differences" not in self.manifest and (self.path / "spec.yaml").is_file():
            from agentbridge.conformance.algorithms import job_differences

            self.manifest["algorithm_differences"] = job_differences(self)
        (self.path / "manifest.json").write_text(json.dumps(self.manifest, indent=2, default=str) + "\n")


@runtime_checkable
class Backend(Protocol):
    name: str

    def capabilities(self) -> Capabilities: ...

    def check(self, spec: Spec) -> list[Problem]: ...

    def compile(self, spec: Spec, out: Path) -> Job: ...

    def validate(self, job: Job) -> Report: ...

    def launch(self, job: Job, runner: Any) -> Any: ...


# What agentbridge's first-party adapters run; used to point users to another backend when its adapter is
# not installed here. An installed backend's own capabilities take precedence.
FIRST_PARTY_ALGORITHMS: dict[str, list[str]] = {
    "trl": ["dapo", "dr_grpo", "grpo", "gspo"],
    "verl": ["dapo", "dr_grpo", "grpo", "gspo", "ppo", "reinforce_pp", "rloo"],
    "openrlhf": ["dapo", "dr_grpo", "grpo", "gspo", "ppo", "reinforce_pp", "rloo"],
}


def known_capabilities() -> dict[str, Capabilities]:
    """Capabilities of every backend agentbridge knows: installed ones, then first-party ones."""
    from agentbridge.plugins import get_plugins

    known = {name: Capabilities(algorithms=algos) for name, algos in FIRST_PARTY_ALGORITHMS.items()}
    for name in get_plugins().backends.ids():
        known[name] = get_plugins().backends.get(name).capabilities()
    return known


def algorithm_problem(spec: Spec, backend: str, capabilities: Capabilities,
                      others: dict[str, Capabilities]) -> Problem | None:
    """A capability error for an algorithm this backend lacks, naming the backends that have it."""
    algo = spec.algorithm.name
    if algo in capabilities.algorithms:
        return None
    can = sorted(name for name, caps in others.items() if algo in caps.algorithms and name != backend)
    hint = f"; backends that can: {', '.join(can)}" if can else ""
    return Problem("algorithm.name", f"{backend} cannot run '{algo}' (it runs {', '.join(capabilities.algorithms)})"
                   f"{hint}")


def backend_python(name: str, module: str) -> str | None:
    """The interpreter of a backend's environment: this one when ``module`` imports here, else
    ``$AGENTBRIDGE_<NAME>_PYTHON``, else the one ``agentbridge backends setup`` recorded, else
    ``.venv-<name>/bin/python`` in the working directory; None if none."""
    from agentbridge.environments import recorded

    if importlib.util.find_spec(module) is not None:
        return sys.executable
    saved = recorded().get(name, {}).get("python")
    for candidate in (os.environ.get(f"AGENTBRIDGE_{name.upper()}_PYTHON"), saved, f".venv-{name}/bin/python"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def validate_in(python: str, module: str, job: Job) -> Report:
    """Run ``python -m <module> JOB --json`` (a backend's validator, in that backend's environment).

    The validator prints a JSON list of ``[where, message]``; anything else is reported as one line.
    """
    import subprocess

    result = subprocess.run([python, "-m", module, str(job.path), "--json"], capture_output=True, text=True)
    try:
        rows = json.loads(result.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return Report(ok=False, problems=[Problem(job.backend, f"the validator failed in {python}: {tail}")])
    problems = [Problem(where, message) for where, message in rows]
    return Report(ok=not problems, problems=problems)


@dataclass
class JobCheck:
    """The shared start of a backend validator. ``ready``: the spec loaded and the backend package imports, so the
    backend's own checks can run."""

    spec: Spec | None
    problems: list[Problem]
    ready: bool


def begin_validation(job_dir: Path, backend: Any, *, module: str, pin: str, install: str) -> JobCheck:
    """Load the job's spec, run the backend's capability check, and check that ``module`` imports at version ``pin``
    (``install`` says how to get it). Each problem is one line."""
    from importlib import metadata

    from agentbridge.spec import SpecError, load_spec

    try:
        spec = load_spec(Path(job_dir) / "spec.yaml")
    except SpecError as e:
        return JobCheck(None, [Problem(str(Path(job_dir) / "spec.yaml"), line) for line in e.problems], False)
    problems = list(backend.check(spec))
    if importlib.util.find_spec(module) is None:
        problems.append(Problem(module, f"{module} is not installed in this interpreter; {install}"))
        return JobCheck(spec, problems, False)
    version = metadata.version(module)
    if version != pin:
        problems.append(Problem(module, f"version {version} is installed; this adapter is built for {pin}"))
    return JobCheck(spec, problems, True)


def to_dict(obj: Any) -> dict[str, Any]:
    return asdict(obj)

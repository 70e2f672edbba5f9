"""The Backend protocol, the objects it exchanges (Capabilities, Problem, Job, Report) and the compile pipeline
every command goes through: :func:`get_backend`, then :func:`compile_job`. What adapters share to
implement the protocol is in :mod:`agentbridge.adapter`."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentbridge.spec.schema import Spec


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
    turn_credit: bool = False  # whether its training batch takes per-token rewards (``algorithm.credit: turn``)
    serves_reward_models: bool = False  # whether its job serves ``core/reward_model`` with ``serve: backend``
    notes: list[str] = field(default_factory=list)
    # ``owner/repo@commit`` when the backend is not on the package index and its adapter was verified against that
    # upstream commit, outside this repository's CI (which checks the adapter's compile output and protocol only);
    # empty when the adapter's tests run against the backend's own code wherever the backend installs
    verified_upstream: str = ""
    # whether the backend installs from the package index and its adapter's tests run the backend's own code (rollout
    # conformance included) in this repository's CI
    verified_in_ci: bool = False


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
    """A compiled, self-contained job directory. ``spec``: the spec it was compiled from, when this process
    compiled it (``agentbridge.adapter.job_spec`` reads it back from ``spec.yaml`` otherwise)."""

    backend: str
    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    spec: Spec | None = field(default=None, repr=False, compare=False)

    @classmethod
    def load(cls, path: str | Path) -> Job:
        path = Path(path)
        manifest = json.loads((path / "manifest.json").read_text())
        return cls(backend=manifest["backend"], path=path, manifest=manifest)

    def write_manifest(self) -> None:
        """Write ``manifest.json`` as it stands (:func:`compile_job` completes it first)."""
        (self.path / "manifest.json").write_text(json.dumps(self.manifest, indent=2, default=str) + "\n")


@runtime_checkable
class Backend(Protocol):
    """What a backend adapter implements; :mod:`agentbridge.adapter` holds what they all do the same way. What the
    core says of a backend (its capabilities, how it was verified, how ``agentbridge backends setup`` builds its
    environment: an optional ``environment``, an :class:`agentbridge.backend_envs.EnvironmentRecipe`) comes from the
    installed adapter."""

    name: str

    def capabilities(self) -> Capabilities: ...

    def check(self, spec: Spec) -> list[Problem]:
        """What in ``spec`` this backend cannot run, one problem each (needs no backend installed)."""
        ...

    def compile(self, spec: Spec, out: Path) -> Job:
        """Write the job's files under ``out``; return the Job with its manifest filled (:func:`compile_job`
        completes and writes it)."""
        ...

    def validate(self, job: Job) -> Report:
        """The backend's own validators on the job, here or in the backend's environment."""
        ...

    def launch(self, job: Job, runner: Any, run_dir: Path) -> Path:
        """Run the job (``runner``: whose interpreter to use, None for the backend's own); returns ``run_dir``."""
        ...

    def conformance(self, kind: str, workdir: Path) -> list[Any]:
        """The golden episodes of ``kind`` through the backend's own rollout path, read back from its training
        batch (a list of ``agentbridge.conformance.EpisodeRecord``)."""
        ...


def known_capabilities() -> dict[str, Capabilities]:
    """Capabilities of every installed backend, each as its adapter declares them (a backend that fails to load is
    left out), in the registry's order."""
    from agentbridge.plugins import get_plugins

    known = {}
    for name in get_plugins().backends.ids():
        try:
            known[name] = get_plugins().backends.get(name).capabilities()
        except Exception:  # noqa: BLE001 - a broken backend package is left out of what the others are told
            continue
    return known


def verification(caps: Capabilities) -> tuple[str, str]:
    """How a backend's adapter was verified against the backend's own code, as its capabilities say:
    ``(short, sentence)``."""
    if caps.verified_upstream:
        return (f"upstream {caps.verified_upstream.split('@')[0]}@{caps.verified_upstream.split('@')[-1][:7]}",
                f"verified against upstream {caps.verified_upstream}, outside this repository's CI (not on the "
                "package index: CI checks its compile output and the protocol it speaks)")
    if caps.verified_in_ci:
        return ("this CI", "verified in this repository's CI against its own code (installed from the package "
                           "index)")
    return ("not stated", "its adapter does not say how it was verified")


def serving_problem(spec: Spec, backend: Backend) -> Problem | None:
    """A capability error for ``core/reward_model`` with ``serve: backend`` on a backend whose job serves none."""
    from agentbridge.reward_model import backend_served

    try:
        served = backend_served(spec)
    except ValueError:  # bad reward args: check_ids says so, with where
        return None
    if not served or backend.capabilities().serves_reward_models:
        return None
    others = [n for n, c in known_capabilities().items() if c.serves_reward_models] or ["none installed"]
    return Problem("reward", f"core/reward_model serve: backend: the {backend.name} job serves no reward model "
                   f"(jobs that do: {', '.join(others)}); load it in the driver (serve: here) or give args.url")


def algorithm_problem(spec: Spec, backend: str, capabilities: Capabilities,
                      others: dict[str, Capabilities]) -> Problem | None:
    """A capability error for an algorithm this backend lacks, naming the backends that have it."""
    algo = spec.algorithm.name
    if algo in capabilities.algorithms:
        return None
    can = sorted(name for name, caps in others.items() if algo in caps.algorithms and name != backend)
    hint = f"; backends that can: {', '.join(can)}" if can else "; no installed backend can"
    return Problem("algorithm.name", f"{backend} cannot run '{algo}' (it runs {', '.join(capabilities.algorithms)})"
                   f"{hint}")


def backend_python(name: str, module: str) -> str | None:
    """The interpreter of a backend's environment: this one when ``module`` imports here, else
    ``$AGENTBRIDGE_<NAME>_PYTHON``, else the one ``agentbridge backends setup`` recorded, else
    ``.venv-<name>/bin/python`` in the working directory; None if none."""
    from agentbridge.backend_envs import recorded

    if importlib.util.find_spec(module) is not None:
        return sys.executable
    saved = recorded().get(name, {}).get("python")
    for candidate in (os.environ.get(f"AGENTBRIDGE_{name.upper()}_PYTHON"), saved, f".venv-{name}/bin/python"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def runnable_backends() -> list[str]:
    """The installed backends whose own code runs here or in an environment of theirs (``backend_python``), in the
    registry's order: what ``compare`` and ``conformance --algorithms`` use by default."""
    from agentbridge.plugins import get_plugins

    registry = get_plugins().backends
    names = []
    for name in registry.ids():
        try:
            module = getattr(registry.get(name), "module", name)
        except Exception:  # noqa: BLE001 - a broken backend package is not offered
            continue
        if backend_python(name, module) is not None:
            names.append(name)
    return names


class BackendNotInstalled(ValueError):
    """No installed backend has this name (one line, naming the installed ones)."""


def get_backend(name: str) -> Backend:
    """The installed backend ``name``; raises :class:`BackendNotInstalled` with one line otherwise."""
    import difflib

    from agentbridge.plugins import get_plugins

    registry = get_plugins().backends
    if name in registry:
        backend: Backend = registry.get(name)
        return backend
    near = difflib.get_close_matches(name, registry.ids(), n=1)  # a typo, not a backend to install
    raise BackendNotInstalled(registry.unknown(name) + ("" if near else f"; pip install agentbridge-{name}"))


def compile_job(spec: Spec, backend: Backend, out: Path | None = None, *, source: str = "") -> Job:
    """The one compile pipeline: check the spec's ids and the backend's capabilities, compile, then complete the
    manifest (chat-template hash, documented algorithm differences) and write it.

    ``out`` defaults to ``jobs/<spec name>-<backend>-<spec hash>``. Raises ``SpecError`` with one line per
    problem, each prefixed with ``source`` (the spec's path) when given.
    """
    from agentbridge.conformance.algorithms import spec_differences
    from agentbridge.rollout.agent import check_ids
    from agentbridge.runs import spec_chat_template_hash
    from agentbridge.spec import SpecError, spec_hash

    problems: list[Any] = [*check_ids(spec), *backend.check(spec), serving_problem(spec, backend)]
    if not any(isinstance(p, Problem) and p.where == "algorithm.name" for p in problems):
        problems.append(algorithm_problem(spec, backend.name, backend.capabilities(), known_capabilities()))
    lines = [f"{source}: {p}" if source else str(p) for p in problems if p is not None]
    if lines:
        raise SpecError(lines)
    job = backend.compile(spec, out or Path("jobs") / f"{spec.name}-{backend.name}-{spec_hash(spec)[:8]}")
    job.spec = spec
    if job.manifest.get("chat_template_hash") is None:
        job.manifest["chat_template_hash"] = spec_chat_template_hash(spec)
    if spec.algorithm.credit == "turn" and not backend.capabilities().turn_credit:
        job.manifest.setdefault("notes", []).append(
            f"algorithm.credit: turn: {backend.name} trains on one reward per episode, so each episode's per-turn "
            "rewards are summed into it (placed on its last token); the backends that place them on the turns: "
            + (", ".join(n for n, c in known_capabilities().items() if c.turn_credit) or "none installed"))
    job.manifest.setdefault("algorithm_differences", spec_differences(backend, spec.algorithm))
    if spec.resources.gpus_per_node > 0:  # the per-GPU arithmetic, from the sharding and offload the job sets up
        from agentbridge.memory import estimate_job

        try:
            job.manifest["memory_per_gpu"] = estimate_job(spec, backend.name, Path(job.path))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # an estimate never fails a compile
            job.manifest["memory_per_gpu"] = {"total_gib": None, "why": f"not estimated: {type(e).__name__}: {e}"}
    job.write_manifest()
    return job

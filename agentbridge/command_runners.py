"""Where agentbridge commands run: this interpreter, a backend's own environment, or a Ray job on a cluster.

A runner runs one ``agentbridge`` command line (``["check", JOB]``, ``["train", SPEC, ...]``) and returns its exit
status and output. Backends' ``launch(job, runner)`` also read ``runner.python``: the interpreter the job's
scripts run with. Every runner finds the command by its name (the ``agentbridge`` console script, or
``-m agentbridge.cli``), so this module does not import the CLI that uses it.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

RUNNER_KINDS = ("local", "env", "ray")


@dataclass
class RunResult:
    """What a command left behind: exit status and output."""

    returncode: int
    stdout: str
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Runner(Protocol):
    kind: str
    python: str

    def run(self, argv: list[str]) -> RunResult: ...


def _agentbridge_command() -> Any:
    """The click command behind the ``agentbridge`` console script (the installed distribution's entry point)."""
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name="agentbridge")
    return entry.load()


@dataclass
class LocalRunner:
    """This interpreter, in this process."""

    kind: str = "local"
    python: str = sys.executable

    def run(self, argv: list[str]) -> RunResult:
        main = _agentbridge_command()
        out, err = io.StringIO(), io.StringIO()
        code = 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main.main(args=list(argv), prog_name="agentbridge", standalone_mode=False)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except Exception as e:  # noqa: BLE001 - click's own usage errors and the like, as one line
                err.write(f"error: {type(e).__name__}: {e}\n")
                code = 2
        return RunResult(code, out.getvalue(), err.getvalue())


@dataclass
class InterpreterRunner:
    """Another interpreter, e.g. a backend's environment: ``PYTHON -m agentbridge.cli ARGS``."""

    python: str
    kind: str = "env"
    cwd: Path | None = None

    def run(self, argv: list[str]) -> RunResult:
        result = subprocess.run([self.python, "-m", "agentbridge.cli", *argv], capture_output=True, text=True,
                                cwd=self.cwd)
        return RunResult(result.returncode, result.stdout, result.stderr)


@dataclass
class RayJobRunner:
    """A Ray job on a running cluster (``ray job submit``): the command runs on the cluster with ``python``
    (the backend's environment, at the same path on every node) and ``working_dir`` uploaded as its directory."""

    address: str
    python: str
    working_dir: Path | None = None
    env_vars: dict[str, str] = field(default_factory=dict)
    kind: str = "ray"

    def runtime_env(self) -> dict[str, object]:
        env: dict[str, object] = {"env_vars": {"HF_HUB_OFFLINE": "1", **self.env_vars}}
        if self.working_dir is not None:
            env["working_dir"] = str(self.working_dir)
        return env

    def submit_command(self, argv: list[str]) -> list[str]:
        """The ``ray job submit`` command line (run with ``python``, whose environment has Ray)."""
        entry = [shlex.quote(a) for a in [self.python, "-m", "agentbridge.cli", *argv]]  # Ray joins them for sh
        return [self.python, "-m", "ray.scripts.scripts", "job", "submit", "--address", self.address,
                "--runtime-env-json", json.dumps(self.runtime_env()), "--", *entry]

    def run(self, argv: list[str]) -> RunResult:
        result = subprocess.run(self.submit_command(argv), capture_output=True, text=True)
        failed = result.returncode != 0 or "failed with status" in result.stdout or "FAILED" in result.stdout
        return RunResult(1 if failed else 0, result.stdout, result.stderr)


def runner_for(kind: str, *, backend: str | None = None, module: str | None = None,
               address: str | None = None, working_dir: Path | None = None) -> Runner:
    """A runner of ``kind``: ``local``; ``env`` (the backend's environment); ``ray`` (a Ray job at ``address``
    run with the backend's environment)."""
    from agentbridge.backends import backend_python

    if kind == "local":
        return LocalRunner()
    if kind not in RUNNER_KINDS:
        raise ValueError(f"--runner: must be one of {', '.join(RUNNER_KINDS)}, not '{kind}'")
    if backend is None:
        raise ValueError(f"--runner {kind}: needs a backend to find its environment")
    python = backend_python(backend, module or backend)
    if python is None:
        from agentbridge.backend_envs import no_environment

        raise ValueError(f"--runner {kind}: {no_environment(backend, module or backend)}")
    if kind == "env":
        return InterpreterRunner(python)
    return RayJobRunner(address or "http://127.0.0.1:8265", python, working_dir=working_dir)

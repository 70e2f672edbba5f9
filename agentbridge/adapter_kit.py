"""What every backend adapter does the same way, written once.

- compile: :func:`write_script` writes ``launch.sh`` / ``submit.sh``; :func:`new_job` returns the Job with its
  manifest filled (``agentbridge.backends.compile_job`` completes and writes it); :func:`job_spec` reads a job's
  spec back;
- check: :func:`algorithm_check`, :func:`unknown_options`, and :func:`foreign_note` for another backend's
  ``backend.options`` / ``backend.overrides`` (noted, not applied);
- validate: :func:`run_validator` runs the adapter's validator module here when the backend imports, else in the
  backend's environment with one JSON protocol (:func:`validator_main` prints it, :func:`validate_in` reads it:
  problems, and the checks this environment could not run); a validator starts with :func:`begin_validation`;
- launch: :func:`launch_job` runs ``launch.sh`` with the backend's interpreter.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbridge.backends import (
    Job,
    JobError,
    Problem,
    Report,
    algorithm_problem,
    backend_python,
    known_capabilities,
)
from agentbridge.runs import manifest, package_version
from agentbridge.spec import Spec, SpecError, load_spec, spec_hash
from agentbridge.spec.recipe import BACKENDS, loss_agg_why_not

SCRIPT_HEAD = ("#!/usr/bin/env bash", "set -euo pipefail", 'JOB="$(cd "$(dirname "$0")" && pwd)"')


def ray_cluster_nodes(address: str, connect_timeout_s: float = 5.0) -> list[dict[str, float]]:
    """The resources of each alive node of the Ray cluster at ``address``, connecting as a driver briefly and
    quietly: what a backend's check before launch measures the job's placement groups against.

    An address with a port nobody listens on raises ``ConnectionError`` within ``connect_timeout_s`` (Ray itself
    keeps retrying for a minute or more)."""
    import logging
    import socket
    import warnings
    from urllib.parse import urlsplit

    import ray

    if address != "auto":
        parts = urlsplit(address if "://" in address else f"ray://{address}")
        if parts.hostname and parts.port:
            try:
                socket.create_connection((parts.hostname, parts.port), timeout=connect_timeout_s).close()
            except OSError as e:
                raise ConnectionError(f"nothing answers at {parts.hostname}:{parts.port} ({e})") from None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        return [dict(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive")]
    finally:
        ray.shutdown()


def write_script(path: Path, lines: Iterable[str], notes: Iterable[str] = ()) -> None:
    """An executable bash script: strict mode, ``$JOB`` (the script's directory), one ``# NOTE:`` comment per note
    (each of its lines a comment: a note may quote the spec), then ``lines``."""
    comments = ["# NOTE: " + "\n#   ".join(str(note).splitlines() or [""]) for note in notes]
    path.write_text("\n".join([*SCRIPT_HEAD, *comments, *lines]) + "\n")
    path.chmod(0o755)


def shell_quote(text: str, variables: Mapping[str, str] | None = None) -> str:
    """One shell word that reads as ``text`` exactly: single-quoted, so nothing in it is expanded, except the
    placeholders in ``variables`` (e.g. ``{"@OUT@": "OUT"}``), each of which becomes ``"$VAR"``. Every value from a
    spec that a generated script holds goes through this function."""
    if not variables:
        return shlex.quote(text)
    pattern = "(" + "|".join(re.escape(mark) for mark in variables) + ")"
    words = [f'"${{{variables[part]}}}"' if part in variables else shlex.quote(part)
             for part in re.split(pattern, text) if part]
    return "".join(words) or "''"


def default_line(var: str, value: str) -> str:
    """The script's line that sets ``VAR`` to ``value`` (quoted) unless the environment sets it already."""
    return f'if [ -z "${{{var}:-}}" ]; then {var}={shell_quote(value)}; fi'


def model_line(var: str, path: str) -> str:
    """The launch script's line that sets ``VAR`` to a model (``$VAR`` wins when set): a builtin is built (cached)
    by agentbridge with ``$PYTHON``; anything else goes to the backend verbatim, quoted."""
    if not path.startswith("builtin:"):
        return default_line(var, path)
    resolve = "import sys; from agentbridge.models import resolve_model_path as r; print(r(sys.argv[1]))"
    return f'if [ -z "${{{var}:-}}" ]; then {var}="$("$PYTHON" -c {shlex.quote(resolve)} {shlex.quote(path)})"; fi'


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


# ---------------------------------------------------------------------------------------------- check


def algorithm_check(backend: Any, spec: Spec, why_not: Mapping[str, str] | None = None) -> list[Problem]:
    """The problem when ``backend`` cannot run the spec's algorithm (naming the backends that can), with the reason
    from ``why_not`` (algorithm -> why) when given."""
    problem = algorithm_problem(spec, backend.name, backend.capabilities(), known_capabilities())
    if problem is None:
        return []
    if why_not is not None:
        problem.message += f" ({why_not.get(spec.algorithm.name, 'not mapped')})"
    return [problem]


def unknown_options(backend: Any, spec: Spec, known: Iterable[str], label: str) -> list[Problem]:
    """One problem per ``backend.options`` key ``backend`` does not know; none when the options belong to another
    backend (the spec's ``backend.name``)."""
    if spec.backend.name != backend.name:
        return []
    names = sorted(known)
    return [Problem(f"backend.options.{key}", f"unknown {label} option; known: {', '.join(names)}")
            for key in spec.backend.options if key not in names]


def foreign_note(backend: Any, spec: Spec, label: str) -> str | None:
    """The note that the spec's ``backend.options`` / ``backend.overrides`` belong to its own backend and are not
    applied to ``backend``'s job; None when there are none or they are ``backend``'s."""
    foreign = [k for k in ("options", "overrides") if getattr(spec.backend, k)]
    if not foreign or spec.backend.name == backend.name:
        return None
    return (f"backend.{' and backend.'.join(foreign)} are for backend {spec.backend.name} (backend.name): "
            f"not applied to the {label} job")


# ---------------------------------------------------------------------------------------------- validate


def first_line(e: BaseException) -> str:
    """An error's first line (its type's name when it has no message)."""
    return (str(e).strip() or type(e).__name__).splitlines()[0]


@dataclass
class JobCheck:
    """The shared start of a backend validator. ``ready``: the spec loaded, the backend package imports and the
    model resolves, so the backend's own checks can run. For a hub id that is not on this machine ``model`` is the
    id, ``tokenizer`` is None and ``skipped`` says which checks could not run (those reading the model's files)."""

    spec: Spec | None
    problems: list[Problem]
    ready: bool
    model: str = ""  # the resolved model path (or the hub id)
    tokenizer: Any = None
    skipped: list[str] = field(default_factory=list)


def begin_validation(job_dir: Path, backend: Any, *, pin: str, install: str, spec: Spec | None = None) -> JobCheck:
    """Load the job's spec (unless given), run the backend's capability check, check that ``backend.module``
    imports at version ``pin`` (``install`` says how to get it), and load the model's tokenizer. Each problem is
    one line."""
    from importlib import metadata

    if spec is None:
        try:
            spec = load_spec(Path(job_dir) / "spec.yaml")
        except SpecError as e:
            return JobCheck(None, [Problem(str(Path(job_dir) / "spec.yaml"), line) for line in e.problems], False)
    problems = list(backend.check(spec))
    module = backend.module
    if importlib.util.find_spec(module) is None:
        problems.append(Problem(module, f"{module} is not installed in this interpreter; {install}"))
        return JobCheck(spec, problems, False)
    version = metadata.version(module)
    if version != pin:
        problems.append(Problem(module, f"version {version} is installed; this adapter is built for {pin}"))
    from agentbridge.models import ModelError, is_hub_id, load_tokenizer, resolve_model_path

    try:
        model = str(resolve_model_path(spec.model.path))
        tokenizer = load_tokenizer(spec.model.path)
    except (ModelError, OSError, ValueError) as e:
        if is_hub_id(spec.model.path):  # the job a GPU user writes: validate all that needs no model files
            return JobCheck(spec, problems, True, spec.model.path, None, [
                f"model.path {spec.model.path}: not on this machine (no download here); the checks that read its "
                f"files were skipped: chat template and prompt rendering, image processor"])
        problems.append(Problem("model.path", first_line(e).removeprefix("model.path: ")))
        return JobCheck(spec, problems, False)
    return JobCheck(spec, problems, True, model, tokenizer)


def agent_check(spec: Spec, tokenizer: Any) -> tuple[Any, list[Problem]]:
    """The driver's Agent for the job (None when the spec cannot build one, or without a tokenizer: a hub id not on
    this machine), and one problem per way its chat template cannot render the episodes."""
    from agentbridge.rollout.agent import Agent

    if tokenizer is None:
        return None, []
    try:
        agent = Agent(spec, tokenizer)
    except ValueError as e:
        return None, [Problem("spec", first_line(e))]
    return agent, [Problem("model.chat_template", p) for p in agent.renderer.check()]


def run_validator(job: Job, backend: Any, validator: str) -> Report:
    """``validate_job`` of the adapter's ``validator`` module on ``job``: in this interpreter when ``backend.module``
    imports here, else in the backend's environment (:func:`validate_in`), else one line saying how to get one."""
    if importlib.util.find_spec(backend.module) is not None:
        skipped: list[str] = []
        semantics: dict[str, str] = {}
        validate_job = importlib.import_module(validator).validate_job
        extra = {"semantics": semantics} if "semantics" in inspect.signature(validate_job).parameters else {}
        problems = validate_job(job.path, skipped, spec=job.spec, **extra)
        return Report(ok=not problems, problems=problems, details=_details(skipped, semantics))
    python = backend_python(backend.name, backend.module)
    if python is None:
        from agentbridge.backend_envs import no_environment

        return Report(ok=False, problems=[Problem(backend.name, no_environment(backend.name, backend.module))])
    return validate_in(python, validator, job)


def validate_in(python: str, validator: str, job: Job) -> Report:
    """Run ``python -m <validator> JOB --json`` (a backend's validator, in that backend's environment).

    The validator prints ``{"problems": [[where, message], ...], "skipped": [line, ...], "semantics": {...}}`` as
    its last line (:func:`validator_main`); anything else is reported as one line.
    """
    result = subprocess.run([python, "-m", validator, str(job.path), "--json"], capture_output=True, text=True)
    try:
        verdict = json.loads(result.stdout.strip().splitlines()[-1])
        problems = [Problem(where, message) for where, message in verdict["problems"]]
        skipped = [str(line) for line in verdict["skipped"]]
        semantics = {str(k): str(v) for k, v in (verdict.get("semantics") or {}).items()}
    except (json.JSONDecodeError, IndexError, KeyError, TypeError, ValueError, AttributeError):
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return Report(ok=False, problems=[Problem(job.backend, f"the validator failed in {python}: {tail}")])
    return Report(ok=not problems, problems=problems, details=_details(skipped, semantics))


def _details(skipped: list[str], semantics: dict[str, str]) -> dict[str, Any]:
    """A report's details: the checks that could not run, and what the job will do by the backend's own config
    (``semantics``: aspect -> one line, see :data:`agentbridge.compare.semantics.ASPECTS`)."""
    return {**({"skipped": skipped} if skipped else {}), **({"semantics": semantics} if semantics else {})}


def validator_main(validate_job: Callable[..., list[Problem]], prog: str,
                   argv: list[str] | None = None) -> int:
    """A validator module's command line, ``prog JOB [--json]``: one line per problem on stderr, one ``skipped:``
    line per check this environment could not run (with ``--json``: the object :func:`validate_in` reads, on
    stdout); exits 1 on any problem, 2 on bad usage."""
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    jobs = [a for a in args if a != "--json"]
    if len(jobs) != 1:
        print(f"usage: {prog} JOB [--json]", file=sys.stderr)
        return 2
    skipped: list[str] = []
    semantics: dict[str, str] = {}
    extra = {"semantics": semantics} if "semantics" in inspect.signature(validate_job).parameters else {}
    problems = validate_job(Path(jobs[0]), skipped, **extra)
    if as_json:
        print(json.dumps({"problems": [[p.where, p.message] for p in problems], "skipped": skipped,
                          "semantics": semantics}))
    else:
        for line in [*(f"skipped: {s}" for s in skipped), *(f"{jobs[0]}: {p}" for p in problems)]:
            print(line, file=sys.stderr)
        if not problems:
            print(f"ok: {jobs[0]}")
    return 1 if problems else 0


# ---------------------------------------------------------------------------------------------- launch


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


def recipe_problems(spec: Spec, backend: str) -> list[Problem]:
    """What in the spec's recipe ``backend`` cannot honour, one line each, naming the backends that can."""
    algo = spec.algorithm
    if algo.loss_agg is None:
        return []
    why = loss_agg_why_not(backend, algo.name, algo.loss_agg)
    if why is None:
        return []
    capabilities = known_capabilities()
    can = [name for name in BACKENDS if name != backend and loss_agg_why_not(name, algo.name, algo.loss_agg) is None
           and name in capabilities and algo.name in capabilities[name].algorithms]
    hint = f"; backends that can: {', '.join(can)}" if can else "; no installed backend can"
    return [Problem("algorithm.loss_agg", f"{backend} cannot aggregate {algo.name}'s loss as {algo.loss_agg} "
                    f"({why}){hint}")]

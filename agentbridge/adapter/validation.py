"""A backend's validator: its shared start (:func:`job_validator`, :func:`validate_with`), the agent's check, and the
one JSON protocol between environments."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import logging
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbridge.backends import Job, Problem, Report, backend_python
from agentbridge.spec import Spec, SpecError, load_spec


def first_line(e: BaseException) -> str:
    """An error's first line (its type's name when it has no message), from its cause when Hydra wrapped it
    (``Error in call to target ...``)."""
    if e.__cause__ is not None and str(e).startswith("Error in call to target"):
        e = e.__cause__
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
    config: Any = None  # the job's config as the backend composes it (``validate_with``'s ``compose``)


def begin_validation(job_dir: Path, backend: Any, *, pin: str | None, install: str | None = None,
                     spec: Spec | None = None, skipped: list[str] | None = None,
                     importing: Callable[[], object] | None = None, source: str = "",
                     needs_model: bool = False) -> JobCheck:
    """Load the job's spec (unless given), run the backend's capability check, check that ``backend.module``
    imports (``importing``: how the backend imports it, when more than finding the module) at version ``pin`` (None:
    no version to compare, as in a source checkout; ``source``: what the adapter is verified against instead, said in
    ``skipped``; ``install`` says how to get it, by default the adapter's ``[backend]`` extra or ``agentbridge
    backends setup``), and load the model's tokenizer (``needs_model``: the backend's checks read its files, so a hub
    id not on this machine is a problem, not a skip). Each problem is one line; the checks that could not run are
    also added to ``skipped`` when given."""
    install = install or (f"install agentbridge-{backend.name}[backend] ({backend.module}=={pin}) or run "
                          f"`agentbridge backends setup {backend.name}`")
    check = _begin(job_dir, backend, pin=pin, spec=spec, importing=importing, source=source, needs_model=needs_model,
                   install=install)
    if skipped is not None:
        skipped += check.skipped
    return check


def _begin(job_dir: Path, backend: Any, *, pin: str | None, install: str, spec: Spec | None,
           importing: Callable[[], object] | None, source: str, needs_model: bool) -> JobCheck:
    from importlib import metadata

    if spec is None:
        try:
            spec = load_spec(Path(job_dir) / "spec.yaml")
        except SpecError as e:
            return JobCheck(None, [Problem(str(Path(job_dir) / "spec.yaml"), line) for line in e.problems], False)
    problems = list(backend.check(spec))
    module, skipped = backend.module, []
    if importing is not None:
        try:
            importing()
        except ImportError as e:
            problems.append(Problem(module, f"{backend.label} does not import here ({first_line(e)}); {install}"))
            return JobCheck(spec, problems, False)
    elif importlib.util.find_spec(module) is None:
        problems.append(Problem(module, f"{module} is not installed in this interpreter; {install}"))
        return JobCheck(spec, problems, False)
    if pin is None:
        skipped += [f"{backend.label}'s version: a source checkout carries none to compare; this adapter is "
                    f"verified against {source}"] if source else []
    elif (version := metadata.version(module)) != pin:
        problems.append(Problem(module, f"version {version} is installed; this adapter is built for {pin}"))
    from agentbridge.models import ModelError, is_hub_id, load_tokenizer, resolve_model_path

    try:
        model = str(resolve_model_path(spec.model.path))
        tokenizer = load_tokenizer(spec.model.path)
    except (ModelError, OSError, ValueError) as e:
        if is_hub_id(spec.model.path) and not needs_model:  # a GPU user's job: validate all that needs no model files
            images = ", image processor" if backend.capabilities().multimodal else ""
            return JobCheck(spec, problems, True, spec.model.path, None, [*skipped, (
                f"model.path {spec.model.path}: not on this machine (no download here); the checks that read its "
                f"files were skipped: chat template and prompt rendering{images}")])
        problems.append(Problem("model.path", first_line(e).removeprefix("model.path: ")))
        return JobCheck(spec, problems, False, skipped=skipped)
    return JobCheck(spec, problems, True, model, tokenizer, skipped)


def validate_with(backend: Any, check: Callable[[Path, JobCheck, Spec, list[str], dict[str, str]], list[Problem]],
                  job_dir: Path, skipped: list[str] | None = None, spec: Spec | None = None,
                  semantics: dict[str, str] | None = None, *, install: str | None = None,
                  importing: Callable[[], object] | None = None, source: str = "", mute: bool = True,
                  compose: Callable[[Path, str], Any] | None = None, needs_model: bool = False) -> list[Problem]:
    """A validator's ``validate_job`` as every backend runs it: :func:`begin_validation` of the job (under its
    resolved path) with ``backend`` at its pin (a ``source`` checkout: none; ``needs_model``), then, when the
    backend's checks can run, its config (``compose(job_dir, model)``, when given: the Hydra config of
    ``backend.config_file``, or one problem) as ``start.config``, then ``check(job_dir, start, spec, skipped,
    semantics)``; :func:`muted` unless ``mute`` is false, with a list and a mapping of its own where the caller gives
    none."""
    def run(job_dir: Path, skipped: list[str], spec: Spec | None, semantics: dict[str, str]) -> list[Problem]:
        job_dir = job_dir.resolve()
        start = begin_validation(job_dir, backend, pin=None if source else backend.pin, install=install,
                                 spec=spec, skipped=skipped, importing=importing, source=source,
                                 needs_model=needs_model)
        if not start.ready or start.spec is None:
            return start.problems
        if compose is not None:
            start.config = composed(lambda: compose(job_dir, start.model), backend.config_file, start.problems)
            if start.config is None:
                return start.problems
        return check(job_dir, start, start.spec, skipped, semantics)

    if mute:
        return muted_check(run, job_dir, skipped, spec, semantics)
    return run(Path(job_dir), [] if skipped is None else skipped, spec, {} if semantics is None else semantics)


def job_validator(backend: str, check: Callable[[Path, JobCheck, Spec, list[str], dict[str, str]], list[Problem]],
                  doc: str, **options: Any) -> Callable[..., list[Problem]]:
    """A validator module's ``validate_job(job_dir, skipped=None, *, spec=None, semantics=None)``: :func:`validate_with`
    of ``check`` with ``options`` for the adapter class ``backend`` names (``"module:Class"``, imported when a job is
    validated, so that the validator module does not import its own backend); ``doc`` is its docstring."""
    def validate_job(job_dir: Path, skipped: list[str] | None = None, *, spec: Spec | None = None,
                     semantics: dict[str, str] | None = None) -> list[Problem]:
        module, _, name = backend.partition(":")
        adapter = getattr(importlib.import_module(module), name)()
        return validate_with(adapter, check, job_dir, skipped, spec, semantics, **options)

    validate_job.__doc__ = doc
    return validate_job


def composed(compose: Callable[[], Any], where: str, problems: list[Problem]) -> Any:
    """``compose()`` (the job's Hydra config), or None with the one-line problem at ``where`` added to ``problems``
    when Hydra cannot compose it."""
    try:
        return compose()
    except Exception as e:  # noqa: BLE001 - Hydra's composition errors, one line
        problems.append(Problem(where, f"Hydra cannot compose it: {first_line(e)}"))
        return None


def unknown_config_keys(job_keys: Iterable[str], base: Any, where: str, label: str) -> list[Problem]:
    """The dotted ``job_keys`` (a job's config file ``where``) that the backend's own composed config ``base`` does not
    have, one problem each naming the backend (``label``); below an empty mapping of ``base`` any key is open."""
    from omegaconf import DictConfig

    problems = []
    for dotted in job_keys:
        node: Any = base
        for i, part in enumerate(dotted.split(".")):
            if isinstance(node, DictConfig) and len(node) == 0 and i > 0:
                break  # an open mapping
            if part not in node.keys():  # ``in`` would be False for keys whose value is ??? (missing)
                head = ".".join(dotted.split(".")[: i + 1])
                problems.append(Problem(f"{where}: {dotted}",
                                        f"'{head}' is not a {label} config key; check backend.overrides"))
                break
            node = node._get_node(part)
            if not isinstance(node, DictConfig):
                break  # a leaf: the job sets its value
    return problems


def local_model_path(path: str) -> str | None:
    """Where the model ``path`` (a directory, a builtin or a hub id) is on this machine, or None when it is not here
    (a hub id not downloaded: a validator checks what needs no model files)."""
    from agentbridge.models import resolve_model_path

    try:
        return str(resolve_model_path(path))
    except Exception:  # noqa: BLE001 - not on this machine, whatever the reason
        return None


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """A backend's own checks with their chatter muted: warnings ignored, stdout swallowed, and the root logger's
    level as it was before (a backend may set it when it is imported)."""
    level = logging.getLogger().level
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logging.getLogger().setLevel(level)


def muted_check(check: Callable[[Path, list[str], Spec | None, dict[str, str]], list[Problem]], job_dir: Path,
                skipped: list[str] | None, spec: Spec | None, semantics: dict[str, str] | None) -> list[Problem]:
    """A validator's ``validate_job``: ``check(job_dir, skipped, spec, semantics)`` run :func:`muted`, with a list and
    a mapping of its own where the caller gives none."""
    with muted():
        return check(Path(job_dir), [] if skipped is None else skipped, spec, {} if semantics is None else semantics)


def compose_hydra(config_dir: Path | str, config_name: str, overrides: Sequence[str] = ()) -> Any:
    """The Hydra config ``config_name`` of ``config_dir`` composed with ``overrides`` (unresolved), as a Hydra
    entry point composes it from its command line; Hydra's global state is cleared first."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


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

"""The ``agentbridge`` command line. Importing it loads neither torch nor any backend."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import wraps
from pathlib import Path
from typing import Any, NoReturn

import click

from agentbridge.backends import Backend, BackendNotInstalled, Job, JobError, compile_job, get_backend
from agentbridge.spec import Spec, SpecError, json_schema, load_spec

USER_ERRORS: tuple[type[Exception], ...] = (SpecError, ValueError, FileNotFoundError, JobError)
MAX_ERROR_LINES = 10
MAX_ROLLOUT_EPISODES = 100_000  # trajectories are held in memory and written at the end


def _fail(message: str, warnings: Iterable[str] = ()) -> NoReturn:
    """Print each line of ``message`` as an error (the first ``MAX_ERROR_LINES``, then how many more), then the
    ``warnings``, and exit 1."""
    lines = message.splitlines() or [message]
    for line in lines[:MAX_ERROR_LINES]:
        click.echo(f"error: {line}", err=True)
    if len(lines) > MAX_ERROR_LINES:
        click.echo(f"error: ... and {len(lines) - MAX_ERROR_LINES} more", err=True)
    for line in warnings:
        click.echo(f"warning: {line}", err=True)
    sys.exit(1)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a problem the user caused into one line per problem and exit status 1 (no traceback)."""

    @wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as e:
            _fail(str(e))
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return run


def set_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                        help="Override a spec field, e.g. --set algorithm.lr=1e-5 (repeatable).")(fn)


def _spec(path: str, sets: tuple[str, ...]) -> Spec:
    from agentbridge.plugins import get_plugins

    return load_spec(path, list(sets), registries=get_plugins().registries)


class OneLineErrors(click.Group):
    """Click's command group, but a usage mistake (an unknown option, a bad value, a missing argument) is one line
    (``error: ...``, exit 2), like every other mistake, instead of the usage text."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        run: Callable[..., Any] = super().main
        if not kwargs.pop("standalone_mode", True):
            return run(*args, standalone_mode=False, **kwargs)
        try:
            code = run(*args, standalone_mode=False, **kwargs)
        except click.ClickException as e:
            hint = f" (see {e.ctx.command_path} --help)" if isinstance(e, click.UsageError) and e.ctx else ""
            click.echo(f"error: {e.format_message()}{hint}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("interrupted", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agentbridge")
def main() -> None:
    """One agent spec, any RL backend: train the same agent on veRL, OpenRLHF or TRL."""


@main.command()
def schema() -> None:
    """Print the JSON Schema of the spec, with the arguments of every installed plugin."""
    from agentbridge.plugins import get_plugins

    click.echo(json.dumps(json_schema(get_plugins().registries), indent=2))


@main.command()
@click.argument("spec_path", metavar="SPEC")
@click.option("--backend", default=None, help="Also run this backend's capability check.")
@set_option
@user_errors
def validate(spec_path: str, backend: str | None, sets: tuple[str, ...]) -> None:
    """Check SPEC, resolve every id against the registries, and check the backend's capabilities."""
    from agentbridge.datasets import dataset_size_problems
    from agentbridge.plugins import get_plugins
    from agentbridge.preflight import (
        backend_problems,
        model_path_problems,
        prompt_budget_problems,
        scale_warnings,
        split_overlap_problems,
    )
    from agentbridge.rollout.agent import check_ids
    from agentbridge.spec import locate
    from agentbridge.training.trackers import missing_trackers

    spec = _spec(spec_path, sets)
    plugins = get_plugins()

    def located(lines: Sequence[object]) -> list[str]:  # file:line (or the --set) of the field each line names
        return [locate(spec, str(line), spec_path) for line in lines]

    problems = located(check_ids(spec, plugins))
    problems += located(model_path_problems(spec))
    problems += located(missing_trackers(spec))
    name = backend or spec.backend.name
    if name in plugins.backends:
        problems += located(plugins.backends.get(name).check(spec))
    elif backend:
        problems.append(f"--backend: {plugins.backends.unknown(name)} (installed: "
                        f"{', '.join(plugins.backends.ids()) or 'none'})")
    else:
        problems += located(backend_problems(spec, plugins))
    if not problems:  # sizes the data splits (builds those that declare no capacity): only with every id known
        problems += located(dataset_size_problems(spec, plugins))
    notes: list[str] = []  # split pairs not compared: their tasks took longer than the budget to build
    if not problems:  # builds the splits and compares their tasks: only for splits that fill
        problems += located(split_overlap_problems(spec, plugins, notes=notes))
    if not problems:  # renders a prompt with a task: only for a spec whose ids resolve and whose splits fill
        problems += located(prompt_budget_problems(spec, plugins))
    if problems:  # the errors first, then why a plugin did not load (it may be why an id is unknown)
        _fail("\n".join(problems), warnings=plugins.errors)
    for err in [*plugins.errors, *located(notes)]:
        click.echo(f"warning: {err}", err=True)
    for line in scale_warnings(spec):
        click.echo(f"warning: {spec_path}: {line}", err=True)
    if name in plugins.backends:  # what this backend's training math does differently (algorithm conformance)
        from agentbridge.conformance.algorithms import spec_differences

        for line in spec_differences(plugins.backends.get(name), spec.algorithm):
            click.echo(f"warning: {spec_path}: {line}", err=True)
    click.echo(f"ok: {spec_path} ({spec.name}; backend {name})")


@main.command()
@user_errors
def plugins() -> None:
    """List plugins, their distribution and version, and what each registered."""
    from rich.console import Console
    from rich.table import Table

    from agentbridge.plugins import get_plugins

    pm = get_plugins()
    table = Table("plugin", "distribution", "version", "registered")
    for info in pm.info():
        what = "\n".join(f"{kind}: {', '.join(ids)}" for kind, ids in info.registered.items()) or "(hooks only)"
        table.add_row(info.name, info.distribution, info.version, what)
    Console().print(table)
    for err in pm.errors:
        click.echo(f"warning: {err}", err=True)


def _make_policy(kind: str, agent: Any) -> Any:
    from agentbridge.rollout.policy import ScriptedPolicy

    if kind == "scripted":
        return ScriptedPolicy.expert_factory(agent)  # refuses an environment without an expert, before any episode
    from agentbridge.models import is_vlm
    from agentbridge.rollout.hf_policy import HFPolicy
    from agentbridge.rollout.hf_vlm_policy import HFVLMPolicy

    cls = HFVLMPolicy if is_vlm(agent.spec.model.path) else HFPolicy
    return cls.from_pretrained(agent.spec.model.path, tokenizer=agent.tokenizer, seed=agent.spec.seed)


@main.command()
@click.argument("spec_path", metavar="SPEC")
@click.option("--policy", "policy_kind", type=click.Choice(["scripted", "hf"]), default="scripted",
              show_default=True, help="scripted: the environment's expert; hf: the spec's model with transformers.")
@click.option("-n", "episodes", type=click.IntRange(min=1, max=MAX_ROLLOUT_EPISODES), default=16, show_default=True,
              help="Episodes to run, each on a task of its own.")
@click.option("-o", "out", type=click.Path(file_okay=False), default=None, help="Write trajectories here.")
@click.option("--split", type=click.Choice(["train", "eval"]), default="eval", show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=32, show_default=True,
              help="Episodes in flight at once.")
@click.option("--max-tool-failure-rate", type=click.FloatRange(0, 1), default=None, metavar="RATE",
              help="Exit 1 when more than this share of tool calls failed (above 0.2 a warning is printed anyway).")
@click.option("--record", "record", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Record every environment output and reward score into DIR (environment.record), for --replay.")
@click.option("--replay", "replay", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Serve environment outputs and reward scores recorded in DIR instead of the live environment "
                   "(environment.replay); with --policy scripted the recorded actions are played.")
@set_option
@user_errors
def rollout(spec_path: str, policy_kind: str, episodes: int, out: str | None, split: str, concurrency: int,
            max_tool_failure_rate: float | None, record: str | None, replay: str | None,
            sets: tuple[str, ...]) -> None:
    """Run episodes without training; write trajectories as JSONL and print a summary. --record DIR keeps every
    environment output and reward score; --replay DIR runs the same episodes again from them."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from agentbridge.plugins import PluginError
    from agentbridge.rollout.agent import Agent
    from agentbridge.runs import batch_metrics, manifest, text_hash, write_jsonl
    from agentbridge.spec import set_label, spec_hash
    from agentbridge.tools import DEFAULT_MAX_FAILURE_RATE, tool_failure_rate

    console = Console(stderr=True)
    # --record/--replay DIR set environment.record/replay; as a JSON string (a YAML string) DIR is never a number
    items = {f"environment.{key}={json.dumps(value)}": f"--{key} {value}"
             for key, value in (("record", record), ("replay", replay)) if value is not None}
    flags = {set_label(item): flag for item, flag in items.items()}  # as a problem names the item
    try:
        spec = _spec(spec_path, (*sets, *items))
    except SpecError as e:  # blame the flag the user gave
        problems = [next((line.replace(item, flag) for item, flag in flags.items() if item in line), line)
                    for line in e.problems]
        raise SpecError(problems) from None
    try:
        with console.status(f"loading the agent ({spec.environment.id})"):
            agent = Agent.from_spec(spec)
        with console.status(f"building {episodes} {split} tasks"):
            tasks = agent.tasks(split, size=episodes)
        with console.status(f"loading {spec.model.path}"):
            policy = _make_policy(policy_kind, agent)
    except PluginError as e:
        _fail(f"{spec_path}: {e}")
    rewards: list[float] = []
    columns = (TextColumn("[bold]episodes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("reward {task.fields[reward]:.3f}"))
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("rollout", total=len(tasks), reward=0.0)

        def done(traj: Any) -> None:
            rewards.append(traj.reward)
            progress.update(bar, advance=1, reward=sum(rewards) / len(rewards))

        trajs = asyncio.run(agent.run(tasks, policy, concurrency=concurrency, on_done=done))
    summary = batch_metrics(trajs)
    limit = None if max_tool_failure_rate is None else f"--max-tool-failure-rate {max_tool_failure_rate:g}"
    summary["tools/failure_rate"], too_many = tool_failure_rate(
        trajs, DEFAULT_MAX_FAILURE_RATE if max_tool_failure_rate is None else max_tool_failure_rate, limit)
    _print_summary(summary, len(trajs))
    if out:
        out_dir = Path(out)
        write_jsonl(out_dir / "trajectories.jsonl", (t.to_dict() for t in trajs))
        info = manifest(kind="rollout", spec_hash=spec_hash(spec), seed=spec.seed,
                        chat_template_hash=text_hash(agent.renderer.chat_template),
                        policy=policy_kind, episodes=len(trajs))
        (out_dir / "manifest.json").write_text(json.dumps(info, indent=2) + "\n")
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        click.echo(f"wrote {len(trajs)} trajectories to {out_dir / 'trajectories.jsonl'}")
    if spec.environment.record:
        click.echo(f"recorded the environment outputs and reward scores of {len(trajs)} episodes in "
                   f"{spec.environment.record}")
    errors = [t for t in trajs if t.finish_reason == "error"]
    for t in errors[:5]:
        click.echo(f"episode {t.task_id} failed: {t.error}", err=True)
    if too_many and max_tool_failure_rate is not None:
        _fail(too_many)
    if too_many:
        click.echo(f"warning: {too_many}", err=True)


def _backend(name: str) -> Backend:
    """The installed backend ``name``; one line blamed on ``--backend`` otherwise."""
    try:
        return get_backend(name)
    except BackendNotInstalled as e:
        raise ValueError(f"--backend: {e}") from None


def _staged_job(spec_path: str, spec: Spec, backend: Backend, target: Path, *, resume: bool) -> Job:
    """The run's job compiled and validated: into ``target/job`` when resuming, else into a new directory beside
    ``target`` (removed again when compile or validation fails)."""
    import shutil
    import tempfile

    from agentbridge.runs import RUN_JOB

    if resume:
        where = target / RUN_JOB
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        where = Path(tempfile.mkdtemp(prefix=f".{target.name}-job-", dir=target.parent))
    try:
        job = _compile(spec_path, spec, backend, where)
        report = backend.validate(job)
        if not report.ok:
            _fail("\n".join(f"{target / RUN_JOB}: {p}" for p in report.problems))
    except BaseException:
        if not resume:
            shutil.rmtree(where, ignore_errors=True)
        raise
    return job


def _move_job(job: Job, target: Path) -> None:
    """Move a staged job to ``target/job`` (replacing a job left there by an earlier attempt)."""
    import shutil

    from agentbridge.runs import RUN_JOB, manifest_kind

    final = target / RUN_JOB
    if final.exists():
        if manifest_kind(final) != "job":
            shutil.rmtree(job.path, ignore_errors=True)
            _fail(f"{final}: not a job; nothing was moved or deleted: choose another run directory")
        shutil.rmtree(final)
    target.mkdir(parents=True, exist_ok=True)
    job.path.rename(final)
    job.path = final


def _holds(directory: Path, path: str) -> bool:
    """Whether ``path`` is ``directory`` or lies inside it."""
    inner, outer = Path(path).resolve(), directory.resolve()
    return inner == outer or outer in inner.parents


def _job_dir_problem(out: Path, spec_path: str) -> str | None:
    """Why ``compile -o out`` would overwrite something the user owns: a file, the spec it reads, or a directory
    that holds anything but a job. None when ``out`` is new, empty or a job."""
    from agentbridge.runs import manifest_kind

    if out.exists() and not out.is_dir():
        return f"-o {out}: not a directory"
    if _holds(out, spec_path):
        return f"-o {out}: holds the spec being compiled ({spec_path}); choose another job directory"
    if out.is_dir() and any(out.iterdir()) and manifest_kind(out) != "job":
        return f"-o {out}: holds files that are not a job (no job's manifest.json); choose a new or empty directory"
    return None


def _compile(spec_path: str, spec: Spec, backend: Backend, out: str | Path | None) -> Job:
    """``compile_job``, then the notes on what the job does differently from the spec."""
    if out is not None and (problem := _job_dir_problem(Path(out), spec_path)):
        raise ValueError(problem)
    job = compile_job(spec, backend, Path(out) if out else None, source=spec_path)
    for note in job.manifest.get("notes", []):
        click.echo(f"note: {note}", err=True)
    return job


@main.command("compile")
@click.argument("spec_path", metavar="SPEC")
@click.option("--backend", "backend_name", default=None, help="Backend to compile for (default: backend.name).")
@click.option("-o", "out", type=click.Path(file_okay=False), default=None, help="Job directory.")
@set_option
@user_errors
def compile_cmd(spec_path: str, backend_name: str | None, out: str | None, sets: tuple[str, ...]) -> None:
    """Write the job directory for a backend (needs no backend installed)."""
    spec = _spec(spec_path, sets)
    job = _compile(spec_path, spec, _backend(backend_name or spec.backend.name), out)
    click.echo(f"wrote {job.path} ({', '.join(job.manifest.get('files', []))})")


def runner_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--ray-address", default=None, metavar="URL",
                      help="Ray job server for --runner ray (default http://127.0.0.1:8265).")(fn)
    return click.option("--runner", "runner_kind", type=click.Choice(["local", "env", "ray"]), default="local",
                        show_default=True, help="Run here, in the backend's own environment, or as a Ray job.")(fn)


def _forward(runner_kind: str, backend_name: str, argv: list[str], *, address: str | None = None,
             working_dir: Path | None = None) -> None:
    """Run this command line with another runner, print what it printed, exit with its status."""
    from agentbridge.command_runners import runner_for

    backend = _backend(backend_name)
    runner = runner_for(runner_kind, backend=backend_name, module=getattr(backend, "module", backend_name),
                        address=address, working_dir=working_dir)
    click.echo(f"[{runner.kind} runner: {runner.python}]", err=True)
    result = runner.run(argv)
    click.echo(result.stdout, nl=False)
    click.echo(result.stderr, nl=False, err=True)
    sys.exit(result.returncode)


@main.command()
@click.argument("job_dir", metavar="JOB", type=click.Path(exists=True, file_okay=False))
@runner_option
@user_errors
def check(job_dir: str, runner_kind: str, ray_address: str | None) -> None:
    """Run the backend's own validators on a compiled job."""
    job = Job.load(job_dir)
    from agentbridge.memory import over_budget

    too_big = over_budget(job.manifest.get("memory_per_gpu") or {})
    if too_big:
        click.echo(f"warning: {job_dir}: {too_big}", err=True)
    if runner_kind == "ray":  # the job directory travels as the Ray job's working_dir
        _forward("ray", job.backend, ["check", "."], address=ray_address, working_dir=Path(job_dir))
    if runner_kind == "env":
        _forward("env", job.backend, ["check", str(Path(job_dir).absolute())])
    from agentbridge.preflight import backend_env_problems

    backend = _backend(job.backend)
    missing = backend_env_problems(Path(job_dir) / "spec.yaml", job.backend, getattr(backend, "module", job.backend))
    if missing:
        _fail("\n".join(f"{job_dir}: {p}" for p in missing))
    report = backend.validate(job)
    for note in report.notes():
        click.echo(f"warning: {job_dir}: {note}", err=True)
    if not report.ok:
        _fail("\n".join(f"{job_dir}: {p}" for p in report.problems))
    click.echo(f"ok: {job_dir} passes {job.backend}'s validators")


@main.command()
@click.argument("spec_path", metavar="SPEC")
@click.option("--backend", "backend_name", default=None, help="Backend to train with (default: backend.name).")
@click.option("-o", "out", type=click.Path(file_okay=False), default=None, help="Run directory (default runs/NAME).")
@click.option("--runner", "runner_kind", type=click.Choice(["local", "env"]), default="local", show_default=True,
              help="local: the backend picks its interpreter; env: force the backend's own environment.")
@click.option("--no-cache", is_flag=True, help="Rebuild every cache entry the run uses (built models, indexes).")
@click.option("--overwrite", is_flag=True, help="Delete the run already in the run directory (default: keep it as "
                                                "DIR@<its start time>).")
@click.option("--resume", is_flag=True, help="Continue the run in the run directory from its last checkpoint: the "
                                             "evaluations and warm start it finished are kept, RL goes on with its "
                                             "optimizer, RNG and data order (TRL; same spec and --set values).")
@set_option
@user_errors
def train(spec_path: str, backend_name: str | None, out: str | None, runner_kind: str, no_cache: bool,
          overwrite: bool, resume: bool, sets: tuple[str, ...]) -> None:
    """Compile SPEC, validate the job, and run it on this machine; writes runs/NAME/ (an earlier run there is
    kept beside it, never deleted, unless --overwrite).

    --resume continues the run in the run directory instead of starting over: the held-out evaluations and the
    warm start it finished are not redone, RL restarts from the last checkpoint (weights, optimizer, scheduler,
    RNG, and the data not yet seen, in the same order), and metrics.jsonl goes on from that step."""
    from agentbridge.command_runners import runner_for
    from agentbridge.runs import keep_earlier_run, run_dir_problem

    if resume and overwrite:
        raise click.UsageError("--resume continues the run that --overwrite would delete; use one of them")

    if no_cache:  # the job's own process inherits it
        import uuid

        os.environ["AGENTBRIDGE_NO_CACHE"] = uuid.uuid4().hex

    spec = _spec(spec_path, sets)  # the one parse of the spec: compile, validate and launch use this one
    from agentbridge.plugins import get_plugins

    for err in get_plugins().errors:
        click.echo(f"warning: {err}", err=True)
    from agentbridge.training.trackers import missing_trackers

    if missing := missing_trackers(spec):
        _fail("\n".join(f"{spec_path}: {line}" for line in missing))
    name = backend_name or spec.backend.name
    backend = _backend(name)
    target = Path(out) if out else Path("runs") / spec.name
    if resume:
        resume_point = getattr(backend, "resume_point", None)
        if resume_point is None:
            _fail(f"--resume: the {name} backend does not resume runs")
        click.echo(f"resuming {target} from {resume_point(target, spec)}")
    if _holds(target, spec_path):
        _fail(f"-o {target}: holds the spec being trained ({spec_path}); choose another run directory")
    if not resume and (problem := run_dir_problem(target)):  # before anything is compiled for it
        _fail(problem)
    # the job is compiled and validated beside the run directory, and moves into it (RUN_DIR/job) only once it can
    # run: an earlier run there is kept aside, or deleted with --overwrite, only then
    job = _staged_job(spec_path, spec, backend, target, resume=resume)
    if not resume:
        kept = keep_earlier_run(target, overwrite=overwrite)
        if kept is not None:
            click.echo(f"the earlier run in {target} is kept as {kept}")
        _move_job(job, target)
    # local: the backend picks its interpreter (this one, or its recorded environment); env: its environment
    runner = runner_for("env", backend=name, module=getattr(backend, "module", name)) if runner_kind == "env" else None
    run_dir = backend.launch(job, runner, run_dir=target, **({"extra_args": ["--resume"]} if resume else {}))
    click.echo(f"run: {run_dir} (report: {Path(run_dir) / 'report.md'})")


@main.group(invoke_without_command=True)
@click.pass_context
@user_errors
def backends(ctx: click.Context) -> None:
    """The capability matrix of the installed backends, and where each one's environment is."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console
    from rich.table import Table

    from agentbridge.backends import backend_python, verification
    from agentbridge.plugins import get_plugins

    registry = get_plugins().backends
    table = Table("backend", "algorithms", "multimodal", "tool images", "max turns", "async", "turn credit",
                  "serves RMs", "scale-out", "verified", "environment")
    yes = {True: "yes", False: "no"}
    verified: list[str] = []
    for name in registry.ids():
        try:
            backend = registry.get(name)
            caps = backend.capabilities()
        except Exception as e:  # noqa: BLE001 - a broken backend package is one row, the others are still listed
            table.add_row(name, f"broken: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                          *[""] * 9)
            continue
        python = backend_python(name, getattr(backend, "module", name))
        where = "this one" if python == sys.executable else python or f"none: agentbridge backends setup {name}"
        short, sentence = verification(caps)
        verified.append(f"{name}: {sentence}")
        table.add_row(name, ", ".join(caps.algorithms), yes[caps.multimodal], yes[caps.tool_images],
                      str(caps.max_turns or "spec"), yes[caps.async_rollout], yes[caps.turn_credit],
                      yes[caps.serves_reward_models], caps.scale_out, short, where)
    Console(width=max(160, Console().width)).print(table)
    for line in verified:
        click.echo(line)
    if not registry.ids():
        click.echo("no backend is installed; pip install agentbridge-trl (or -verl, -openrlhf)")


@backends.command("setup")
@click.argument("name")
@click.option("--venv", "venv", type=click.Path(file_okay=False), default=None,
              help="Where to create the environment (default .venv-NAME).")
@click.option("--cpu/--gpu", "cpu", default=True, show_default=True,
              help="CPU variant (CPU torch; tests) or GPU variant (the backend's inference engine; clusters).")
@click.option("--with", "extra", multiple=True, metavar="PACKAGE",
              help="Also install PACKAGE in the same resolve (repeatable), e.g. --with pytest.")
@click.option("--dry-run", is_flag=True, help="Print the pip steps and do nothing.")
@user_errors
def backends_setup(name: str, venv: str | None, cpu: bool, extra: tuple[str, ...], dry_run: bool) -> None:
    """Create a pinned environment for backend NAME (with agentbridge and the plugins installed here) and record
    it so later commands find it."""
    from agentbridge.backend_envs import setup

    setup(name, Path(venv or f".venv-{name}"), cpu=cpu, extra=list(extra), dry_run=dry_run, say=click.echo)


@main.command()
@click.argument("spec_path", metavar="SPEC")
@click.option("--backends", "backend_names", default=None,
              help="Backends to compare, comma-separated (default: every installed backend that runs here or in "
                   "an environment of its own).")
@click.option("-o", "out", type=click.Path(file_okay=False), default=None,
              help="Where jobs, runs and the report go (default compare/NAME).")
@click.option("--conformance", is_flag=True, help="Also run the conformance suite for each backend.")
@click.option("--no-train", is_flag=True, help="Compile and validate only.")
@set_option
@user_errors
def compare(spec_path: str, backend_names: str | None, out: str | None, conformance: bool, no_train: bool,
            sets: tuple[str, ...]) -> None:
    """Compile SPEC for several backends, validate each in its own environment, train where this machine can,
    and write the side-by-side report."""
    from rich.console import Console
    from rich.table import Table

    from agentbridge.backends import runnable_backends
    from agentbridge.compare.backends import compare_backends

    spec = _spec(spec_path, sets)
    names = [n.strip() for n in backend_names.split(",") if n.strip()] if backend_names else runnable_backends()
    out_dir = Path(out) if out else Path("compare") / spec.name
    path, outcomes, problems = compare_backends(spec, names, out_dir, conformance=conformance, train=not no_train,
                                                say=lambda line: click.echo(line, err=True))
    table = Table("backend", "compile", "validate", "conformance", "run", title=f"{spec.name}: {len(names)} backends")
    for o in outcomes:
        table.add_row(*o.row().values())
    Console(width=max(160, Console().width)).print(table)
    for line in problems:
        click.echo(line if line.startswith("warning: ") else f"problem: {line}", err=True)
    click.echo(f"wrote {path}")
    if any(o.problems for o in outcomes):
        sys.exit(1)


@main.command()
@click.argument("run_dirs", metavar="RUN", nargs=-1, required=True)
@click.option("-o", "out", type=click.Path(file_okay=False), default=None,
              help="Where report.html and the PNGs go (default: FIRST_RUN/report).")
@user_errors
def report(run_dirs: tuple[str, ...], out: str | None) -> None:
    """Draw the side-by-side report of run directories: reward, held-out success, KL, entropy, response length,
    tool failures, throughput, step time and memory against step and wall time; finish reasons; and what the runs
    were made with (spec, seed, versions), differences highlighted."""
    from agentbridge.compare.report import write_comparison

    path, problems = write_comparison([Path(p) for p in run_dirs], Path(out) if out else Path(run_dirs[0]) / "report")
    for line in problems:
        click.echo(line if line.startswith("warning: ") else f"problem: {line}", err=True)
    click.echo(f"wrote {path}")


@main.command()
@click.option("--backend", "backend_names", default=None, metavar="NAME[,NAME...]",
              help="Backend(s) to check, comma-separated (with --algorithms, default: every installed backend that "
                   "runs here or in an environment of its own).")
@click.option("--kind", type=click.Choice(["text", "vlm", "lengths", "all"]), default="all", show_default=True,
              help="Golden episodes for a text model, a vision-language model, the text ones under backend lengths "
                   "below the spec's budgets, or all.")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Keep the compiled golden jobs here (default: a temporary directory).")
@click.option("--algorithms", "algorithms", is_flag=True,
              help="Check the training math instead: each backend's advantages and policy loss against "
                   "agentbridge's reference (an algorithm x backend table), and one optimizer step (a table of "
                   "loss, gradient and update per backend).")
@user_errors
def conformance(backend_names: str | None, kind: str, workdir: str | None, algorithms: bool) -> None:
    """Push the golden episodes through each backend's real path; its ids, masks, log-probs, rewards and images
    must equal the driver's. With --algorithms: the golden batch through each backend's advantage and loss code,
    and one optimizer step through its update code."""
    from rich.console import Console
    from rich.table import Table

    from agentbridge.conformance import KINDS, run_suite

    if algorithms:
        from agentbridge.backends import runnable_backends

        _algorithm_conformance(backend_names or ",".join(runnable_backends()), workdir)
        return
    if not backend_names:
        raise click.UsageError("--backend is required (or pass --algorithms)")
    from concurrent.futures import ThreadPoolExecutor

    kinds = KINDS if kind == "all" else (kind,)
    console = Console()
    failed = False
    names = [_backend(n.strip()).name for n in backend_names.split(",") if n.strip()]
    with console.status(f"conformance: {', '.join(names)}"), \
            ThreadPoolExecutor(max_workers=len(names) or 1) as pool:  # backends in other environments in parallel
        runs = [pool.submit(run_suite, name, kinds, Path(workdir) / name if workdir else None) for name in names]
        suites = [run.result() for run in runs]
    for name, results in zip(names, suites, strict=True):
        table = Table("kind", "case", "result", title=f"conformance: {name}")
        for result in results:
            if result.skipped:
                table.add_row(result.kind, "*", f"skipped: {result.skipped}")
                continue
            named = [p for c in result.case_fields() for p in result.problems if f"case {c}:" in p or f"case {c}[" in p]
            general = [p for p in result.problems if p not in named]
            for case, fields in result.case_fields().items():
                verdict = "[red]error[/red]" if general else (
                    f"[red]differs: {', '.join(dict.fromkeys(fields))}[/red]" if fields else "[green]identical[/green]")
                table.add_row(result.kind, case, verdict)
            failed |= not result.ok
        console.print(table)
        for result in results:
            for line in result.problems:
                click.echo(f"problem: {line}", err=True)
            for line in result.notes:
                click.echo(f"note: {result.kind}: {line}", err=True)
    if failed:
        sys.exit(1)


def _algorithm_conformance(backend_names: str, workdir: str | None) -> None:
    """The algorithm x backend table (✔ identical, ≈ within tolerance, ≠ documented, ✘ with the quantity), the
    recipe knob x backend table (grpo, KL off, each knob away from its default; n/a where the backend refuses it),
    then the one-step table (each backend's optimizer step against the reference step); exit 1 on ✘ in any."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from agentbridge.conformance.algorithms import (
        RECIPE_CASES,
        Cell,
        problem_lines,
        recipe_table,
        run_algorithms,
        table,
    )
    from agentbridge.conformance.step import StepCell, run_step, step_lines, step_table

    names = [_backend(n.strip()).name for n in backend_names.split(",") if n.strip()]
    t0 = time.perf_counter()
    click.echo(f"algorithms and one step: {', '.join(names)} ...", err=True)

    import contextlib
    import importlib.util
    import threading

    # what loads models in this interpreter runs one at a time: transformers' loading is not thread-safe (a model
    # loaded while another thread loads one can come out on the meta device); the backends' own environments run
    # alongside
    here = threading.Lock()

    def one(name: str) -> tuple[list[Cell], StepCell]:  # one backend's probes run one after another
        base = Path(workdir) / name if workdir else None
        in_process = importlib.util.find_spec(getattr(_backend(name), "module", name)) is not None
        with here if in_process else contextlib.nullcontext():
            cells = run_algorithms(name, workdir=base / "algorithms" if base else None, recipe=tuple(RECIPE_CASES))
        with here:  # the reference step loads its model here, whichever environment the backend's step runs in
            return cells, run_step(name, base / "step" if base else None)

    with ThreadPoolExecutor(max_workers=len(names) or 1) as pool:  # backends in other environments run in parallel
        runs = [pool.submit(one, name) for name in names]
        results = [run.result() for run in runs]
    cells = [cell for algorithm_cells, _ in results for cell in algorithm_cells]
    steps = [step for _, step in results]
    click.echo(table(cells, names))
    click.echo("")
    recipe = recipe_table(cells, names)
    if recipe:
        click.echo(recipe)
        click.echo("")
    click.echo(step_table(steps))
    for line in problem_lines(cells):
        click.echo(f"difference: {line}", err=True)
    for line in step_lines(steps):
        click.echo(line, err=True)
    for cell in cells:
        if cell.status == "n/a":
            click.echo(f"n/a: {cell.algorithm} {cell.backend}: {cell.why}", err=True)
    click.echo(f"{len(cells)} cells and {len(steps)} steps in {time.perf_counter() - t0:.1f}s", err=True)
    if any(c.status == "✘" for c in cells) or any(s.status == "✘" for s in steps):
        sys.exit(1)


def _print_summary(summary: dict[str, float], n: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("metric", "value", title=f"{n} episodes")
    for key, value in summary.items():
        if key.startswith("finish/"):
            table.add_row(key, f"{value:.1%}")
        else:
            table.add_row(key, f"{value:.3f}")
    Console().print(table)


@main.command()
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path())
@click.option("-o", "out", type=click.Path(dir_okay=False), default=None,
              help="Where to write the page (default RUN_DIR/view.html).")
@click.option("--model", default=None, metavar="PATH",
              help="Tokenizer to decode the tokens with (default: the run's model.path).")
@user_errors
def view(run_dir: str, out: str | None, model: str | None) -> None:
    """Write view.html: the run's episodes turn by turn, filterable, with the loss mask coloured over the tokens
    and each token's log-prob."""
    from agentbridge.viewer import write_view

    path, n, notes = write_view(Path(run_dir), Path(out) if out else None, model=model)
    for line in notes:
        click.echo(f"note: {line}", err=True)
    click.echo(f"wrote {path} ({n} episodes)")


@main.command("serve")
@click.argument("model", metavar="MODEL")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--name", default=None, help="The model name clients send (default: MODEL).")
@click.option("--max-batch", default=32, show_default=True, type=click.IntRange(1, 1024),
              help="Concurrent requests generated together.")
@click.option("--max-tokens", default=256, show_default=True, type=click.IntRange(1, 1 << 20),
              help="Completion tokens when a request sets none.")
@click.option("--max-tokens-limit", default=2048, show_default=True, type=click.IntRange(1, 1 << 20),
              help="The most max_tokens a request may ask for (422 above).")
@click.option("--max-n", default=8, show_default=True, type=click.IntRange(1, 1024),
              help="The most choices (n) per request (422 above; never more than --max-batch).")
@click.option("--max-queue", default=128, show_default=True, type=click.IntRange(1, 1 << 20),
              help="Sequences that may wait beyond --max-batch; more get 503.")
@click.option("--max-body-bytes", default=1 << 20, show_default=True, type=click.IntRange(1, 1 << 30),
              help="Request body size (413 above).")
@click.option("--request-timeout", default=300.0, show_default=True, type=click.FloatRange(0, min_open=True),
              help="Seconds from admission to reply (504 after; generation stops).")
@click.option("--shutdown-grace", default=2.0, show_default=True, type=click.FloatRange(0, min_open=True),
              help="Seconds running requests may finish after SIGTERM.")
@user_errors
def serve(model: str, host: str, port: int, name: str | None, max_batch: int, max_tokens: int,
          max_tokens_limit: int, max_n: int, max_queue: int, max_body_bytes: int, request_timeout: float,
          shutdown_grace: float) -> None:
    """Serve MODEL (a local model directory or a builtin) over the OpenAI chat-completions protocol, as vLLM and
    SGLang do: a judge or evaluation written against it moves to a real server by its URL."""
    from agentbridge.models import resolve_model_path
    from agentbridge.serve import Limits
    from agentbridge.serve import serve as run_server

    resolve_model_path(model)  # a bad path is one line before the server starts
    limits = Limits(max_batch=max_batch, max_tokens=max_tokens, max_tokens_limit=max_tokens_limit,
                    max_n=max_n, max_queue=max_queue, max_body_bytes=max_body_bytes,
                    request_timeout_s=request_timeout, shutdown_grace_s=shutdown_grace)
    click.echo(f"serving {name or model} at http://{host}:{port}/v1", err=True)
    run_server(model, host=host, port=port, name=name, limits=limits)


if __name__ == "__main__":
    main()

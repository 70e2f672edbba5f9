"""The learning experiment around an RL phase that runs as a program of its own (veRL's or OpenRLHF's trainer).

``prepare`` runs before the backend's trainer: held-out eval of the initial model, the warm start stopped on dev
success, held-out eval again; it saves the warm-started model and prints the directory the trainer starts from.
``finish`` runs after it: held-out eval of the trained checkpoint, the paired tests and the run report. Each held-out
evaluation runs on the trainer's devices of this node, a shard of the tasks per GPU
(:mod:`agentbridge.training.sharded_eval`). The arms,
``eval.json`` and ``report.md`` are the ones every backend's run writes (:mod:`agentbridge.training.experiment`);
the SFT-only control needs the RL phase's wall time in-process, so it is left to backends that train in-process.

    python -m agentbridge.training.phases prepare JOB_DIR --run-dir DIR      # prints the model directory RL uses
    python -m agentbridge.training.phases finish JOB_DIR --run-dir DIR --model CHECKPOINT_DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

WARM_MODEL = "warm_start_model"


def launch_lines(spec: Any, *, job: str, run_dir: str, checkpoint: str) -> tuple[list[str], list[str]]:
    """The shell lines a backend's launch script runs before and after its trainer, when the spec asks for an
    evaluation or a warm start: ``prepare`` (which sets ``$MODEL`` to the warm-started model, if any) and
    ``finish`` on ``checkpoint`` (a shell expression for the trained HF model directory). ``job`` is where
    ``spec.yaml`` is read from, ``run_dir`` where the arms go; ``$PYTHON`` runs them. ``AGENTBRIDGE_PHASES=off``
    skips both (the trainer alone). Empty lists when there is nothing to run."""
    if spec.algorithm.warm_start is None and spec.data.eval is None:
        return [], []
    phases = '"$PYTHON" -m agentbridge.training.phases'
    on = '[ "${AGENTBRIDGE_PHASES:-on}" != off ]'
    before = [
        "# agentbridge's experiment around the trainer: held-out eval and the warm start before it, eval after it",
        f"if {on}; then",
        f'  WARM="$({phases} prepare "{job}" --run-dir "{run_dir}" | tail -n 1)"',
        '  if [ -n "$WARM" ]; then MODEL="$WARM"; fi',
        "fi",
    ]
    after = [
        f'CHECKPOINT="{checkpoint}"',
        f'if {on} && [ -f "$CHECKPOINT/config.json" ]; then',
        f'  {phases} finish "{job}" --run-dir "{run_dir}" --model "$CHECKPOINT"',
        f"elif {on}; then",
        '  echo "agentbridge: no trained model at $CHECKPOINT; after_rl is not evaluated" >&2',
        "fi",
    ]
    return before, after


def _setup(job_dir: Path, quiet: bool) -> tuple[Any, Any, Any]:
    from agentbridge.rollout.agent import Agent
    from agentbridge.spec import load_spec
    from agentbridge.training.console import RunConsole, quiet_libraries

    quiet_libraries()
    spec = load_spec(job_dir / "spec.yaml")
    agent = Agent.from_spec(spec)
    return spec, agent, RunConsole(quiet=quiet)


def write_run_manifest(job_dir: Path, run_dir: Path, spec: Any, agent: Any) -> None:
    """The run's ``manifest.json`` (backend, spec hash, seed, chat-template hash, the job's versions), as every
    backend's run has one: what ``agentbridge report`` compares runs by."""
    from agentbridge.runs import manifest, text_hash
    from agentbridge.spec import spec_hash

    job = json.loads((job_dir / "manifest.json").read_text()) if (job_dir / "manifest.json").is_file() else {}
    info = manifest(kind="run", backend=job.get("backend"), spec_hash=spec_hash(spec), seed=spec.seed,
                    chat_template_hash=text_hash(agent.renderer.chat_template), job=str(job_dir),
                    versions={k: v for k, v in (job.get("versions") or {}).items() if k != "python"})
    (run_dir / "manifest.json").write_text(json.dumps(info, indent=2) + "\n")


def prepare(job_dir: Path, run_dir: Path, *, quiet: bool = False) -> Path | None:
    """Eval, warm start, eval; returns the warm-started model's directory (None when the spec has no warm start).
    Writes the run's manifest first."""
    from agentbridge.models import load_model
    from agentbridge.training.experiment import Experiment
    from agentbridge.training.sharded_eval import ShardedEval, eval_devices

    spec, agent, console = _setup(job_dir, quiet)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run_manifest(job_dir, run_dir, spec, agent)
    devices = eval_devices(spec.resources.gpus_per_node)
    console.say(f"loading {spec.model.path} on {devices[0]}")
    model = load_model(spec.model.path, seed=spec.seed).to(devices[0])
    eval_tasks = agent.tasks("eval") if spec.data.eval is not None else []
    out = run_dir / WARM_MODEL
    with console.bars():
        experiment = Experiment(agent, model, run_dir, eval_tasks, say=console.say, progress=console.progress)
        experiment.sharded = ShardedEval(devices, job_dir / "spec.yaml")
        experiment.evaluate("before_training", source=spec.model.path, seed=spec.seed)
        if spec.algorithm.warm_start is None:
            if "before_training" in experiment.evals:
                experiment.evals["before_rl"] = experiment.evals["before_training"]   # the same checkpoint
                experiment.conclude()
            return None
        experiment.warm_start()
        model.save_pretrained(out)  # before its evaluation: the other shards load it from here
        agent.tokenizer.save_pretrained(out)
        experiment.evaluate("before_rl", source=str(out))
    console.say(f"warm-started model: {out}")
    return out


def finish(job_dir: Path, run_dir: Path, model_dir: Path, *, quiet: bool = False) -> dict[str, Any]:
    """Eval of the trained checkpoint as ``after_rl``, the paired tests and the report; returns ``eval.json``."""
    from agentbridge.models import load_model
    from agentbridge.training.experiment import Experiment, load_evals
    from agentbridge.training.report import write_report
    from agentbridge.training.sharded_eval import ShardedEval, eval_devices

    spec, agent, console = _setup(job_dir, quiet)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: no trained checkpoint here (no config.json)")
    devices = eval_devices(spec.resources.gpus_per_node)
    model = load_model(str(model_dir)).to(devices[0])
    eval_tasks = agent.tasks("eval") if spec.data.eval is not None else []
    with console.bars():
        experiment = Experiment(agent, model, run_dir, eval_tasks, say=console.say, progress=console.progress)
        experiment.sharded = ShardedEval(devices, job_dir / "spec.yaml")
        experiment.evals.update(load_evals(run_dir, eval_tasks))
        experiment.evaluate("after_rl", source=str(model_dir))
        summary = experiment.conclude()
    console.say(f"report: {write_report(run_dir)}")
    return summary


# ---------------------------------------------------------------- the trainer's own step metrics, as the run's rows
# RLinf, slime and ROLL log their steps to TensorBoard; each adapter's ``run_metrics`` names the tags, these read the
# event files, write ``metrics.jsonl`` and hand each row to ``on_metrics``.


def tensorboard_scalars(source: Path, problems: list[str], skip: tuple[str, ...] = ("agentbridge",)
                        ) -> dict[int, dict[str, float]]:
    """``{step: {tag: value}}`` of every scalar in the event files under ``source`` (a folder whose first part is in
    ``skip`` left out: agentbridge's own tracker writes there); a later file wins for the same step and tag (a
    resumed run). One line per unreadable file in ``problems``."""
    if not source.is_dir():
        problems.append(f"{source}: missing (the trainer's TensorBoard logger did not run)")
        return {}
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util.tensor_util import make_ndarray
    except ImportError:
        problems.append(f"the tensorboard package is not installed here (pip install tensorboard): {source} not read")
        return {}
    files = sorted((p for p in source.rglob("events.out.tfevents.*")
                    if p.is_file() and p.relative_to(source).parts[0] not in skip), key=lambda p: (p.name, str(p)))
    steps: dict[int, dict[str, float]] = {}
    for path in files:  # event file names start with their first event's time: oldest first
        try:
            for event in EventFileLoader(str(path)).Load():
                for value in event.summary.value:
                    kind = value.WhichOneof("value")
                    number = value.simple_value if kind == "simple_value" else (
                        make_ndarray(value.tensor) if kind == "tensor" else None)
                    if number is not None and getattr(number, "size", 1) == 1:
                        steps.setdefault(int(event.step), {})[value.tag] = float(number)
        except Exception as e:  # noqa: BLE001 - one line per bad file, the others are still read
            problems.append(f"{path}: unreadable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return steps


def step_row(step: int, scalars: dict[str, float], names: dict[str, str], prefix: str,
             keep: tuple[str, ...] = ()) -> dict[str, float]:
    """One row: ``step``, each tag under its normalized name (``names``), a tag starting with one of ``keep`` as it is
    (already agentbridge's name), any other under ``<prefix>/``."""
    row: dict[str, float] = {"step": step}
    for tag, value in scalars.items():
        row[names.get(tag) or (tag if tag.startswith(keep) else f"{prefix}/{tag}")] = float(value)
    return row


def tensorboard_rows(source: Path, problems: list[str], names: dict[str, str], prefix: str,
                     keep: tuple[str, ...] = ()) -> list[dict[str, float]]:
    """One :func:`step_row` per step logged under ``source``; the trainers log 0-based steps, a row's ``step`` is
    the optimizer step it follows (1-based)."""
    steps = tensorboard_scalars(source, problems)
    return [step_row(step + 1, steps[step], names, prefix, keep) for step in sorted(steps)]


def feed_metrics(rows: list[dict[str, float]], run_dir: Path, plugins: Any, spec: Any, problems: list[str]) -> None:
    """Each row to ``plugins``' ``on_metrics`` hook, with the spec's trackers (``logging:``) among them for the time it
    takes; a failing plugin is one line in ``problems`` and gets no more rows."""
    from agentbridge.training.trackers import PLUGIN_NAME, Trackers

    trackers = Trackers(spec, run_dir, say=problems.append) if spec is not None and spec.logging.enabled() else None
    if trackers is not None:
        plugins.register(PLUGIN_NAME, trackers)
    try:
        for row in rows:
            plugins.hook.on_metrics(step=int(row["step"]), metrics=row, run=run_dir)
    except Exception as e:  # noqa: BLE001 - the run's metrics.jsonl is written already
        problems.append(f"on_metrics: {type(e).__name__}: {e}")
    finally:
        if trackers is not None:
            plugins.unregister(PLUGIN_NAME)
            trackers.close()


def record_trainer_metrics(run_dir: Path, rows: list[dict[str, float]], spec: Any, problems: list[str]) -> None:
    """``metrics.jsonl`` of ``rows``, then :func:`feed_metrics` to the installed plugins."""
    from agentbridge.plugins import get_plugins
    from agentbridge.runs import write_jsonl

    write_jsonl(run_dir / "metrics.jsonl", rows)
    feed_metrics(rows, run_dir, get_plugins(), spec, problems)


def trainer_metrics_main(argv: list[str] | None, rows_of: Any, label: str) -> int:
    """``python -m <adapter>.run_metrics RUN_DIR [--job JOB_DIR]``: ``rows_of(run_dir, problems)`` (the trainer's
    step rows) recorded by :func:`record_trainer_metrics`; problems on stderr; exit 1 when there is no row."""
    parser = argparse.ArgumentParser(description=f"{label}'s step metrics as the run's metrics.jsonl")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--job", type=Path, default=None, help="The job directory (its spec's trackers get the rows).")
    args = parser.parse_args(argv)
    problems: list[str] = []
    spec = None
    if args.job is not None:
        from agentbridge.spec import load_spec

        try:
            spec = load_spec(args.job / "spec.yaml")
        except Exception as e:  # noqa: BLE001 - the rows are still written, without the spec's trackers
            problems.append(f"{args.job / 'spec.yaml'}: not read, no tracker gets the metrics: {type(e).__name__}")
    rows = rows_of(args.run_dir, problems)
    if rows:
        record_trainer_metrics(args.run_dir, rows, spec, problems)
    for line in problems:
        print(f"agentbridge: {line}", file=sys.stderr)
    print(f"agentbridge: {len(rows)} step(s) of {label} metrics in {args.run_dir / 'metrics.jsonl'}", file=sys.stderr)
    return 0 if rows else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentbridge.training.phases", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="phase", required=True)
    for name in ("prepare", "finish"):
        p = sub.add_parser(name)
        p.add_argument("job_dir", type=Path)
        p.add_argument("--run-dir", type=Path, required=True)
        p.add_argument("--quiet", action="store_true")
        if name == "finish":
            p.add_argument("--model", type=Path, required=True, help="The trained checkpoint (a HF model directory).")
    args = parser.parse_args(argv)
    try:
        if args.phase == "prepare":
            out = prepare(args.job_dir, args.run_dir, quiet=args.quiet)
            print(out or "")
        else:
            finish(args.job_dir, args.run_dir, args.model, quiet=args.quiet)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

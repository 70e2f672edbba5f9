"""The learning experiment around an RL phase that runs as a program of its own (veRL's or OpenRLHF's trainer).

``prepare`` runs before the backend's trainer: held-out eval of the initial model, the warm start stopped on dev
success, held-out eval again; it saves the warm-started model and prints the directory the trainer starts from.
``finish`` runs after it: held-out eval of the trained checkpoint, the paired tests and the run report. The arms,
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


def _on_accelerator(model: Any) -> Any:
    """The model on the first GPU when there is one (a cluster's head node), else where it is."""
    import torch

    return model.to("cuda") if torch.cuda.is_available() else model


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

    spec, agent, console = _setup(job_dir, quiet)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run_manifest(job_dir, run_dir, spec, agent)
    console.say(f"loading {spec.model.path}")
    model = _on_accelerator(load_model(spec.model.path, seed=spec.seed))
    eval_tasks = agent.tasks("eval") if spec.data.eval is not None else []
    with console.bars():
        experiment = Experiment(agent, model, run_dir, eval_tasks, say=console.say, progress=console.progress)
        experiment.evaluate("before_training")
        if spec.algorithm.warm_start is None:
            if "before_training" in experiment.evals:
                experiment.evals["before_rl"] = experiment.evals["before_training"]   # the same checkpoint
                experiment.conclude()
            return None
        experiment.warm_start()
        experiment.evaluate("before_rl")
    out = run_dir / WARM_MODEL
    model.save_pretrained(out)
    agent.tokenizer.save_pretrained(out)
    console.say(f"warm-started model: {out}")
    return out


def finish(job_dir: Path, run_dir: Path, model_dir: Path, *, quiet: bool = False) -> dict[str, Any]:
    """Eval of the trained checkpoint as ``after_rl``, the paired tests and the report; returns ``eval.json``."""
    from agentbridge.models import load_model
    from agentbridge.training.experiment import Experiment, load_evals
    from agentbridge.training.report import write_report

    spec, agent, console = _setup(job_dir, quiet)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: no trained checkpoint here (no config.json)")
    model = _on_accelerator(load_model(str(model_dir)))
    eval_tasks = agent.tasks("eval") if spec.data.eval is not None else []
    with console.bars():
        experiment = Experiment(agent, model, run_dir, eval_tasks, say=console.say, progress=console.progress)
        experiment.evals.update(load_evals(run_dir, eval_tasks))
        experiment.evaluate("after_rl")
        summary = experiment.conclude()
    console.say(f"report: {write_report(run_dir)}")
    return summary


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

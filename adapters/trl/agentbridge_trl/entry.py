"""The job's entry point: ``python -m agentbridge_trl.entry JOB_DIR --run-dir DIR``.

agentbridge's learning experiment (``agentbridge.training.experiment``) with TRL's GRPOTrainer as the RL phase:
held-out eval before training → warm start stopped on dev success → eval → GRPO → eval → SFT-only control for
RL's wall time → eval → paired tests and the report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def run_job(job_dir: Path, run_dir: Path, *, quiet: bool = False) -> dict[str, Any]:
    """Run the whole job; writes everything under ``run_dir`` and returns ``eval.json``'s content."""
    from agentbridge.models import cache_entries_used, load_model
    from agentbridge.plugins import get_plugins
    from agentbridge.rollout.agent import Agent, read_tasks_jsonl
    from agentbridge.runs import keep_earlier_run, manifest, package_version, text_hash
    from agentbridge.spec import load_spec, spec_hash
    from agentbridge.training.console import RunConsole, quiet_libraries
    from agentbridge.training.experiment import Experiment
    from agentbridge.training.logger import RunLogger
    from agentbridge.training.report import write_report
    from agentbridge.training.trackers import PLUGIN_NAME as TRACKERS_PLUGIN
    from agentbridge.training.trackers import Trackers, tracker_environment
    from agentbridge_trl.config import options as trl_options
    from agentbridge_trl.trainer import build_trainer

    quiet_libraries()
    console = RunConsole(quiet=quiet, every={"GRPO": 5})
    say, progress = console.say, console.progress
    spec = load_spec(job_dir / "spec.yaml")
    kept = keep_earlier_run(run_dir)
    if kept is not None:
        say(f"the earlier run in {run_dir} is kept as {kept}")
    run_dir.mkdir(parents=True, exist_ok=True)  # free now: absent or empty
    grpo_kwargs = json.loads((job_dir / "grpo_config.json").read_text())
    grpo_kwargs["output_dir"] = str(run_dir / "trainer")

    say(f"loading {spec.model.path}")
    agent = Agent.from_spec(spec)
    problems = agent.renderer.check()
    if problems:
        raise ValueError(f"model.chat_template: {problems[0]}")
    model = load_model(spec.model.path, seed=spec.seed)
    info = manifest(kind="run", backend="trl", spec_hash=spec_hash(spec), seed=spec.seed,
                    chat_template_hash=text_hash(agent.renderer.chat_template), job=str(job_dir),
                    caches=cache_entries_used(),
                    versions={"agentbridge-trl": package_version("agentbridge-trl"), "trl": package_version("trl"),
                              "transformers": package_version("transformers"), "torch": package_version("torch")})
    (run_dir / "manifest.json").write_text(json.dumps(info, indent=2) + "\n")
    train_tasks = read_tasks_jsonl(job_dir / "data" / "train.jsonl")
    eval_tasks = read_tasks_jsonl(job_dir / "data" / "eval.jsonl")
    eval_size = trl_options(spec)["eval_size"]
    eval_tasks = eval_tasks[:eval_size] if eval_size else eval_tasks
    with console.bars():
        experiment = Experiment(agent, model, run_dir, eval_tasks, say=say, progress=progress)
        experiment.evaluate("before_training")
        experiment.warm_start()
        if spec.algorithm.warm_start is not None:
            experiment.evaluate("before_rl")
        elif "before_training" in experiment.evals:
            experiment.evals["before_rl"] = experiment.evals["before_training"]  # the same checkpoint
        algo = spec.algorithm
        say(f"GRPO ({algo.name}): {algo.steps} steps x {algo.batch_size} prompts x {algo.group_size} samples")
        update = progress("GRPO", algo.steps)

        def on_row(row: dict[str, float]) -> None:
            update(int(row["step"]), f"reward {row['reward/mean']:.3f}  {row['time/step_s']:.1f}s/step")

        plugins = get_plugins()
        trackers = Trackers(spec, run_dir, say=say)  # agentbridge's rows, through on_metrics
        plugins.register(TRACKERS_PLUGIN, trackers)
        if spec.logging.enabled():  # where TRL's own trackers (report_to) write
            for key, value in tracker_environment(spec, str(run_dir.absolute()), "trl").items():
                os.environ.setdefault(key, value)
        try:
            logger = RunLogger(run_dir, prefix="trl", on_row=on_row, plugins=plugins,
                               max_error_rate=spec.agent.max_error_rate)
            trainer, _ = build_trainer(agent, model, grpo_kwargs, train_tasks, logger)
            experiment.rl(trainer.train)
        finally:
            plugins.unregister(TRACKERS_PLUGIN)
            trackers.close()
        experiment.evaluate("after_rl")
        model.save_pretrained(run_dir / "model")
        agent.tokenizer.save_pretrained(run_dir / "model")
        experiment.control()
        summary = experiment.conclude()
        update(trainer.state.global_step, "", True)
    report = write_report(run_dir)
    say(f"report: {report}")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentbridge_trl.entry", description=__doc__)
    parser.add_argument("job_dir", type=Path)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    try:
        run_job(args.job_dir, args.run_dir, quiet=args.quiet)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

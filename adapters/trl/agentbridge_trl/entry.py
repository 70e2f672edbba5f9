"""The job's entry point: ``python -m agentbridge_trl.entry JOB_DIR --run-dir DIR``.

Warm start (optional) → held-out eval → GRPO with agentbridge's rollout inside TRL → held-out eval → report.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _phase(console: Any, text: str) -> None:
    console.print(f"[bold cyan]▸[/] {text}")


def run_job(job_dir: Path, run_dir: Path, *, quiet: bool = False) -> dict[str, Any]:
    """Run the whole job; writes everything under ``run_dir`` and returns the eval results."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from transformers.utils import logging as hf_logging

    from agentbridge.rollout.agent import Agent, read_tasks_jsonl
    from agentbridge.runs import manifest, package_version, text_hash
    from agentbridge.spec import load_spec, spec_hash
    from agentbridge_trl.config import options as trl_options
    from agentbridge_trl.evaluate import evaluate
    from agentbridge_trl.report import write_report
    from agentbridge_trl.trainer import RunLogger, build_trainer, load_model
    from agentbridge_trl.warm_start import demonstrations, warm_start

    warnings.filterwarnings("ignore", message=".*deprecated and will be removed in v6.*", category=FutureWarning)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    console = Console(stderr=True, quiet=quiet)
    spec = load_spec(job_dir / "spec.yaml")
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    grpo_kwargs = json.loads((job_dir / "grpo_config.json").read_text())
    grpo_kwargs["output_dir"] = str(run_dir / "trainer")
    _phase(console, f"loading {spec.model.path}")
    agent = Agent.from_spec(spec)
    problems = agent.renderer.check()
    if problems:
        raise ValueError(f"model.chat_template: {problems[0]}")
    model = load_model(spec.model.path)
    info = manifest(kind="run", backend="trl", spec_hash=spec_hash(spec), seed=spec.seed,
                    chat_template_hash=text_hash(agent.renderer.chat_template),
                    job=str(job_dir), versions={"agentbridge-trl": package_version("agentbridge-trl"),
                                                "trl": package_version("trl"),
                                                "transformers": package_version("transformers"),
                                                "torch": package_version("torch")})
    (run_dir / "manifest.json").write_text(json.dumps(info, indent=2) + "\n")
    train_tasks = read_tasks_jsonl(job_dir / "data" / "train.jsonl")
    eval_tasks = read_tasks_jsonl(job_dir / "data" / "eval.jsonl")
    eval_size = trl_options(spec)["eval_size"]
    eval_tasks = eval_tasks[:eval_size] if eval_size else eval_tasks
    evals: dict[str, Any] = {}
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[info]}"))

    def record_eval(name: str) -> None:
        started = time.perf_counter()
        _phase(console, f"evaluating ({name}) on {len(eval_tasks)} held-out tasks, greedy")
        result = evaluate(agent, model, eval_tasks)
        result["seconds"] = time.perf_counter() - started
        evals[name] = result
        (run_dir / "eval.json").write_text(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "scores"}
                                                        for k, v in evals.items()}, indent=2) + "\n")
        console.print(f"  {name}: {result['mean']:.3f} ± {result['ci95']:.3f} (n={result['n']})")

    ws = spec.algorithm.warm_start
    if ws is not None:
        _phase(console, f"warm start: {ws.demos} scripted demonstrations")
        demos = demonstrations(agent, ws.demos)
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task("SFT", total=None, info="")

            def on_step(step: int, total: int, loss: float | None) -> None:
                info = f"loss {loss:.3f}" if loss else ""
                progress.update(bar, completed=step, total=total, info=info)
                if not console.is_terminal and step % 25 == 0:  # logs and pipes get a line now and then
                    console.print(f"  SFT step {step}/{total} {info}")

            result = warm_start(model, agent.tokenizer, demos, ws, run_dir / "sft", seed=spec.seed,
                                use_cpu=spec.resources.gpus_per_node == 0, on_step=on_step)
        (run_dir / "warm_start.json").write_text(json.dumps(result, indent=2) + "\n")
    if eval_tasks:
        record_eval("before_rl")
    _phase(console, f"GRPO ({spec.algorithm.name}): {spec.algorithm.steps} steps x "
                    f"{spec.algorithm.batch_size} prompts x {spec.algorithm.group_size} samples")
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("GRPO", total=spec.algorithm.steps, info="")

        def on_row(row: dict[str, float]) -> None:
            info = f"reward {row['reward/mean']:.3f}  {row['time/step_s']:.1f}s/step"
            progress.update(bar, completed=int(row["step"]), info=info)
            if not console.is_terminal and int(row["step"]) % 5 == 0:
                console.print(f"  GRPO step {int(row['step'])}/{spec.algorithm.steps} {info}")

        logger = RunLogger(run_dir, on_row=on_row)
        trainer, _ = build_trainer(agent, model, grpo_kwargs, train_tasks, logger)
        trainer.train()
    if eval_tasks:
        record_eval("after_rl")
    model.save_pretrained(run_dir / "model")
    agent.tokenizer.save_pretrained(run_dir / "model")
    report = write_report(run_dir)
    _phase(console, f"report: {report}")
    return evals


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

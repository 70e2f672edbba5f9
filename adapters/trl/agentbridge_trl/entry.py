"""The job's entry point: ``python -m agentbridge_trl.entry JOB_DIR --run-dir DIR``.

agentbridge's learning experiment (``agentbridge.training.experiment``) with TRL's GRPOTrainer as the RL phase:
held-out eval before training → warm start stopped on dev success → eval → GRPO → eval → SFT-only control for
RL's wall time → eval → paired tests and the report.

With ``--resume`` it continues the run in ``--run-dir`` from its newest checkpoint (``agentbridge_trl.resume``):
the arms already in ``eval_scores.jsonl`` are not evaluated again, the warm start is not redone (the control
starts from ``warm_start.pt``), and GRPO goes on from the checkpoint's step with its optimizer, scheduler, RNG and
data position.

With ``model.lora`` the warm start (and the SFT-only control) train every weight of the base model as without it;
GRPO then trains a new LoRA adapter on the warm-started base, which is also the reference policy of the KL term
(TRL takes the reference log-probs with the adapter disabled). After GRPO the adapter is merged into the weights:
the evaluation after RL, ``RUN_DIR/model`` and the control see a plain transformers model, and
``RUN_DIR/model/model_info.json`` says so. The trainer's checkpoints hold the adapter alone; a run that keeps them
also saves the warm-started base under ``RUN_DIR/rl_base`` so that ``--resume`` puts the adapter back on it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

RL_START = "rl_start.pt"  # the warm-started weights the other ranks load (several processes); removed once loaded
RL_BASE = "rl_base"  # with model.lora and checkpoints: the warm-started base the adapter trains on, for --resume


def run_job(job_dir: Path, run_dir: Path, *, quiet: bool = False, resume: bool = False) -> dict[str, Any]:
    """Run the whole job (or, with ``resume``, the rest of the run in ``run_dir`` from its newest checkpoint);
    writes everything under ``run_dir`` and returns ``eval.json``'s content."""
    from agentbridge.adapter import get_plugins
    from agentbridge.adapter.models import cache_entries_used, load_model
    from agentbridge.adapter.rollout import Agent, read_tasks_jsonl
    from agentbridge.adapter.training import (
        TRACKERS_PLUGIN,
        Experiment,
        NoTrainingSteps,
        RunConsole,
        RunLogger,
        Trackers,
        check_rl_steps,
        keep_earlier_run,
        manifest,
        package_version,
        quiet_libraries,
        text_hash,
        tracker_environment,
        write_report,
    )
    from agentbridge.spec import load_spec, spec_hash
    from agentbridge_trl.config import options as trl_options
    from agentbridge_trl.config import rl_step_plan
    from agentbridge_trl.ranks import Ranks
    from agentbridge_trl.resume import checkpoint_step, record_resume, resume_point
    from agentbridge_trl.trainer import build_trainer, lora_info, merge_adapter, write_model_info
    from agentbridge_trl.zero import uses_deepspeed

    quiet_libraries()
    spec = load_spec(job_dir / "spec.yaml")
    grpo_kwargs = json.loads((job_dir / "grpo_config.json").read_text())
    grpo_kwargs["output_dir"] = str(run_dir / "trainer")
    ranks = Ranks(cpu=bool(grpo_kwargs.get("use_cpu", False)), timeout_s=float(grpo_kwargs.get("ddp_timeout", 1800)))
    console = RunConsole(quiet=quiet or not ranks.main, every={"GRPO": 5})
    say, progress = console.say, console.progress
    checkpoint = resume_point(run_dir, spec_hash(spec)) if resume else None

    # RL finished before the run stopped: its last checkpoint is the trained model, and there is nothing to train
    rl_done = checkpoint is not None and checkpoint_step(checkpoint) >= spec.algorithm.steps
    train_tasks = read_tasks_jsonl(job_dir / "data" / "train.jsonl")
    if not rl_done:  # a run that would make no RL step stops here, before the evaluations and the warm start
        check_rl_steps(len(train_tasks), *rl_step_plan(grpo_kwargs, ranks.count, len(train_tasks)))
    lora = spec.model.lora
    whole = lora is None or rl_done  # every rank holds the trained model whole after RL (LoRA: see below)
    model_path = str(checkpoint) if checkpoint is not None and rl_done else spec.model.path
    if lora is not None and checkpoint is not None:  # the checkpoint holds the adapter: its base is loaded
        model_path = _lora_base(run_dir, spec)
    say(f"loading {model_path}")
    agent = Agent.from_spec(spec)
    problems = agent.renderer.check()
    if problems:
        raise ValueError(f"model.chat_template: {problems[0]}")
    # on this process's device (its GPU when the trainer has one): the evaluations and the warm start run there
    model = load_model(model_path, seed=spec.seed).to(ranks.device)
    if lora is not None and rl_done:
        say(f"merging the LoRA adapter of {checkpoint}")
        model = merge_adapter(model, checkpoint)
    if ranks.main:  # the run directory is set up once; the other ranks wait for it below
        kept = None if resume else keep_earlier_run(run_dir)
        if kept is not None:
            say(f"the earlier run in {run_dir} is kept as {kept}")
        run_dir.mkdir(parents=True, exist_ok=True)  # free now (absent or empty), or the run to resume
        if checkpoint is None:
            extra: dict[str, Any] = {"processes": ranks.count} if ranks.count > 1 else {}
            if lora is not None:
                extra["lora"] = lora_info(spec)
            info = manifest(kind="run", backend="trl", spec_hash=spec_hash(spec), seed=spec.seed,
                            chat_template_hash=text_hash(agent.renderer.chat_template), job=str(job_dir),
                            caches=cache_entries_used(), **extra,
                            versions={"agentbridge-trl": package_version("agentbridge-trl"),
                                      "trl": package_version("trl"),
                                      "transformers": package_version("transformers"),
                                      "torch": package_version("torch")})
            (run_dir / "manifest.json").write_text(json.dumps(info, indent=2) + "\n")
        else:
            record_resume(run_dir, checkpoint)
    ranks.wait()
    eval_tasks = read_tasks_jsonl(job_dir / "data" / "eval.jsonl")
    eval_size = trl_options(spec)["eval_size"]
    eval_tasks = eval_tasks[:eval_size] if eval_size else eval_tasks
    with console.bars():
        experiment = Experiment(agent, model, run_dir, eval_tasks, say=say, progress=progress)
        earlier_s = 0.0  # RL time spent before the checkpoint a resumed run continues from
        # a new run's held-out evaluations before RL are spread over the ranks (each holds the same weights); the
        # warm start runs once, on the main process, and the other ranks start RL from its weights
        spread = ranks.count > 1 and checkpoint is None
        warm_started = checkpoint is None and spec.algorithm.warm_start is not None
        if spread:
            _evaluate_on_every_rank(experiment, ranks, "before_training")
        if ranks.main:
            save_state = grpo_kwargs.get("save_strategy", "no") != "no"
            earlier_s = _before_rl(experiment, run_dir, checkpoint, save_state=save_state,
                                   share_weights=ranks.count > 1, evaluate=not spread)
            if lora is not None and save_state and warm_started:
                model.save_pretrained(run_dir / RL_BASE)  # what the adapter in the checkpoints trains on
        _share_start(ranks, model, run_dir / RL_START, warm_started)
        if spread and warm_started:
            _evaluate_on_every_rank(experiment, ranks, "before_rl")
        algo = spec.algorithm
        update = progress("GRPO", algo.steps)
        last_step = algo.steps
        if rl_done:
            say(f"GRPO finished before the run stopped: the trained model is {checkpoint}")
            experiment.rl_seconds = earlier_s
        else:
            say(f"GRPO ({algo.name}): {algo.steps} steps x {algo.batch_size} prompts x {algo.group_size} samples"
                + (f" on {ranks.count} processes" if ranks.count > 1 else ""))

            def on_row(row: dict[str, float]) -> None:
                update(int(row["step"]), f"reward {row['reward/mean']:.3f}  {row['time/step_s']:.1f}s/step", False)

            plugins = get_plugins() if ranks.main else None
            trackers = Trackers(spec, run_dir, say=say) if ranks.main else None  # agentbridge's rows, on_metrics
            if plugins is not None:
                plugins.register(TRACKERS_PLUGIN, trackers)
            if spec.logging.enabled():  # where TRL's own trackers (report_to) write
                for key, value in tracker_environment(spec, str(run_dir.absolute()), "trl").items():
                    os.environ.setdefault(key, value)
            trainer = None
            try:
                logger = RunLogger(run_dir, prefix="trl", on_row=on_row if ranks.main else None, plugins=plugins,
                                   max_error_rate=spec.agent.max_error_rate,
                                   gather=ranks.gather if ranks.count > 1 else None, main=ranks.main)
                trainer, _ = build_trainer(agent, model, grpo_kwargs, train_tasks, logger)
                resume_from = str(checkpoint) if checkpoint is not None else None
                experiment.rl(lambda: trainer.train(resume_from_checkpoint=resume_from), earlier_s=earlier_s)
                last_step = trainer.state.global_step
                if last_step == 0:  # the check above missed a way to train nothing: no report of what RL did
                    raise NoTrainingSteps(f"GRPO made 0 steps over {len(train_tasks)} training tasks; nothing was "
                                          "trained, so the run stops before its report")
            finally:
                if plugins is not None:
                    plugins.unregister(TRACKERS_PLUGIN)
                if trackers is not None:
                    trackers.close()
            if uses_deepspeed(trainer):  # every rank: DeepSpeed's shards gathered into one whole model on each
                model = _after_deepspeed(experiment, trainer)
                whole = True
            elif lora is not None and ranks.main:
                model = _after_lora(experiment, trainer)
        # the main process decides (a resumed run may have evaluated it before it stopped)
        if ranks.count > 1 and whole and ranks.gather("after_rl" not in experiment.evals)[0]:
            _evaluate_on_every_rank(experiment, ranks, "after_rl")
        if not ranks.main:  # RL (and the evaluation after it) were the phases spread over the ranks
            return {}
        if "after_rl" not in experiment.evals:  # a resumed run may have evaluated it before it stopped
            experiment.evaluate("after_rl")
        model.save_pretrained(run_dir / "model")
        agent.tokenizer.save_pretrained(run_dir / "model")
        write_model_info(run_dir / "model", spec, base=_describe_base(run_dir, spec))
        if "sft_control" not in experiment.evals:
            experiment.control()
        summary = experiment.conclude()
        update(last_step, "", True)
    report = write_report(run_dir)
    say(f"report: {report}")
    return summary


def _before_rl(experiment: Any, run_dir: Path, checkpoint: Path | None, *, save_state: bool,
               share_weights: bool, evaluate: bool = True) -> float:
    """The main process's phases before RL: held-out eval, the warm start and its eval (or, resuming, reading
    them back and dropping the rows after the checkpoint). Returns the RL time spent before the checkpoint.
    ``evaluate=False``: the evaluations are left to every rank (:func:`_evaluate_on_every_rank`)."""
    import torch

    from agentbridge.adapter.training import load_evals
    from agentbridge_trl.resume import WARM_STATE, checkpoint_step, keep_rows_through

    spec = experiment.agent.spec
    if checkpoint is None:
        if evaluate:
            experiment.evaluate("before_training")
        experiment.warm_start()
        if spec.algorithm.warm_start is not None:
            if evaluate:
                experiment.evaluate("before_rl")
            if share_weights:  # what the other ranks start RL from
                torch.save(experiment.model.state_dict(), run_dir / RL_START)
        elif "before_training" in experiment.evals:
            experiment.evals["before_rl"] = experiment.evals["before_training"]  # the same checkpoint
        if save_state:
            experiment.keep_warm_start(run_dir / WARM_STATE)
        return 0.0
    experiment.evals.update(load_evals(run_dir, experiment.eval_tasks))
    experiment.resume_warm_start(run_dir / WARM_STATE)
    step = checkpoint_step(checkpoint)
    rows = keep_rows_through(run_dir / "metrics.jsonl", step)
    keep_rows_through(run_dir / "episodes.jsonl", step)
    experiment.say(f"resuming from {checkpoint} (step {step}; arms kept: {', '.join(experiment.evals) or 'none'})")
    return sum(float(r.get("time/step_s", 0.0)) for r in rows)


def _after_deepspeed(experiment: Any, trainer: Any) -> Any:
    """After RL under DeepSpeed (every rank): the trained model gathered whole into a plain model on this rank's
    device, which the phases after RL evaluate, save and (the SFT-only control) train from the warm start's
    snapshot; the trainer's engine is dropped. Returns that model."""
    from agentbridge_trl.zero import release, trained_model

    model = trained_model(trainer)
    release(trainer)
    experiment.model = model
    if experiment.sft is not None:  # the control's SFT loop, on the plain model (the snapshot restores its start)
        experiment.sft = experiment._sft_run(experiment.sft.rows)
    return model


def _evaluate_on_every_rank(experiment: Any, ranks: Any, arm: str) -> None:
    """The held-out evaluation of ``arm`` spread over the ranks (every rank must call it, each holding the same
    weights): a shard of the tasks each, gathered to the main process, which records the arm."""
    from agentbridge.adapter.training import GatheredEval

    if not experiment.eval_tasks:
        return
    experiment.sharded = GatheredEval(ranks.index, ranks.count, ranks.gather)
    if ranks.main:
        experiment.evaluate(arm)
    else:
        experiment.sharded(experiment.agent, experiment.model, experiment.eval_tasks)
    experiment.sharded = None  # the SFT-only control's evaluation runs on the main process alone


def _after_lora(experiment: Any, trainer: Any) -> Any:
    """After RL with ``model.lora`` (main process): the trained adapter merged into the base's weights, a plain
    transformers model that the phases after RL evaluate, save and (the SFT-only control) train from the warm
    start's snapshot. Returns that model."""
    from agentbridge_trl.trainer import merge_lora

    model = merge_lora(trainer.model)
    experiment.model = model
    if experiment.sft is not None:  # the control's SFT loop on the unwrapped layers (the snapshot restores its start)
        experiment.sft = experiment._sft_run(experiment.sft.rows)
    return model


def _lora_base(run_dir: Path, spec: Any) -> str:
    """Where a resumed LoRA run's base model is: the warm-started weights it saved, or the spec's model when it had
    no warm start."""
    if spec.algorithm.warm_start is None:
        return str(spec.model.path)
    if not (run_dir / RL_BASE).is_dir():
        raise ValueError(f"--resume: {run_dir} has no {RL_BASE}/ (the warm-started base its LoRA checkpoints apply "
                         "to); it cannot be resumed")
    return str(run_dir / RL_BASE)


def _describe_base(run_dir: Path, spec: Any) -> str:
    """The base model's description in ``model_info.json``."""
    if spec.algorithm.warm_start is None:
        return f"{spec.model.path} (no warm start)"
    kept = f", kept in {RL_BASE}/" if (run_dir / RL_BASE).is_dir() else ""
    return f"{spec.model.path} after the warm start's full-weight SFT{kept}"


def _share_start(ranks: Any, model: Any, path: Path, warm_started: bool) -> None:
    """Wait for the main process's phases before RL; after a warm start, the other ranks load its weights from
    ``path`` (written by the main process), which is removed once all have."""
    ranks.wait()
    if not warm_started or ranks.count == 1:
        return
    import torch

    if not ranks.main:
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    ranks.wait()
    if ranks.main:
        path.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentbridge_trl.entry", description=__doc__)
    parser.add_argument("job_dir", type=Path)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--resume", action="store_true",
                        help="Continue the run in --run-dir from its newest checkpoint instead of starting over.")
    args = parser.parse_args(argv)
    try:
        run_job(args.job_dir, args.run_dir, quiet=args.quiet, resume=args.resume)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

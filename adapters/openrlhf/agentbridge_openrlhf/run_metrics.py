"""OpenRLHF's own step metrics in agentbridge's run format.

    python -m agentbridge_openrlhf.run_metrics RUN_DIR [--job JOB_DIR]

The job sets ``--logger.tensorboard_dir RUN_DIR/tensorboard``; OpenRLHF 0.11.2's ``TensorboardLogger`` writes each
step's status there (``<dir>/<logger.wandb.run_name>``, ``torch.utils.tensorboard.SummaryWriter``, tags
``train/<key>``, eval ``eval/<key>``). After the trainer, ``launch.sh`` converts those scalars to
``RUN_DIR/metrics.jsonl`` in the normalized names every backend's run uses, so ``agentbridge report`` draws OpenRLHF
runs beside TRL's and veRL's. Names without a normalized counterpart are kept under ``openrlhf/``. Each row then goes
to the plugins' ``on_metrics`` hook and, with ``--job``, to the trackers of the spec's ``logging:`` block.

Every metric comes from a real (GPU) training step: OpenRLHF's trainer (vLLM engines, DeepSpeed) does not run on
CPU, so on CPU only event files written by tests (with OpenRLHF's own logger) are converted. That holds for the
driver's names too (``episode/*``, ``tools/*``, ``finish/*``, ``reward/<component>``, ``time/generate_s``): they
reach OpenRLHF's status through the executor's ``extra_logs``. ``throughput/tokens_per_s`` is derived (OpenRLHF logs
none): ``total_length`` x ``rollout/num_samples`` / ``timing/step_total``. Some need more than a GPU run:
``openrlhf/entropy`` only with ``--actor.entropy_coef`` set, ``is/mismatch_kl`` and ``is/capped_fraction`` only with
off-policy correction (``is_correction``), ``openrlhf/critic_*`` only for ``ppo``, ``openrlhf/eval/*`` only with
``eval_steps``.
``memory/peak_gb`` is never there: OpenRLHF 0.11.2 logs no memory figure.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from agentbridge.adapter import write_jsonl
from agentbridge.adapter.training import feed_metrics

SOURCE = "tensorboard"
TRACKER_DIR = "agentbridge"  # agentbridge's own TensorBoard tracker writes here, beside OpenRLHF's run directories
TRAIN = "train/"
NORMALIZED = {  # OpenRLHF's key (after train/) -> agentbridge's name
    "rollout/reward_mean": "reward/mean",  # every sample of the step, before dynamic batching
    "rollout/reward_std": "reward/std",
    "timing/step_total": "time/step_s",
    "timing/generation": "time/rollout_s",
    "policy_loss": "openrlhf/loss",
    "kl": "openrlhf/kl",  # KL to the reference model (the KL loss with --algo.kl.use_loss)
    "ppo_clip_ratio": "openrlhf/clip_fraction",
    "entropy_loss": "openrlhf/entropy",
    "actor_grad_norm": "openrlhf/grad_norm",
    "actor_lr": "openrlhf/lr",
    # importance sampling (agentbridge.runs.IS_METRIC_NAMES), with is_correction: OpenRLHF 0.11.2's
    # models/loss.py PolicyLoss.forward, logged by trainer/ray/ppo_actor.py training_step
    "vllm_kl": "is/mismatch_kl",  # mean of rollout - old log-prob
    "is_filter_ratio": "is/capped_fraction",  # tokens outside [0, cap]: clipped or masked
}
# the executor's extra_logs (agentbridge_openrlhf.rollout.extra_logs): already agentbridge's names, averaged per sample
DRIVER = ("reward/", "episode/", "tools/", "finish/", "time/")
KEEP_ALL = 0  # EventAccumulator size guidance: every event
KEEP_ONE = 1


def metric_name(tag: str) -> str:
    """agentbridge's name for one of OpenRLHF's TensorBoard tags."""
    if not tag.startswith(TRAIN):
        return f"openrlhf/{tag}"
    key = tag.removeprefix(TRAIN)
    if key in NORMALIZED:
        return NORMALIZED[key]
    return key if key.startswith(DRIVER) else f"openrlhf/{key}"


def normalize(step: int, scalars: dict[str, float]) -> dict[str, float]:
    """One step's row: ``step``, the normalized names, every other scalar under ``openrlhf/``, and
    ``throughput/tokens_per_s`` (prompt and response tokens of every sample over the step's wall time)."""
    row: dict[str, float] = {"step": step}
    for tag, value in scalars.items():
        row[metric_name(tag)] = float(value)
    tokens, samples = scalars.get(f"{TRAIN}total_length"), scalars.get(f"{TRAIN}rollout/num_samples")
    seconds = scalars.get(f"{TRAIN}timing/step_total")
    if tokens is not None and samples is not None and seconds:
        row["throughput/tokens_per_s"] = float(tokens) * float(samples) / float(seconds)
    return row


def event_files(source: Path) -> list[Path]:
    """OpenRLHF's event files under ``source`` (agentbridge's own tracker directory left out)."""
    return sorted(p for p in source.rglob("events.out.tfevents.*")
                  if p.is_file() and p.relative_to(source).parts[0] != TRACKER_DIR)


def read_scalars(source: Path, problems: list[str]) -> dict[int, dict[str, float]]:
    """``{step: {tag: value}}`` of every scalar in the event files under ``source``; a later run's value wins for
    the same step (a resumed or repeated run). One line per unreadable file in ``problems``."""
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea
    except ImportError:
        problems.append("the tensorboard package is not installed in this environment (pip install tensorboard): "
                        f"{source} is not read")
        return {}
    sizes = {ea.SCALARS: KEEP_ALL, ea.TENSORS: KEEP_ONE, ea.HISTOGRAMS: KEEP_ONE, ea.IMAGES: KEEP_ONE,
             ea.AUDIO: KEEP_ONE, ea.COMPRESSED_HISTOGRAMS: KEEP_ONE}
    runs: list[tuple[float, str, Any]] = []
    for path in event_files(source):
        acc = ea.EventAccumulator(str(path), size_guidance=sizes, purge_orphaned_data=False)
        try:
            acc.Reload()
            runs.append((acc.FirstEventTimestamp(), str(path), acc))
        except ValueError:
            problems.append(f"{path}: no readable TensorBoard events")
        except Exception as e:  # noqa: BLE001 - one line per bad file, the other files are still read
            problems.append(f"{path}: unreadable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    steps: dict[int, dict[str, float]] = {}
    for _, _, acc in sorted(runs, key=lambda r: (r[0], r[1])):
        for tag in acc.Tags()["scalars"]:
            for event in acc.Scalars(tag):
                steps.setdefault(int(event.step), {})[tag] = float(event.value)
    return steps


def convert(run_dir: Path, plugins: Any = None, spec: Any = None) -> tuple[int, list[str]]:
    """Write ``metrics.jsonl`` from OpenRLHF's TensorBoard scalars, then hand each row to ``plugins`` (when given;
    with ``spec``, to its trackers too); returns the rows written and one line per problem."""
    problems: list[str] = []
    source = run_dir / SOURCE
    if not source.is_dir():
        return 0, [f"{source}: missing (OpenRLHF's TensorBoard logger did not run)"]
    if not event_files(source):
        return 0, [f"{source}: no TensorBoard event files"]
    steps = read_scalars(source, problems)
    if not steps:
        return 0, problems or [f"{source}: no scalars in OpenRLHF's TensorBoard events"]
    rows = [normalize(step, steps[step]) for step in sorted(steps)]
    write_jsonl(run_dir / "metrics.jsonl", rows)
    if plugins is not None:
        feed_metrics(rows, run_dir, plugins, spec, problems)
    return len(rows), problems


def load_job_spec(job_dir: Path, problems: list[str]) -> Any:
    """The job's spec (``JOB_DIR/spec.yaml``), or None with one line in ``problems``."""
    from agentbridge.spec import load_spec

    try:
        return load_spec(job_dir / "spec.yaml")
    except Exception as e:  # noqa: BLE001 - the metrics are converted without the spec's trackers
        problems.append(f"{job_dir / 'spec.yaml'}: not read, no tracker gets the metrics: "
                        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    job = None
    if len(args) == 3 and args[1] == "--job":
        args, job = args[:1], Path(args[2])
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m agentbridge_openrlhf.run_metrics RUN_DIR [--job JOB_DIR]", file=sys.stderr)
        return 2
    from agentbridge.adapter import get_plugins

    logging.getLogger("tensorboard").setLevel(logging.ERROR)  # its warnings would add lines for one bad file
    run_dir = Path(args[0])
    problems: list[str] = []
    spec = load_job_spec(job, problems) if job is not None else None
    written, more = convert(run_dir, get_plugins(), spec)
    for line in [*problems, *more]:
        print(f"agentbridge: {line}", file=sys.stderr)
    if written:
        print(f"agentbridge: {written} step(s) of OpenRLHF metrics in {run_dir / 'metrics.jsonl'}", file=sys.stderr)
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())

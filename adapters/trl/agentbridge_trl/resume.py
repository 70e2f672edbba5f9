"""Checkpoints and ``agentbridge train --resume`` for TRL runs (imports no TRL, so the CLI can ask).

A run keeps HF Trainer's ``checkpoint-N`` directories under ``RUN_DIR/trainer`` (``backend.options.save_steps``).
Resuming continues the run in place from the newest complete one: the phases before RL are not redone (their
arms are read back from ``eval_scores.jsonl``), ``metrics.jsonl`` and ``episodes.jsonl`` lose the rows of the steps
after the checkpoint, and ``trainer.train(resume_from_checkpoint=...)`` restores the weights, optimizer,
scheduler, RNG and position in the data. :class:`EpochOrder` makes that position mean the same data order after a
restart as in an uninterrupted run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

TRAINER_DIR = "trainer"  # GRPOConfig.output_dir under the run directory
WARM_STATE = "warm_start.pt"  # what the SFT-only control starts from, kept so that a resumed run can train it
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_step(checkpoint: Path) -> int:
    """The global step a ``checkpoint-N`` directory was saved at."""
    match = _CHECKPOINT.match(checkpoint.name)
    if match is None:
        raise ValueError(f"{checkpoint}: not a checkpoint-N directory")
    return int(match.group(1))


def last_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run (HF writes ``trainer_state.json`` last); None when there is none."""
    root = run_dir / TRAINER_DIR
    if not root.is_dir():
        return None
    done = [p for p in root.iterdir() if _CHECKPOINT.match(p.name) and (p / "trainer_state.json").is_file()]
    return max(done, key=checkpoint_step) if done else None


def resume_point(run_dir: Path, spec_hash: str) -> Path:
    """The checkpoint ``--resume`` continues ``run_dir`` from; ValueError with one line when there is no run, no
    checkpoint, or the run was trained with another spec (its data order and schedule would not be the same)."""
    manifest = run_dir / "manifest.json"
    if not manifest.is_file():
        raise ValueError(f"--resume: no run in {run_dir} to resume")
    recorded = json.loads(manifest.read_text()).get("spec_hash")
    if recorded != spec_hash:
        raise ValueError(f"--resume: {run_dir} was trained with another spec (spec hash {str(recorded)[:12]}, this "
                         f"one {spec_hash[:12]}); resume with the same spec and --set values")
    checkpoint = last_checkpoint(run_dir)
    if checkpoint is None:
        raise ValueError(f"--resume: {run_dir} has no checkpoint to resume from ({TRAINER_DIR}/checkpoint-N; "
                         "backend.options.save_steps sets how often one is saved)")
    return checkpoint


def keep_rows_through(path: Path, step: int) -> list[dict[str, Any]]:
    """Drop the rows of ``path`` (a JSONL file of rows with ``step``) after ``step``, which a resumed run writes
    again; returns the rows kept. Lines that are not JSON objects (a partial write) are dropped too."""
    if not path.is_file():
        return []
    kept, lines = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("step", 0) <= step:
            kept.append(row)
            lines.append(line)
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return kept


def record_resume(run_dir: Path, checkpoint: Path) -> None:
    """Add the resume to the run's ``manifest.json`` (its modification time, the run's start, is kept)."""
    import os
    from datetime import UTC, datetime

    path = run_dir / "manifest.json"
    stat = path.stat()
    info = json.loads(path.read_text())
    info.setdefault("resumed", []).append({"at": datetime.now(UTC).isoformat(timespec="seconds"),
                                           "from": str(checkpoint.relative_to(run_dir))})
    path.write_text(json.dumps(info, indent=2) + "\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


class EpochOrder:
    """TRL's ``RepeatSampler`` with its order fixed by the epoch (HF Trainer calls ``set_epoch``).

    ``RepeatSampler`` draws each epoch's permutation from one seeded generator, so epoch ``e`` is the ``e+1``-th
    draw — in a process that iterated every earlier epoch. A resumed run starts a fresh sampler, which would give
    epoch 0's order again; this one reseeds and skips ``e`` draws first, the same order either way.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Any:
        import torch

        inner = self.inner
        if inner.shuffle and inner.seed is not None:
            inner.generator.manual_seed(inner.seed)
            for _ in range(self.epoch):
                torch.randperm(inner.num_samples, generator=inner.generator)
        return iter(inner)

    def __len__(self) -> int:
        return len(self.inner)


def resumable(trainer_cls: type) -> type:
    """``trainer_cls`` with its training sampler wrapped in :class:`EpochOrder`."""

    class Resumable(trainer_cls):
        def _get_train_sampler(self, dataset: Any = None) -> Any:
            return EpochOrder(super()._get_train_sampler(dataset))

    Resumable.__name__ = Resumable.__qualname__ = trainer_cls.__name__
    return Resumable

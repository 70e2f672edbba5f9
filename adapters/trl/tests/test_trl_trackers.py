"""Trackers and kept runs: `agentbridge train --set logging.tensorboard=true` writes TensorBoard events that
TensorBoard's own reader loads (TRL's metrics and agentbridge's, via on_metrics), and never deletes an earlier run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def scalars(directory: Path) -> dict[str, list[float]]:
    events = EventAccumulator(str(directory))
    events.Reload()
    return {tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_events_load_and_the_earlier_run_is_kept(tmp_path: Path, small_sets: list[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text('{"kind": "run"}\n')
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    sets = [*small_sets, "algorithm.warm_start=null", "data.dev=null", "logging.tensorboard=true"]
    args = [sys.executable, "-m", "agentbridge.cli", "train", "examples/calculator.yaml", "-o", str(run)]
    for s in sets:
        args += ["--set", s]
    res = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    (kept,) = [p for p in tmp_path.iterdir() if p.name.startswith("run@")]
    assert (kept / "metrics.jsonl").read_text() == '{"step": 1}\n'  # untouched, beside the new run
    assert f"kept as {kept}" in res.stdout + res.stderr
    ours = scalars(run / "tensorboard" / "agentbridge")
    assert len(ours["reward/mean"]) == 2 and len(ours["tools/calls"]) == 2  # one point per GRPO step
    trl = scalars(next((run / "tensorboard" / "trl").rglob("events.out.tfevents.*")).parent)
    assert any(tag.endswith("loss") for tag in trl), sorted(trl)
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2  # a fresh run, not appended to the old one

"""``agentbridge train`` end to end on CPU: warm start, eval, GRPO, eval, run directory and report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NORMALIZED = ("step", "reward/mean", "reward/std", "reward/math/exact_answer", "episode/turns",
              "episode/response_tokens", "tools/calls", "tools/failures", "finish/done", "finish/length",
              "time/step_s", "time/generate_s", "time/env_s", "throughput/tokens_per_s", "memory/peak_gb")


def test_train_writes_the_run_directory(tmp_path: Path, small_sets: list[str]) -> None:
    run = tmp_path / "run"
    sets = [*small_sets, "algorithm.warm_start.demos=64", "algorithm.warm_start.epochs=1",
            "algorithm.warm_start.batch_size=16"]
    args = [sys.executable, "-m", "agentbridge.cli", "train", "examples/calculator.yaml", "-o", str(run)]
    for s in sets:
        args += ["--set", s]
    res = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "GRPO" in res.stderr and "warm start" in res.stderr  # progress was shown
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for name in NORMALIZED:
        assert all(name in r for r in rows), name
    episodes = (run / "episodes.jsonl").read_text().splitlines()
    assert len(episodes) == 2 * 2 * 4
    evals = json.loads((run / "eval.json").read_text())
    assert set(evals) == {"before_rl", "after_rl"} and evals["after_rl"]["n"] == 8
    warm = json.loads((run / "warm_start.json").read_text())
    assert warm["steps"] == 4 and warm["demonstrations"] == 64
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["versions"]["trl"] == "1.16.0" and len(manifest["chat_template_hash"]) == 64
    report = (run / "report.md").read_text()
    assert "reward_curve.png" in report and "before_rl" in report
    png = (run / "reward_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert (run / "model" / "config.json").exists()

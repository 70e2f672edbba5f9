"""``agentbridge train`` end to end on CPU: the four evaluation arms around a warm start and GRPO, the run
directory and the report."""

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
    sets = [*small_sets, "algorithm.warm_start.demos=64", "algorithm.warm_start.max_steps=4",
            "algorithm.warm_start.batch_size=16", "algorithm.warm_start.dev_every=2", "data.dev.size=4"]
    args = [sys.executable, "-m", "agentbridge.cli", "train", "examples/calculator.yaml", "-o", str(run)]
    for s in sets:
        args += ["--set", s]
    res = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "GRPO" in res.stderr and "warm start" in res.stderr and "dev " in res.stderr  # progress was shown
    assert "Warning" not in res.stderr and "Loading weights" not in res.stderr, res.stderr  # only the run's own
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for name in NORMALIZED:
        assert all(name in r for r in rows), name
    episodes = (run / "episodes.jsonl").read_text().splitlines()
    assert len(episodes) == 2 * 2 * 4
    evals = json.loads((run / "eval.json").read_text())
    assert set(evals) == {"before_training", "before_rl", "after_rl", "sft_control", "paired"}
    assert all(evals[arm]["n"] == 8 and evals[arm]["ci95_low"] <= evals[arm]["mean"] <= evals[arm]["ci95_high"]
               for arm in ("before_training", "before_rl", "after_rl", "sft_control"))
    assert {"rl_vs_warm_start_p", "rl_vs_control_p"} <= set(evals["paired"])
    assert len((run / "eval_scores.jsonl").read_text().splitlines()) == 8
    warm = json.loads((run / "warm_start.json").read_text())
    assert warm["steps"] == 4 and warm["demonstrations"] == 64 and warm["stopped"] == "max_steps"
    assert [d["step"] for d in warm["dev"]] == [2, 4] and warm["control"]["steps"] >= 1
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["versions"]["trl"] == "1.16.0" and len(manifest["chat_template_hash"]) == 64
    assert Path(manifest["caches"]["builtin:tiny"]).is_dir()
    report = (run / "report.md").read_text()
    assert "reward_curve.png" in report and "| sft_control |" in report and "SFT-only control" in report
    png = (run / "reward_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert (run / "model" / "config.json").exists()

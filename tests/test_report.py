"""``agentbridge report``: side-by-side plots and table; bad run directories are one line each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agentbridge.compare.report import write_report


def make_run(root: Path, name: str, backend: str, steps: int, *, seed: int = 0, spec: str = "abc") -> Path:
    run = root / name
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"backend": backend, "spec_hash": spec, "seed": seed,
                                                   "chat_template_hash": "t", "versions": {"agentbridge": "0.1.0"}}))
    rows = [{"step": s, "reward/mean": 0.1 * s, "time/step_s": 1.0 + s, "throughput/tokens_per_s": 100.0 * s,
             "memory/peak_gb": 1.5, "finish/done": 0.75, "finish/length": 0.25} for s in range(1, steps + 1)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_report_draws_every_plot_and_table(tmp_path: Path) -> None:
    a, b = make_run(tmp_path, "a", "trl", 5), make_run(tmp_path, "b", "verl", 3)
    path, problems = write_report([a, b], tmp_path / "out")
    assert problems == []
    page = path.read_text()
    for png in ("reward.png", "throughput.png", "step_time.png", "memory.png", "finish.png"):
        assert (tmp_path / "out" / png).read_bytes()[:4] == b"\x89PNG" and f'src="{png}"' in page
    assert "a (trl)" in page and "b (verl)" in page and "<td>0.500</td>" in page and "<td>0.300</td>" in page


def test_bad_runs_are_one_line_each_and_the_rest_renders(tmp_path: Path) -> None:
    good = make_run(tmp_path, "good", "trl", 4)
    partial = make_run(tmp_path, "partial", "trl", 2)
    with (partial / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "reward/me')  # a write cut short
    old = tmp_path / "old"
    old.mkdir()
    (old / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n")  # an older format
    nometrics = tmp_path / "nometrics"
    nometrics.mkdir()
    (nometrics / "manifest.json").write_text("{}")
    path, problems = write_report([good, partial, old, nometrics, tmp_path / "missing"], tmp_path / "out")
    assert any("partial/metrics.jsonl:3: not valid JSON" in p for p in problems)
    assert any("old/metrics.jsonl:1: lacks reward/mean" in p for p in problems)
    assert any("old/manifest.json: missing" in p for p in problems)
    assert any("nometrics/metrics.jsonl: missing" in p for p in problems)
    assert any("missing: not a run directory" in p for p in problems)
    assert all("\n" not in p for p in problems)
    assert "good (trl)" in path.read_text() and (tmp_path / "out" / "reward.png").exists()


def test_runs_that_differ_beyond_the_backend_warn(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", "trl", 2)
    b = make_run(tmp_path, "b", "verl", 2, seed=1, spec="xyz")
    _, problems = write_report([a, b], tmp_path / "out")
    assert any(p.startswith("warning: runs differ in spec_hash") for p in problems)
    assert any(p.startswith("warning: runs differ in seed") for p in problems)


def test_report_cli(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", "trl", 3)
    res = subprocess.run([sys.executable, "-m", "agentbridge.cli", "report", str(a), str(tmp_path / "nope"), "-o",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [f"problem: {tmp_path / 'nope'}: not a run directory (missing)"]
    assert (tmp_path / "out" / "report.html").exists()


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    import re
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: run scripts/system-deps.sh"
    a, b = make_run(tmp_path, "a", "trl", 4), make_run(tmp_path, "b", "verl", 4)
    path, _ = write_report([a, b], tmp_path / "out")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom"]
    dom = subprocess.run([chromium, *flags, path.as_uri()], capture_output=True, text=True, timeout=120).stdout
    plots = re.search(r'data-plots="(\d+)"', dom)
    rendered = re.search(r'data-rendered="(\d+)"', dom)
    assert plots and rendered, dom[:500]
    assert int(plots.group(1)) == 5 and int(rendered.group(1)) == 5

"""``agentbridge report``: side-by-side plots and tables; bad run directories are one line each. Two runs in the
formats the backends write (TRL's rows with ``trl/<name>``, veRL's converted rows with ``verl/<name>``) are opened
in headless Chromium and checked as a person sees them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentbridge.compare.plots import CURVES
from agentbridge.compare.report import RunData, _load, write_comparison
from agentbridge.conformance.algorithms import Cell


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
    path, problems = write_comparison([a, b], tmp_path / "out")
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
    path, problems = write_comparison([good, partial, old, nometrics, tmp_path / "missing"], tmp_path / "out")
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
    _, problems = write_comparison([a, b], tmp_path / "out")
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

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: run scripts/system-deps.sh"
    a, b = make_run(tmp_path, "a", "trl", 4), make_run(tmp_path, "b", "verl", 4)
    path, _ = write_comparison([a, b], tmp_path / "out")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom"]
    dom = subprocess.run([chromium, *flags, path.as_uri()], capture_output=True, text=True, timeout=120).stdout
    plots = re.search(r'data-plots="(\d+)"', dom)
    rendered = re.search(r'data-rendered="(\d+)"', dom)
    assert plots and rendered, dom[:500]
    assert int(plots.group(1)) == 9 and int(rendered.group(1)) == 9  # 4 curves x (step, wall time) + finish
    widths = re.findall(r'<img src="([^"]+)"[^>]*data-width="(\d+)"', dom)
    assert len(widths) == 9 and all(int(w) > 0 for _, w in widths), widths


# ------------------------------------------------------------------ two runs as the backends write them


TRL_VERSIONS = {"agentbridge": "0.1.0", "python": "3.11.7", "agentbridge-trl": "0.1.0", "trl": "1.16.0",
                "transformers": "5.25.0", "torch": "2.13.0+cpu"}
VERL_VERSIONS = {"agentbridge": "0.1.0", "python": "3.11.7", "agentbridge-verl": "0.1.0", "verl": "0.9.0",
                 "transformers": "5.25.0", "torch": "2.13.0+cu128"}
SPEC = "48bd1370c867c66232b7eab2a7fb0c7c500ddef35911b9956b27fe3237139a9a"


def trl_row(step: int) -> dict[str, float]:
    """A row as ``RunLogger.log`` writes it for TRL: the driver's names, then TRL's own logs under ``trl/``."""
    return {"step": step, "reward/mean": 0.2 + 0.1 * step, "reward/std": 0.4, "episode/turns": 2.0,
            "episode/response_tokens": 60.0 - step, "tools/calls": 2.0, "tools/failures": 0.5 / step,
            "tools/parse_errors": 0.0, "reward/math/exact_answer": 0.1 * step, "finish/done": 1.0,
            "finish/max_turns": 0.0, "finish/length": 0.0, "finish/error": 0.0, "time/step_s": 2.0 * step,
            "time/rollout_s": 1.0, "time/generate_s": 0.7, "time/env_s": 0.05, "throughput/tokens_per_s": 1000.0 * step,
            "memory/peak_gb": 1.5 + 0.1 * step, "trl/loss": -0.1, "trl/grad_norm": 0.7, "trl/learning_rate": 1e-5,
            "trl/kl": 0.01 * step, "trl/entropy": 0.5 - 0.05 * step, "trl/clip_ratio/low_mean": 0.0,
            "trl/clip_ratio/region_mean": 0.01}


def verl_row(step: int) -> dict[str, float]:
    """A row as ``agentbridge_verl.run_metrics`` converts veRL's file logger: normalized names, the rest ``verl/``."""
    return {"step": step, "reward/mean": 0.15 + 0.1 * step, "reward/max": 1.0, "reward/min": 0.0,
            "episode/response_tokens": 70.0 - step, "finish/length": 0.0, "tools/calls": 1.5, "time/step_s": 5.0,
            "time/rollout_s": 3.0, "throughput/tokens_per_s": 900.0, "memory/peak_gb": 20.0 + step,
            "verl/loss": -0.05, "verl/clip_fraction": 0.02, "verl/kl": 0.002 * step, "verl/entropy": 0.6,
            "verl/grad_norm": 0.3, "verl/lr": 1e-6, "verl/response_length/max": 120.0}


def arm(mean: float) -> dict[str, Any]:
    return {"metric": "math/exact_answer", "mean": mean, "n": 100, "ci95_low": mean - 0.05,
            "ci95_high": mean + 0.05, "finish": {"done": 100}, "seconds": 3.0}


def backend_run(root: Path, backend: str, steps: int, *, seed: int, evals: bool = True) -> Path:
    run = root / backend
    run.mkdir()
    versions = TRL_VERSIONS if backend == "trl" else VERL_VERSIONS
    (run / "manifest.json").write_text(json.dumps({
        "kind": "run", "created": "2026-12-04T17:04:53+00:00", "backend": backend, "spec_hash": SPEC,
        "chat_template_hash": "cd8e9439f0570856", "seed": seed, "versions": versions}))
    row = trl_row if backend == "trl" else verl_row
    (run / "metrics.jsonl").write_text("".join(json.dumps(row(s)) + "\n" for s in range(1, steps + 1)))
    if evals:
        (run / "eval.json").write_text(json.dumps({
            "before_training": arm(0.05), "before_rl": arm(0.5), "after_rl": arm(0.6 if backend == "trl" else 0.55),
            "sft_control": arm(0.52), "paired": {"rl_vs_warm_start_p": 0.01, "rl_vs_control_p": 0.2}}))
    return run


PARITY = {
    "trl": [Cell("grpo", "trl", "✔"), Cell("dapo", "trl", "≠", {"kept": 1.0}, known={"kept": "filters later"}),
            Cell("ppo", "trl", "n/a", why="TRL has no critic")],
    "verl": [Cell("grpo", "verl", "≈", {"loss": 2e-4}), Cell("dapo", "verl", "✔"),
             Cell("ppo", "verl", "✘", {"advantages": 0.3, "loss": 0.1})],
}


def test_backend_metrics_are_read_under_each_backend_s_prefix(tmp_path: Path) -> None:
    trl, verl = backend_run(tmp_path, "trl", 4, seed=0), backend_run(tmp_path, "verl", 3, seed=1)
    runs = [_load(trl, []), _load(verl, [])]
    assert all(isinstance(r, RunData) for r in runs)
    t, v = runs[0], runs[1]
    assert t is not None and v is not None
    curves = {c.stem: c for c in CURVES}
    assert curves["kl"].key(t) == "trl/kl" and curves["kl"].key(v) == "verl/kl"
    assert curves["kl"].values(v) == [0.002, 0.004, 0.006]
    assert curves["entropy"].key(v) == "verl/entropy"
    # failures per call: the per-episode means divided; veRL logs no failures, so it has no line
    assert curves["tool_failures"].values(t) == [0.25, 0.125, 0.5 / 3 / 2, 0.0625]
    assert curves["tool_failures"].key(v) is None
    assert t.wall == [2.0, 6.0, 12.0, 20.0] and v.wall == [5.0, 10.0, 15.0]  # cumulative step times


def test_report_draws_every_curve_against_step_and_wall_time(tmp_path: Path) -> None:
    trl, verl = backend_run(tmp_path, "trl", 4, seed=0), backend_run(tmp_path, "verl", 3, seed=1)
    path, problems = write_comparison([trl, verl], tmp_path / "out")
    page = path.read_text()
    out = tmp_path / "out"
    for stem in ("reward", "heldout", "kl", "entropy", "response_tokens", "tool_failures", "throughput",
                 "step_time", "memory"):
        for name in (f"{stem}.png", f"{stem}_wall.png"):
            assert (out / name).read_bytes()[:4] == b"\x89PNG" and f'src="{name}"' in page, name
    assert 'alt="held-out success vs wall time"' in page
    runs = page.split("<table class='runs'>")[1].split("</table>")[0]
    trl_row_cells = re.findall(r"<td>([^<]*)</td>", runs.split("</tr>")[1])
    # run, backend, steps, final reward, held-out after RL, mean step s, wall s, tokens/s, peak GB, spec
    assert trl_row_cells[1:9] == ["trl", "4", "0.600", "0.600", "5.000", "20.0", "3000.0", "1.900"], trl_row_cells
    assert [p for p in problems if p.startswith("warning: runs differ in seed")]


def test_a_metric_no_run_has_gives_no_plot(tmp_path: Path) -> None:
    verl = backend_run(tmp_path, "verl", 3, seed=0, evals=False)
    path, problems = write_comparison([verl], tmp_path / "out")
    page = path.read_text()
    assert problems == []
    for stem in ("heldout", "tool_failures"):  # veRL's rows carry no failures, and the run did not evaluate
        assert not (tmp_path / "out" / f"{stem}.png").exists() and f"{stem}" not in page
    assert 'src="kl_wall.png"' in page
    rows = [json.loads(line) for line in (verl / "metrics.jsonl").read_text().splitlines()]
    del rows[1]["time/step_s"]
    (verl / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path, problems = write_comparison([verl], tmp_path / "out2")
    assert problems == [f"{verl / 'metrics.jsonl'}: some steps lack time/step_s; this run is left out of the "
                        "wall-time plots"]
    assert 'src="kl.png"' in path.read_text() and "_wall.png" not in path.read_text()


def test_settings_table_marks_what_differs_beyond_the_backend(tmp_path: Path) -> None:
    trl, verl = backend_run(tmp_path, "trl", 2, seed=0), backend_run(tmp_path, "verl", 2, seed=1)
    page = write_comparison([trl, verl], tmp_path / "out")[0].read_text()
    table = page.split("<table class='settings'>")[1].split("</table>")[0]
    rows = {name: bool(mark) for mark, name in re.findall(r"<tr( class='differs')?><th>([^<]+)</th>", table)}
    assert list(rows) == ["backend", "spec hash", "chat template hash", "seed", "agentbridge", "python",
                          "agentbridge-trl", "trl", "transformers", "torch", "agentbridge-verl", "verl"]
    assert rows["seed"] and rows["torch"]  # 0 vs 1; +cpu vs +cu128
    assert not rows["backend"] and not rows["spec hash"] and not rows["agentbridge"] and not rows["transformers"]
    assert not rows["trl"] and not rows["verl"]  # a backend's own package is recorded by its run only
    assert "<td title='" + SPEC + "'>48bd1370c867</td>" in table
    assert "differ beyond the backend in: seed, torch." in page


def test_parity_table_as_the_conformance_command_prints_it(tmp_path: Path) -> None:
    page = write_comparison([], tmp_path / "out", algorithms=PARITY)[0].read_text()
    table = page.split("<table class='parity'>")[1].split("</table>")[0]
    rows = [re.findall(r"<t[hd][^>]*>([^<]*)</t[hd]>", r) for r in table.split("</tr>") if "<t" in r]
    assert rows == [["algorithm", "trl", "verl"], ["grpo", "✔", "≈"], ["dapo", "≠ kept", "✔"],
                    ["ppo", "n/a", "✘ advantages,loss"]]
    assert "title='TRL has no critic'" in table and "loss max|Δ|=0.0002" in table
    assert "✔ identical" in page and "✘ an undocumented difference" in page



def test_what_a_person_sees_in_chromium(tmp_path: Path, browser: Any) -> None:
    trl, verl = backend_run(tmp_path, "trl", 4, seed=0), backend_run(tmp_path, "verl", 3, seed=1)
    path, _ = write_comparison([trl, verl], tmp_path / "out", algorithms=PARITY)
    browser.get(path.as_uri())
    images = browser.execute_script(
        "return [...document.images].map(i => ({src: i.getAttribute('src'), w: i.naturalWidth, "
        "done: i.complete, shown: i.offsetWidth > 0, caption: i.nextElementSibling.textContent}))")
    assert all(i["done"] and i["w"] > 0 and i["shown"] for i in images), images
    walls = {i["caption"] for i in images if i["src"].endswith("_wall.png")}
    assert {"reward (mean over episodes) vs wall time", "held-out success vs wall time",
            "KL (each backend's own log) vs wall time", "entropy (each backend's own log) vs wall time",
            "response tokens per episode vs wall time", "tool failures per tool call vs wall time"} <= walls
    assert len(images) == 2 * 9 + 1  # nine curves against step and wall time, and the finish reasons
    parity = browser.execute_script(
        "return [...document.querySelectorAll('table.parity tr')].map(r => [...r.cells].map(c => "
        "[c.innerText, getComputedStyle(c).backgroundColor]))")
    assert [[text for text, _ in row] for row in parity][1:] == [["grpo", "✔", "≈"], ["dapo", "≠ kept", "✔"],
                                                                   ["ppo", "n/a", "✘ advantages,loss"]]
    assert parity[3][2][1] == "rgb(248, 201, 196)" and parity[1][1][1] == "rgb(223, 243, 226)"  # ✘ red, ✔ green
    settings = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('table.settings tr')].slice(1).map(r => "
        "[r.cells[0].innerText, [...r.cells].slice(1).map(c => [c.innerText, getComputedStyle(c).backgroundColor])]))")
    highlighted = "rgb(253, 226, 200)"
    assert settings["seed"] == [["0", highlighted], ["1", highlighted]]
    assert all(bg != highlighted for _, bg in settings["spec hash"] + settings["agentbridge"] + settings["backend"])

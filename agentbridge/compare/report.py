"""Side-by-side report of several run directories: plots (PNG) and ``report.html``.

A run directory holds ``manifest.json`` and ``metrics.jsonl`` (normalized names), as every backend writes
them. Missing, partial or older runs give one problem line each; the rest of the report still renders.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbridge.compare.semantics import semantics_table
from agentbridge.runs import read_jsonl

# (metric, y label, file) drawn against the step, one line per run
PLOTS = [
    ("reward/mean", "reward (mean over episodes)", "reward.png"),
    ("throughput/tokens_per_s", "tokens / s", "throughput.png"),
    ("time/step_s", "seconds per step", "step_time.png"),
    ("memory/peak_gb", "peak memory (GB)", "memory.png"),
]
REQUIRED = ("step", "reward/mean")
COMPARED = ("spec_hash", "chat_template_hash", "seed")  # runs should differ in nothing but the backend


@dataclass
class RunData:
    path: Path
    label: str
    manifest: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, float]] = field(default_factory=list)


def _load(path: Path, problems: list[str]) -> RunData | None:
    if not path.is_dir():
        problems.append(f"{path}: not a run directory (missing)")
        return None
    run = RunData(path=path, label=path.name)
    manifest_path = path / "manifest.json"
    if manifest_path.is_file():
        try:
            run.manifest = json.loads(manifest_path.read_text())
            backend = run.manifest.get("backend")
            run.label = f"{path.name} ({backend})" if backend else path.name
        except json.JSONDecodeError as e:
            problems.append(f"{manifest_path}: not valid JSON ({e.msg} at line {e.lineno})")
    else:
        problems.append(f"{manifest_path}: missing; versions and settings cannot be compared")
    metrics_path = path / "metrics.jsonl"
    if not metrics_path.is_file():
        problems.append(f"{metrics_path}: missing; this run has no steps to draw")
        return run
    for n, row in read_jsonl(metrics_path, problems):
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            problems.append(f"{metrics_path}:{n}: lacks {', '.join(missing)} (an older or foreign format?); skipped")
            continue
        run.rows.append(row)
    return run


def differences(runs: list[RunData]) -> list[str]:
    """Warnings for compared runs that differ in anything but the backend."""
    out = []
    with_manifest = [r for r in runs if r.manifest]
    for key in COMPARED:
        values = {r.label: r.manifest.get(key) for r in with_manifest}
        if len({json.dumps(v) for v in values.values()}) > 1:
            out.append(f"runs differ in {key}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    versions = {r.label: (r.manifest.get("versions") or {}).get("agentbridge") for r in with_manifest}
    if len(set(versions.values())) > 1:
        out.append("runs were made by different agentbridge versions: "
                   + ", ".join(f"{k}={v}" for k, v in versions.items()))
    return out


def _plot(runs: list[RunData], metric: str, ylabel: str, out: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = False
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for run in runs:
        points = [(r["step"], r[metric]) for r in run.rows if metric in r]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", markersize=2, label=run.label)
            drawn = True
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return drawn


def _finish_plot(runs: list[RunData], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reasons = ("done", "max_turns", "length", "error")
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    bottoms = [0.0] * len(runs)
    for reason in reasons:
        shares = [sum(r.get(f"finish/{reason}", 0.0) for r in run.rows) / max(1, len(run.rows)) for run in runs]
        ax.barh([run.label for run in runs], shares, left=bottoms, label=reason)
        bottoms = [b + s for b, s in zip(bottoms, shares, strict=True)]
    ax.set_xlabel("share of episodes")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=8, ncols=4, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def _summary(run: RunData) -> dict[str, str]:
    rows = run.rows
    last = rows[-1] if rows else {}

    def mean(key: str) -> str:
        values = [r[key] for r in rows if key in r]
        return f"{sum(values) / len(values):.3f}" if values else "–"

    return {"run": run.label, "backend": str(run.manifest.get("backend", "?")), "steps": str(len(rows)),
            "final reward": f"{last['reward/mean']:.3f}" if last else "–", "mean step s": mean("time/step_s"),
            "tokens/s": mean("throughput/tokens_per_s"), "peak GB": mean("memory/peak_gb"),
            "spec": str(run.manifest.get("spec_hash", "?"))[:10]}


# Marks on <body> how many plots the browser decoded, so a headless browser can check the report rendered.
_RENDER_CHECK = ("<script>addEventListener('load', () => { const imgs = [...document.images]; "
                 "document.body.dataset.plots = imgs.length; document.body.dataset.rendered = "
                 "imgs.filter(i => i.complete && i.naturalWidth > 0).length; });</script>")


def _backend_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row.values()) + "</tr>" for row in rows)
    return f"<h2>Backends</h2><table class='backends'><tr>{head}</tr>{body}</table>"


def write_report(run_dirs: list[Path], out_dir: Path, backends: list[dict[str, str]] | None = None,
                 semantics: dict[str, dict[str, str]] | None = None) -> tuple[Path, list[str]]:
    """Draw the comparison into ``out_dir``; returns ``report.html`` and the problem/warning lines.

    ``backends``: optional rows (one per backend: compile, validate, conformance, run) drawn as a table first;
    ``semantics``: what each backend's job will do (backend -> aspect -> line), drawn side by side next.
    """
    problems: list[str] = []
    runs = [r for r in (_load(Path(p), problems) for p in run_dirs) if r is not None]
    problems += [f"warning: {w}" for w in differences(runs)]
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = [(name, title) for metric, title, name in PLOTS if _plot(runs, metric, title, out_dir / name)]
    if runs:
        _finish_plot(runs, out_dir / "finish.png")
        figures.append(("finish.png", "finish reasons"))
    table = [_summary(r) for r in runs]
    head = "".join(f"<th>{html.escape(k)}</th>" for k in (table[0] if table else {}))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row.values()) + "</tr>" for row in table)
    notes = "".join(f"<li>{html.escape(p)}</li>" for p in problems)
    imgs = "".join(f'<figure><img src="{n}" alt="{html.escape(t)}"><figcaption>{html.escape(t)}</figcaption>'
                   "</figure>" for n, t in figures)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>agentbridge report</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
            "padding:4px 8px}figure{display:inline-block;margin:1em}tr.differs td{background:#fde2c8}"
            "</style></head><body>"
            f"<h1>agentbridge report: {len(runs)} run(s)</h1>{_backend_table(backends or [])}"
            f"{semantics_table(semantics or {})}"
            f"<table><tr>{head}</tr>{body}</table>"
            f"{'<h2>Problems</h2><ul>' + notes + '</ul>' if notes else ''}{imgs}{_RENDER_CHECK}</body></html>")
    path = out_dir / "report.html"
    path.write_text(page)
    return path, problems

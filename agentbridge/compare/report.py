"""Side-by-side report of several run directories: plots (PNG) and ``report.html``.

A run directory holds ``manifest.json`` and ``metrics.jsonl`` (normalized names), as every backend writes
them, ``eval.json`` (held-out success per arm) when the run evaluated, and ``episodes.jsonl`` (or a rollout's
``trajectories.jsonl``): where two runs ran the same task and actions, their environment outputs are compared
(:mod:`agentbridge.compare.episodes`). Missing, partial or older runs give one
problem line each; the rest of the report still renders. So does a malformed part of a run: a metrics row that is
not JSON, not an object or has no numeric step (``path:line: ...; skipped``), a value that is not a finite number
(left out), a manifest field or an evaluation arm of the wrong type (left out), a file that is not a JSON object.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from agentbridge.compare.episodes import environment_differences
from agentbridge.compare.plots import ARMS, draw_all
from agentbridge.compare.semantics import semantics_table
from agentbridge.runs import invalid, limit_problems, one_line, read_json_object, read_jsonl, shown

if TYPE_CHECKING:
    from agentbridge.conformance.algorithms import Cell

REQUIRED = ("step", "reward/mean")
COMPARED = ("spec_hash", "chat_template_hash", "seed")  # runs should differ in nothing but the backend


@dataclass
class RunData:
    path: Path
    label: str
    manifest: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, float]] = field(default_factory=list)
    evals: dict[str, Any] = field(default_factory=dict)  # eval.json: arm -> summary
    wall: list[float] | None = None  # seconds since the first step began, at the end of each row's step


class ManifestFields(BaseModel):
    """The fields of ``manifest.json`` the report reads, as :func:`agentbridge.runs.manifest` writes them."""

    model_config = ConfigDict(strict=True, extra="allow")

    backend: str | None = None
    spec_hash: str | None = None
    chat_template_hash: str | None = None
    seed: int | None = None
    versions: dict[str, str | None] | None = None


class EvalArm(BaseModel):
    """One arm of ``eval.json``: held-out success with its 95% interval."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)

    metric: str = ""
    mean: float
    ci95_low: float | None = None
    ci95_high: float | None = None

    @model_validator(mode="after")
    def _interval_holds_the_mean(self) -> EvalArm:
        low = self.mean if self.ci95_low is None else self.ci95_low
        high = self.mean if self.ci95_high is None else self.ci95_high
        if not low <= self.mean <= high:
            raise ValueError(f"the interval [{low:g}, {high:g}] does not hold the mean {self.mean:g}")
        return self


def _finite(value: Any) -> bool:
    try:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:  # an integer past any float
        return False


def _metrics_row(row: dict[str, Any], where: str, problems: list[str]) -> dict[str, Any] | None:
    """``row`` without the values that are not finite numbers (one problem line names them); None (and one line)
    when it lacks a step or a mean reward to draw."""
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        problems.append(f"{where}: lacks {', '.join(missing)} (an older or foreign format?); skipped")
        return None
    for key in REQUIRED:
        if not _finite(row[key]):
            problems.append(f"{where}: {key} is not a finite number (got {shown(row[key])}); skipped")
            return None
    bad = [k for k, v in row.items() if not _finite(v)]
    if bad:
        named = ", ".join(f"{one_line(k, 40)} ({shown(row[k])})" for k in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        problems.append(f"{where}: not a finite number: {named}{more}; left out")
    return {k: v for k, v in row.items() if k not in bad}


def _manifest(path: Path, problems: list[str]) -> dict[str, Any]:
    """The manifest without the fields the report reads that hold the wrong type (one problem line each)."""
    manifest = read_json_object(path, problems, "versions and settings cannot be compared") or {}
    for key in ManifestFields.model_fields:
        if key in manifest:
            try:
                ManifestFields.model_validate({key: manifest[key]})
            except ValidationError as e:
                problems.append(f"{path}: {invalid(e)}; not compared")
                del manifest[key]
    return manifest


def _evals(path: Path, problems: list[str]) -> dict[str, Any]:
    """``eval.json`` without the arms that are not an :class:`EvalArm` (one problem line each)."""
    evals = read_json_object(path, problems, "held-out success not drawn") or {}
    for arm in ARMS:
        if arm in evals:
            try:
                EvalArm.model_validate(evals[arm])
            except ValidationError as e:
                problems.append(f"{path}: {arm}: {invalid(e)}; not drawn")
                del evals[arm]
    return evals


def _load(path: Path, problems: list[str]) -> RunData | None:
    if not path.is_dir():
        problems.append(f"{path}: not a run directory (missing)")
        return None
    run = RunData(path=path, label=path.name or path.resolve().name)
    manifest_path = path / "manifest.json"
    if manifest_path.is_file():
        run.manifest = _manifest(manifest_path, problems)
        backend = run.manifest.get("backend")
        run.label = f"{run.label} ({backend})" if backend else run.label
    else:
        problems.append(f"{manifest_path}: missing; versions and settings cannot be compared")
    metrics_path = path / "metrics.jsonl"
    if not metrics_path.is_file():
        problems.append(f"{metrics_path}: missing; this run has no steps to draw")
        return run
    found: list[str] = []
    for n, row in read_jsonl(metrics_path, found):
        kept = _metrics_row(row, f"{metrics_path}:{n}", found)
        if kept is not None:
            run.rows.append(kept)
    problems += sorted(found, key=lambda p: _line_of(metrics_path, p))
    if run.rows and all(isinstance(r.get("time/step_s"), int | float) for r in run.rows):
        total, run.wall = 0.0, []
        for r in run.rows:
            total += r["time/step_s"]
            run.wall.append(total)
    elif run.rows:
        problems.append(f"{metrics_path}: some steps lack time/step_s; this run is left out of the wall-time plots")
    eval_path = path / "eval.json"
    if eval_path.is_file():
        run.evals = _evals(eval_path, problems)
    return run


def _line_of(path: Path, problem: str) -> int:
    """The line a ``path:N: ...`` problem is about (0 for one about the whole file)."""
    number = problem[len(str(path)) + 1:].split(":", 1)[0]
    return int(number) if number.isdigit() else 0


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


def _summary(run: RunData) -> dict[str, str]:
    rows = run.rows
    last = rows[-1] if rows else {}

    def mean(key: str) -> str:
        values = [r[key] for r in rows if key in r]
        return f"{sum(values) / len(values):.3f}" if values else "–"

    timed = [(r["throughput/tokens_per_s"], r["time/step_s"]) for r in rows
             if "throughput/tokens_per_s" in r and r.get("time/step_s")]
    peaks = [r["memory/peak_gb"] for r in rows if "memory/peak_gb" in r]
    after = run.evals.get("after_rl")
    held_out = after.get("mean") if isinstance(after, dict) else None
    return {"run": run.label, "backend": str(run.manifest.get("backend", "?")), "steps": str(len(rows)),
            "final reward": f"{last['reward/mean']:.3f}" if last else "–",
            "held-out after RL": f"{held_out:.3f}" if isinstance(held_out, int | float) else "–",
            "mean step s": mean("time/step_s"), "wall s": f"{run.wall[-1]:.1f}" if run.wall else "–",
            # every token over every second (a step-time-weighted mean), and the highest peak of any step
            "tokens/s": f"{sum(t * s for t, s in timed) / sum(s for _, s in timed):.1f}" if timed
            else mean("throughput/tokens_per_s"),
            "peak GB": f"{max(peaks):.3f}" if peaks else "–",
            "spec": str(run.manifest.get("spec_hash", "?"))[:10]}


def _table(rows: list[dict[str, str]], cls: str) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row.values()) + "</tr>" for row in rows)
    return f"<table class='{cls}'><tr>{head}</tr>{body}</table>"


def settings_table(runs: list[RunData]) -> str:
    """HTML: what each run was made with (backend, spec and chat-template hash, seed, every package version in
    ``manifest.json``), one column per run; a row whose runs hold different values is ``class='differs'``. A
    package only some runs record (the backend's own) is shown, not compared."""
    runs = [r for r in runs if r.manifest]
    if not runs:
        return ""
    keys: list[tuple[str, tuple[str, ...]]] = [
        ("backend", ("backend",)), ("spec hash", ("spec_hash",)), ("chat template hash", ("chat_template_hash",)),
        ("seed", ("seed",))]
    packages = dict.fromkeys(k for r in runs for k in (r.manifest.get("versions") or {}))
    keys += [(name, ("versions", name)) for name in packages]
    rows, differ = [], []
    for name, path in keys:
        values = []
        for run in runs:
            value: Any = run.manifest
            for part in path:
                value = value.get(part) if isinstance(value, dict) else None
            values.append(value)
        differs = name != "backend" and len({json.dumps(v) for v in values if v is not None}) > 1
        differ += [name] if differs else []
        cells = "".join(f"<td title='{html.escape(str(v))}'>{html.escape(_short(v))}</td>" for v in values)
        mark = " class='differs'" if differs else ""
        rows.append(f"<tr{mark}><th>{html.escape(name)}</th>{cells}</tr>")
    head = "<tr><th></th>" + "".join(f"<th>{html.escape(r.label)}</th>" for r in runs) + "</tr>"
    summary = (f"<p>The runs differ beyond the backend in: {html.escape(', '.join(differ))}.</p>" if differ
               else "<p>The runs differ in nothing but the backend.</p>")
    return f"<h2>What each run was made with</h2><table class='settings'>{head}{''.join(rows)}</table>{summary}"


def _short(value: Any) -> str:
    if value is None:
        return "–"
    text = str(value)
    return text[:12] if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text  # a sha256


_STATUS = {"✔": "identical", "≈": "close", "≠": "documented", "✘": "undocumented", "n/a": "na"}


def parity_table(algorithms: dict[str, list[Cell]]) -> str:
    """HTML: the algorithm x backend table of the conformance suite, as ``agentbridge conformance --algorithms``
    prints it (the status, and after ≠ or ✘ the quantities), each cell's max |Δ| per quantity as its tooltip."""
    from agentbridge.conformance.algorithms import ALGORITHMS, CLOSE, IDENTICAL

    cells = {(c.algorithm, b): c for b, column in algorithms.items() for c in column}
    if not cells:
        return ""
    names = [a for a in ALGORITHMS if any(a == c.algorithm for c in cells.values())]
    names += [a for a in dict.fromkeys(c.algorithm for c in cells.values()) if a not in names]
    rows = []
    for name in names:
        tds = []
        for backend in algorithms:
            c = cells.get((name, backend))
            if c is None:
                tds.append("<td></td>")
                continue
            named = c.unexpected() if c.status == "✘" else c.differing() if c.status == "≠" else []
            text = " ".join([c.status, ",".join(named)]) if named else c.status
            tip = c.why or "; ".join(f"{q} max|Δ|={d:.3g}" + (f" (documented: {c.known[q]})" if q in c.known else "")
                                     for q, d in c.deltas.items())
            tds.append(f"<td class='{_STATUS.get(c.status, '')}' title='{html.escape(tip)}'>{html.escape(text)}</td>")
        rows.append(f"<tr><th>{html.escape(name)}</th>{''.join(tds)}</tr>")
    head = "<tr><th>algorithm</th>" + "".join(f"<th>{html.escape(b)}</th>" for b in algorithms) + "</tr>"
    legend = (f"✔ identical (max |Δ| ≤ {IDENTICAL:g}) · ≈ within tolerance (≤ {CLOSE:g}) · ≠ a documented "
              "difference, in the quantities named · ✘ an undocumented difference · n/a not supported by the "
              "backend. Each backend's own advantage and loss code on the golden batch against agentbridge's "
              "reference; hover a cell for max |Δ| per quantity.")
    return (f"<h2>Math parity (conformance)</h2><table class='parity'>{head}{''.join(rows)}</table>"
            f"<p class='legend'>{html.escape(legend)}</p>")


# Marks on <body> how many plots the browser decoded, so a headless browser can check the report rendered; each
# image gets its decoded width (data-width).
_RENDER_CHECK = ("<script>addEventListener('load', () => { const imgs = [...document.images]; "
                 "imgs.forEach(i => { i.dataset.width = i.naturalWidth; }); "
                 "document.body.dataset.plots = imgs.length; document.body.dataset.rendered = "
                 "imgs.filter(i => i.complete && i.naturalWidth > 0).length; });</script>")
_STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:.5em}"
          "td,th{border:1px solid #ccc;padding:4px 8px}div.pair{display:flex;flex-wrap:wrap}figure{margin:.5em}"
          "img{max-width:100%}"
          "tr.differs td{background:#fde2c8}td.identical{background:#dff3e2}td.close{background:#eef6d8}"
          "td.documented{background:#fff1c2}td.undocumented{background:#f8c9c4}td.na{color:#888}"
          "p.legend{font-size:90%;color:#444}")


def _figure(name: str, alt: str) -> str:
    return (f'<figure><img src="{name}" alt="{html.escape(alt)}"><figcaption>{html.escape(alt)}</figcaption>'
            "</figure>")


def write_comparison(run_dirs: list[Path], out_dir: Path, backends: list[dict[str, str]] | None = None,
                 semantics: dict[str, dict[str, str]] | None = None,
                 algorithms: dict[str, list[Cell]] | None = None) -> tuple[Path, list[str]]:
    """Draw the comparison into ``out_dir``; returns ``report.html`` and the problem/warning lines.

    ``backends``: optional rows (one per backend: compile, validate, conformance, run) drawn as a table first;
    ``semantics``: what each backend's job will do (backend -> aspect -> line), drawn side by side next;
    ``algorithms``: the conformance suite's algorithm cells per backend, drawn as the math-parity table.
    """
    problems: list[str] = []
    runs = [r for r in (_load(Path(p), problems) for p in run_dirs) if r is not None]
    seen_differently = environment_differences([(r.label, r.path) for r in runs], problems)
    problems = limit_problems(problems) + [f"warning: {w}" for w in differences(runs)]
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = "".join("<div class='pair'>" + _figure(step, f"{title} vs step")
                      + (_figure(wall, f"{title} vs wall time") if wall else "") + "</div>"
                      for step, wall, title in draw_all(runs, out_dir))
    notes = "".join(f"<li>{html.escape(p)}</li>" for p in problems)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>agentbridge report</title>"
            f"<style>{_STYLE}</style></head><body>"
            f"<h1>agentbridge report: {len(runs)} run(s)</h1>"
            f"{'<h2>Backends</h2>' + _table(backends, 'backends') if backends else ''}"
            f"{semantics_table(semantics or {})}{parity_table(algorithms or {})}"
            f"{'<h2>Runs</h2>' + _table([_summary(r) for r in runs], 'runs') if runs else ''}"
            f"{settings_table(runs)}"
            f"{environment_section(seen_differently)}"
            f"{'<h2>Problems</h2><ul>' + notes + '</ul>' if notes else ''}"
            f"{'<h2>Curves</h2>' + figures if figures else ''}{_RENDER_CHECK}</body></html>")
    path = out_dir / "report.html"
    path.write_text(page)
    return path, problems + [f"warning: {line}" for line in seen_differently]


def environment_section(lines: list[str]) -> str:
    """HTML: where runs saw different environment outputs for the same task and action history (nothing when
    they agree)."""
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return ("<h2>Environment outputs</h2><p>The same task and the same actions got different answers from the "
            "environment: the runs did not see the same environment (replay a recording with "
            "<code>environment.replay</code> to compare backends on identical episodes).</p>"
            f"<ul class='envdiff'>{items}</ul>")

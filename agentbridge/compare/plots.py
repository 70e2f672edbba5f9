"""The report's figures (PNG): each curve against the step and against wall time, one line per run and one colour
per run in every figure; held-out success as points per evaluation; finish reasons as bars.

Wall time is the cumulative sum of ``time/step_s`` (runs carry no clock). A curve no run has is not drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbridge.runs import one_line

if TYPE_CHECKING:
    from agentbridge.compare.report import RunData

# the groups of the normalized metric names; any other ``<prefix>/<name>`` is a backend's own metric
NORMALIZED_GROUPS = ("step", "reward", "episode", "tools", "finish", "time", "throughput", "memory", "eval")
ARMS = {  # held-out evaluations (eval.json): marker, legend, where on the x axis (start or end of RL)
    "before_training": ("v", "before training", "start"),
    "before_rl": ("o", "before RL (warm start)", "start"),
    "after_rl": ("s", "after RL", "end"),
    "sft_control": ("D", "SFT control (RL's wall time)", "end"),
}


@dataclass(frozen=True)
class Curve:
    """One figure: a normalized name (``metric``), or a backend's own name (``backend_metric``, found as
    ``<backend>/<name>``); with ``per``, the metric divided by that one (rows where it is 0 have no point)."""

    stem: str
    ylabel: str
    metric: str = ""
    backend_metric: str = ""
    per: str = ""

    def key(self, run: RunData) -> str | None:
        """The row key this run's line is read from, or None when none of its rows has the metric."""
        if self.metric:
            return self.metric if any(self.metric in r for r in run.rows) else None
        backend = str(run.manifest.get("backend", ""))  # its metrics are stored as <backend>/<name>
        mine = f"{backend}/{self.backend_metric}"
        if backend and any(mine in r for r in run.rows):
            return mine
        found = sorted({k for r in run.rows for k in r if k.count("/") == 1 and k.endswith(f"/{self.backend_metric}")
                        and k.split("/")[0] not in NORMALIZED_GROUPS})
        return found[0] if found else None

    def values(self, run: RunData) -> list[float | None]:
        """One value per row (None where the row lacks it)."""
        key = self.key(run)
        if key is None:
            return [None] * len(run.rows)
        if not self.per:
            return [r.get(key) for r in run.rows]
        return [r[key] / r[self.per] if key in r and r.get(self.per) else None for r in run.rows]


CURVES = (
    Curve("reward", "reward (mean over episodes)", metric="reward/mean"),
    Curve("kl", "KL (each backend's own log)", backend_metric="kl"),
    Curve("entropy", "entropy (each backend's own log)", backend_metric="entropy"),
    Curve("response_tokens", "response tokens per episode", metric="episode/response_tokens"),
    Curve("tool_failures", "tool failures per tool call", metric="tools/failures", per="tools/calls"),
    Curve("throughput", "tokens / s", metric="throughput/tokens_per_s"),
    Curve("step_time", "seconds per step", metric="time/step_s"),
    Curve("memory", "peak memory (GB)", metric="memory/peak_gb"),
)


def _text(label: str) -> str:
    """``label`` as matplotlib draws it literally: on one line, a ``$`` in a run's name or a backend's metric no
    start of mathtext (which would fail to parse, and the report with it), a leading ``_`` no hidden legend entry."""
    text = one_line(label, 80).replace("$", r"\$")
    return f" {text}" if text.startswith("_") or not text else text


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: Path) -> None:
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    _pyplot().close(fig)


def wall_unit(runs: list[RunData]) -> tuple[float, str]:
    """Seconds per unit and the unit's name for the longest run's wall time."""
    longest = max((r.wall[-1] for r in runs if r.wall), default=0.0)
    return (3600.0, "hours") if longest > 7200 else (60.0, "minutes") if longest > 120 else (1.0, "seconds")


def _xs(run: RunData, wall: bool, unit: float) -> list[float] | None:
    if not wall:
        return [float(r["step"]) for r in run.rows]
    return [w / unit for w in run.wall] if run.wall else None


def _axes(wall: bool, unit_name: str) -> tuple[Any, Any]:
    from matplotlib.ticker import MaxNLocator

    fig, ax = _pyplot().subplots(figsize=(5.6, 3.2))
    ax.set_xlabel(f"wall time ({unit_name}, sum of step times)" if wall else "step")
    if not wall:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    return fig, ax


def draw_curve(runs: list[RunData], curve: Curve, out: Path, *, wall: bool) -> bool:
    """``curve`` against the step (or wall time), one line per run; False (and no file) when no run has it."""
    unit, unit_name = wall_unit(runs)
    lines = []
    for i, run in enumerate(runs):
        xs, key = _xs(run, wall, unit), curve.key(run)
        if xs is None or key is None:
            continue
        points = [(x, y) for x, y in zip(xs, curve.values(run), strict=True) if y is not None]
        if points:
            label = run.label if curve.metric else f"{run.label} · {key}"
            lines.append((points, f"C{i % 10}", _text(label)))
    if not lines:
        return False
    fig, ax = _axes(wall, unit_name)
    for points, color, label in lines:
        ax.plot(*zip(*points, strict=True), marker="o", markersize=2, color=color, label=label)
    ax.set_ylabel(curve.ylabel)
    ax.legend(fontsize=8)
    _save(fig, out)
    return True


@dataclass
class _Evaluation:
    x: float
    mean: float
    low: float
    high: float
    arm: str
    color: str
    label: str


def _evaluations(runs: list[RunData], wall: bool, unit: float) -> list[_Evaluation]:
    out = []
    for i, run in enumerate(runs):
        xs = _xs(run, wall, unit)
        end = xs[-1] if xs else None
        for arm, (_, _, where) in ARMS.items():
            s = run.evals.get(arm)
            x = 0.0 if where == "start" else end
            if isinstance(s, dict) and isinstance(s.get("mean"), int | float) and x is not None:
                mean, low, high = float(s["mean"]), s.get("ci95_low"), s.get("ci95_high")
                out.append(_Evaluation(x, mean, mean if low is None else float(low),
                                       mean if high is None else float(high), arm, f"C{i % 10}", _text(run.label)))
    return out


def draw_heldout(runs: list[RunData], out: Path, *, wall: bool) -> bool:
    """Held-out success per evaluation (``eval.json``), with its 95% interval: the arms before RL at the start,
    after RL and the SFT control at the run's last step (or its wall time); False when no run has evaluations."""
    unit, unit_name = wall_unit(runs)
    points = _evaluations(runs, wall, unit)
    if not points:
        return False
    from matplotlib.lines import Line2D

    drawn = dict.fromkeys((p.label, p.color) for p in points)
    dodge = 0.012 * (max(p.x for p in points) or 1.0)  # runs side by side where their evaluations coincide
    for i, (label, _) in enumerate(drawn):
        for p in points:
            p.x += dodge * (i - (len(drawn) - 1) / 2) if p.label == label else 0.0
    fig, ax = _axes(wall, unit_name)
    for p in points:
        ax.errorbar([p.x], [p.mean], yerr=[[p.mean - p.low], [p.high - p.mean]], fmt=ARMS[p.arm][0], color=p.color,
                    capsize=3)
    for label, color in drawn:  # before RL -> after RL, dashed
        ends = [(p.x, p.mean) for p in points if p.label == label and p.arm in ("before_rl", "after_rl")]
        if len(ends) == 2:
            ax.plot(*zip(*ends, strict=True), linestyle="--", color=color, alpha=0.6)
    handles = [Line2D([], [], color=color, label=label) for label, color in drawn]
    handles += [Line2D([], [], color="gray", marker=marker, linestyle="", label=name)
                for arm, (marker, name, _) in ARMS.items() if any(p.arm == arm for p in points)]
    metrics = {str(r.evals[a].get("metric", "")) for r in runs for a in ARMS if isinstance(r.evals.get(a), dict)} - {""}
    ax.set_ylabel(f"held-out success ({_text(metrics.pop())})" if len(metrics) == 1 else "held-out success")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the points
    _save(fig, out)
    return True


def draw_finish(runs: list[RunData], out: Path) -> None:
    """How episodes ended, as a share per run."""
    reasons = ("done", "max_turns", "length", "error")
    fig, ax = _pyplot().subplots(figsize=(6.0, 0.8 + 0.5 * len(runs)))
    bottoms = [0.0] * len(runs)
    for reason in reasons:
        shares = [sum(r.get(f"finish/{reason}", 0.0) for r in run.rows) / max(1, len(run.rows)) for run in runs]
        ax.barh([_text(run.label) for run in runs], shares, left=bottoms, label=reason)
        bottoms = [b + s for b, s in zip(bottoms, shares, strict=True)]
    ax.set_xlabel("share of episodes")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=8, ncols=4, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    _save(fig, out)


def draw_all(runs: list[RunData], out_dir: Path) -> list[tuple[str, str | None, str]]:
    """Every figure into ``out_dir``: ``(step PNG, wall-time PNG or None, title)`` per drawn curve, then finish."""
    figures: list[tuple[str, str | None, str]] = []
    curves: list[tuple[str, str, Any]] = [(c.stem, c.ylabel, c) for c in CURVES]
    curves.insert(1, ("heldout", "held-out success", None))
    for stem, title, curve in curves:
        drawn = []
        for wall, name in ((False, f"{stem}.png"), (True, f"{stem}_wall.png")):
            if curve is None:
                ok = draw_heldout(runs, out_dir / name, wall=wall)
            else:
                ok = draw_curve(runs, curve, out_dir / name, wall=wall)
            drawn.append(name if ok else None)
        if drawn[0]:
            figures.append((drawn[0], drawn[1], title))
    if runs:
        draw_finish(runs, out_dir / "finish.png")
        figures.append(("finish.png", None, "finish reasons"))
    return figures

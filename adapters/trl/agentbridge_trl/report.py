"""The run report: reward curve and held-out evaluation drawn as PNGs, plus report.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def write_report(run_dir: Path) -> Path:
    """Draw ``reward_curve.png`` and ``eval.png`` and write ``report.md``; returns the report path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _rows(run_dir / "metrics.jsonl")
    evals = json.loads((run_dir / "eval.json").read_text()) if (run_dir / "eval.json").exists() else {}
    warm = json.loads((run_dir / "warm_start.json").read_text()) if (run_dir / "warm_start.json").exists() else {}
    lines = [f"# Run report: {run_dir.name}", ""]
    if rows:
        steps = [r["step"] for r in rows]
        fig, ax = plt.subplots(figsize=(7, 4))
        comps = sorted(k for k in rows[0] if k.startswith("reward/") and k not in ("reward/std",))
        for key in comps:
            values = [r.get(key, 0.0) for r in rows]
            if key == "reward/mean" or any(values):
                ax.plot(steps, values, label=key, linewidth=2 if key == "reward/mean" else 1)
        ax.set_xlabel("GRPO step")
        ax.set_ylabel("reward (training rollouts)")
        ax.set_title("Reward per step")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(run_dir / "reward_curve.png", dpi=110)
        plt.close(fig)
        mean_step = sum(r["time/step_s"] for r in rows) / len(rows)
        lines += ["![reward curve](reward_curve.png)", "",
                  f"{len(rows)} GRPO steps, {mean_step:.2f} s/step on average, "
                  f"peak memory {max(r['memory/peak_gb'] for r in rows):.2f} GB.", ""]
    if warm:
        lines += [f"Warm start: SFT on {int(warm['demonstrations'])} scripted demonstrations, {int(warm['steps'])} "
                  f"steps in {warm['seconds']:.0f} s, final loss {warm['loss']:.3f}.", ""]
    if evals:
        names = list(evals)
        means = [evals[n]["mean"] for n in names]
        cis = [evals[n]["ci95"] for n in names]
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.bar(names, means, yerr=cis, capsize=6, color=["#999", "#3a7", "#37a"][: len(names)])
        ax.set_ylabel(evals[names[0]]["metric"])
        ax.set_title(f"Held-out success (greedy, n={evals[names[0]]['n']}, 95% CI)")
        ax.set_ylim(0, 1)
        fig.tight_layout()
        fig.savefig(run_dir / "eval.png", dpi=110)
        plt.close(fig)
        lines += ["## Held-out evaluation", "", "![eval](eval.png)", "",
                  "| checkpoint | success | 95% CI | n |", "|---|---|---|---|"]
        lines += [f"| {n} | {evals[n]['mean']:.3f} | ±{evals[n]['ci95']:.3f} | {evals[n]['n']} |" for n in names]
        if "before_rl" in evals and "after_rl" in evals:
            b, a = evals["before_rl"], evals["after_rl"]
            apart = a["mean"] - a["ci95"] > b["mean"] + b["ci95"]
            lines += ["", f"RL changed held-out success by {a['mean'] - b['mean']:+.3f}; the 95% intervals "
                          f"{'do not overlap' if apart else 'overlap'}."]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path

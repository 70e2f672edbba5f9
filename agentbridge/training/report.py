"""The per-run report: reward curve, the warm start's dev checks and the held-out arms drawn as PNGs, plus
``report.md`` saying in words which arm won."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ARM_COLORS = {"before_training": "#999999", "before_rl": "#33aa77", "after_rl": "#3377aa", "sft_control": "#cc8833"}
SIGNIFICANT = 0.01


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def verdicts(evals: dict[str, Any]) -> list[str]:
    """Plain sentences: what RL added over the warm start, and whether RL or the SFT control won."""
    paired = evals.get("paired", {})
    out = []
    rl, warm, control = evals.get("after_rl"), evals.get("before_rl"), evals.get("sft_control")
    if rl and warm and paired.get("rl_vs_warm_start_p") is not None:
        p, diff = paired["rl_vs_warm_start_p"], rl["mean"] - warm["mean"]
        sig = "significant" if p < SIGNIFICANT else "not significant"
        out.append(f"RL changed held-out success by {100 * diff:+.1f} points over the warm start "
                   f"({warm['mean']:.3f} → {rl['mean']:.3f}; McNemar exact p = {p:.2g}, {sig} at {SIGNIFICANT}).")
    for name, test in paired.get("components", {}).get("rl_vs_warm_start", {}).items():
        sig = "significant" if test["p"] < SIGNIFICANT else "not significant"
        out.append(f"RL changed held-out {name} by {test['mean_diff']:+.3f} over the warm start (Wilcoxon "
                   f"signed-rank p = {test['p']:.2g}, {sig} at {SIGNIFICANT}).")
    if rl and control and paired.get("rl_vs_control_p") is not None:
        p, diff = paired["rl_vs_control_p"], rl["mean"] - control["mean"]
        if p >= SIGNIFICANT:
            winner = "neither arm won: the difference is not significant"
        else:
            winner = "RL won" if diff > 0 else "the SFT-only control won"
        out.append(f"With the same extra wall time, {winner} ({rl['mean']:.3f} after RL vs {control['mean']:.3f} "
                   f"for more SFT; {100 * diff:+.1f} points, McNemar exact p = {p:.2g}).")
    return out


def group_table(evals: dict[str, Any], arms: list[str]) -> list[str]:
    """Markdown lines: each arm's success per task group (``Task.data['group']``), when the tasks have groups."""
    groups = list(dict.fromkeys(g for a in arms for g in evals[a].get("by_group", {})))
    if not groups:
        return []
    lines = ["Success per task group:", "", "| arm | " + " | ".join(groups) + " |",
             "|---|" + "---|" * len(groups)]
    for a in arms:
        by_group = evals[a].get("by_group", {})
        lines.append(f"| {a} | " + " | ".join(f"{by_group[g]:.3f}" if g in by_group else "–" for g in groups) + " |")
    return [*lines, ""]


def _plot(path: Path, draw: Any, size: tuple[float, float] = (7, 4)) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size)
    draw(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(run_dir: Path) -> Path:
    """Draw ``reward_curve.png``, ``warm_start.png`` and ``eval.png`` and write ``report.md``; returns its path."""
    rows = _rows(run_dir / "metrics.jsonl")
    evals, warm = _json(run_dir / "eval.json"), _json(run_dir / "warm_start.json")
    lines = [f"# Run report: {run_dir.name}", ""]
    arms = [a for a in ARM_COLORS if a in evals]
    if arms:
        first = evals[arms[0]]

        def draw_evals(ax: Any) -> None:
            means = [evals[a]["mean"] for a in arms]
            errs = [[m - evals[a]["ci95_low"] for a, m in zip(arms, means, strict=True)],
                    [evals[a]["ci95_high"] - m for a, m in zip(arms, means, strict=True)]]
            ax.bar(arms, means, yerr=errs, capsize=6, color=[ARM_COLORS[a] for a in arms])
            for i, a in enumerate(arms):
                ax.text(i, evals[a]["ci95_high"] + 0.02, f"{means[i]:.3f}", ha="center", fontsize=9)
            ax.set_ylabel(first["metric"])
            ax.set_title(f"Held-out success (greedy, same {first['n']} tasks, 95% Wilson CI)")
            ax.set_ylim(0, 1)

        _plot(run_dir / "eval.png", draw_evals, (7, 4))
        lines += ["## Held-out evaluation", "", "![eval](eval.png)", "",
                  "| arm | success | 95% CI (Wilson) | n |", "|---|---|---|---|"]
        lines += [f"| {a} | {evals[a]['mean']:.3f} | [{evals[a]['ci95_low']:.3f}, {evals[a]['ci95_high']:.3f}] | "
                  f"{evals[a]['n']} |" for a in arms]
        lines += ["", *verdicts(evals), ""]
        lines += group_table(evals, arms)
    if warm:
        dev = warm.get("dev", [])
        text = (f"Warm start: SFT on {int(warm['demonstrations'])} scripted demonstrations, {int(warm['steps'])} "
                f"steps in {warm['seconds']:.0f} s, final loss {warm['loss']:.3f}, stopped by {warm['stopped']}")
        text += f" at dev success {dev[-1]['success']:.3f}." if dev else "."
        if "control" in warm:
            c = warm["control"]
            text += f" The SFT-only control continued it for {c['steps']} steps ({c['seconds']:.0f} s, RL's wall time)."
        lines += ["## Warm start", "", text, ""]
        if dev:
            def draw_dev(ax: Any) -> None:
                ax.plot([d["seconds"] for d in dev], [d["success"] for d in dev], marker="o", label="dev success")
                if warm.get("target") is not None:
                    ax.axhline(warm["target"], color="#cc3333", linestyle="--", linewidth=1, label="target")
                ax.legend(fontsize=8, loc="upper left")
                ax.set_xlabel("warm-start wall time (s)")
                ax.set_ylabel("dev success (greedy)")
                ax.set_title("Warm start: dev success at each check")
                ax.set_ylim(0, 1)
                ax.grid(alpha=0.3)

            _plot(run_dir / "warm_start.png", draw_dev, (6, 3.5))
            lines += ["![warm start](warm_start.png)", ""]
    if rows:
        steps = [r["step"] for r in rows]
        comps = sorted(k for k in rows[0] if k.startswith("reward/") and k != "reward/std")

        def draw_reward(ax: Any) -> None:
            for key in comps:
                values = [r.get(key, 0.0) for r in rows]
                if key == "reward/mean" or any(values):
                    ax.plot(steps, values, label=key, linewidth=2 if key == "reward/mean" else 1)
            ax.set_xlabel("RL step")
            ax.set_ylabel("reward (training rollouts)")
            ax.set_title("Reward per step")
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)

        _plot(run_dir / "reward_curve.png", draw_reward)
        # a backend logs what it logs (OpenRLHF no memory figure): say only what the rows hold
        times = [r["time/step_s"] for r in rows if "time/step_s" in r]
        memory = [r["memory/peak_gb"] for r in rows if "memory/peak_gb" in r]
        facts = [f"{len(rows)} RL steps"]
        if times:
            facts.append(f"{sum(times) / len(times):.2f} s/step on average")
        if memory:
            facts.append(f"peak memory {max(memory):.2f} GB")
        lines += ["## RL", "", "![reward curve](reward_curve.png)", "", ", ".join(facts) + ".", ""]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path

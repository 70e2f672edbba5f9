"""Held-out success vs CPU wall time: warm start alone, warm start + RL, and the SFT-only control, over seeds.

Runs the main job (``agentbridge train SPEC``) once per seed — each with an empty cache unless ``--cache`` is
given — or reads finished run directories (``--runs``), then draws ``learning.png`` (one line per arm and seed:
held-out success at the wall time each checkpoint was reached, plus the warm start's dev checks) and prints the
arms, RL's gain, the paired p-values and their spread over seeds as a Markdown table.

    python bench/learning.py --seeds 0 1 2 --out bench/learning           # three fresh runs, 6-10 min each
    python bench/learning.py --runs runs/calculator --out /tmp/learning   # an existing run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ARMS = ("before_training", "before_rl", "after_rl", "sft_control")


def run_seed(spec: str, seed: int, out: Path, cache: str | None, sets: list[str]) -> Path:
    run_dir = out / f"seed{seed}"
    env = {**os.environ, "AGENTBRIDGE_CACHE": cache or tempfile.mkdtemp(prefix=f"ab-cache-seed{seed}-")}
    args = [sys.executable, "-m", "agentbridge.cli", "train", spec, "-o", str(run_dir), "--set", f"seed={seed}"]
    for s in sets:
        args += ["--set", s]
    started = time.perf_counter()
    print(f"[learning] seed {seed}: {' '.join(args[3:])}", file=sys.stderr, flush=True)
    subprocess.run(args, env=env, check=True)
    (run_dir / "wall_s.txt").write_text(f"{time.perf_counter() - started:.1f}\n")
    return run_dir


def timeline(run_dir: Path) -> dict[str, Any]:
    """Each arm's held-out success and the wall time (s, from the warm start's start) its checkpoint was reached."""
    evals = json.loads((run_dir / "eval.json").read_text())
    warm = json.loads((run_dir / "warm_start.json").read_text())
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rl_s = sum(r["time/step_s"] for r in metrics)
    ws = warm["seconds"]
    wall = run_dir / "wall_s.txt"
    return {
        "run": str(run_dir), "evals": evals, "dev": warm.get("dev", []), "warm_steps": warm["steps"],
        "stopped": warm["stopped"], "warm_s": ws, "rl_s": rl_s, "rl_steps": len(metrics),
        "control_steps": warm.get("control", {}).get("steps"),
        "wall_s": float(wall.read_text()) if wall.exists() else None,
        "points": {"before_training": 0.0, "before_rl": ws, "after_rl": ws + rl_s,
                   "sft_control": ws + warm.get("control", {}).get("seconds", rl_s)},
    }


def draw(lines: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, line in enumerate(lines):
        e, pts = line["evals"], line["points"]
        tag = Path(line["run"]).name
        dev = line["dev"]
        ax.plot([0.0] + [d["seconds"] for d in dev], [e["before_training"]["mean"]] + [d["success"] for d in dev],
                color="#33aa77", linestyle=":", linewidth=1, label="warm start: dev checks" if i == 0 else None)
        ax.plot([pts["before_rl"]], [e["before_rl"]["mean"]], color="#33aa77", marker="o", linestyle="", zorder=5,
                label="after the warm start (held-out)" if i == 0 else None)
        ax.plot([pts["before_rl"], pts["after_rl"]], [e["before_rl"]["mean"], e["after_rl"]["mean"]],
                color="#3377aa", marker="o", label="warm start + RL" if i == 0 else None)
        if "sft_control" in e:
            ax.plot([pts["before_rl"], pts["sft_control"]], [e["before_rl"]["mean"], e["sft_control"]["mean"]],
                    color="#cc8833", marker="s", linestyle="--", label="SFT-only control" if i == 0 else None)
        ax.annotate(tag, (pts["after_rl"], e["after_rl"]["mean"]), fontsize=7, xytext=(4, 0),
                    textcoords="offset points")
    ax.set_xlabel("CPU wall time of training (s): warm start, then RL or the control")
    ax.set_ylabel("held-out success (greedy)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Learning on CPU: held-out success vs wall time, per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(lines: list[dict[str, Any]]) -> str:
    head = ("| run | warm start | before training | after warm start | after RL | SFT control | RL − warm start "
            "| p (RL vs warm) | RL − control | p (RL vs control) | job wall time |")
    rows = [head, "|" + "---|" * 11]
    groups: list[str] = []
    for line in lines:
        e, p = line["evals"], line["evals"]["paired"]
        ctrl = e.get("sft_control", {}).get("mean")
        rows.append(
            f"| {Path(line['run']).name} | {line['warm_steps']} steps, {line['warm_s']:.0f} s ({line['stopped']}) "
            + "".join(f"| {e[a]['mean']:.3f} " if a in e else "| – " for a in ARMS)
            + f"| {100 * (e['after_rl']['mean'] - e['before_rl']['mean']):+.1f} | {p['rl_vs_warm_start_p']:.2g} "
            + (f"| {100 * (e['after_rl']['mean'] - ctrl):+.1f} | {p['rl_vs_control_p']:.2g} " if ctrl is not None
               else "| – | – ")
            + (f"| {line['wall_s'] / 60:.1f} min |" if line["wall_s"] else "| – |"))
        by_group = {a: e[a].get("by_group", {}) for a in ("before_rl", "after_rl", "sft_control") if a in e}
        groups.append(f"{Path(line['run']).name}: " + "; ".join(
            f"{g} " + " → ".join(f"{by_group[a][g]:.2f}" for a in by_group if g in by_group[a])
            for g in by_group.get("before_rl", {})))
    if groups:
        rows += ["", "Per task group (after the warm start → after RL → SFT control):", "",
                 *(f"- {g}" for g in groups)]
    if len(lines) > 1:
        gains = [100 * (x["evals"]["after_rl"]["mean"] - x["evals"]["before_rl"]["mean"]) for x in lines]
        rows.append("")
        rows.append(f"RL − warm start over {len(lines)} runs: mean {statistics.mean(gains):+.1f} points, "
                    f"min {min(gains):+.1f}, max {max(gains):+.1f}, sd {statistics.stdev(gains):.1f}.")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default="examples/calculator.yaml")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--runs", type=Path, nargs="*", help="read these finished runs instead of training")
    parser.add_argument("--cache", default=None, help="AGENTBRIDGE_CACHE for the runs (default: a fresh one each)")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="more --set for every run")
    parser.add_argument("--out", type=Path, default=Path("bench/learning"))
    parser.add_argument("--parallel", type=int, default=1,
                        help="seeds run at once (their wall times then include each other's load)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.runs:
        runs = args.runs
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
            runs = list(pool.map(lambda s: run_seed(args.spec, s, args.out, args.cache, args.sets), args.seeds))
    lines = [timeline(r) for r in runs]
    draw(lines, args.out / "learning.png")
    text = table(lines)
    (args.out / "learning.md").write_text(text + "\n")
    (args.out / "learning.json").write_text(json.dumps(lines, indent=2) + "\n")
    print(text)
    print(f"\nplot: {args.out / 'learning.png'}")


if __name__ == "__main__":
    main()

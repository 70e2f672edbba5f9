"""The learning experiment every training job runs, whatever the backend.

Held-out success is measured on the same tasks for up to four arms — ``before_training``, ``before_rl`` (after
the warm start), ``after_rl`` and ``sft_control`` (the warm start continued with SFT for RL's wall time) — and RL
is compared with the warm start and with the control by the exact McNemar test. The backend supplies only its RL
phase: a callable that trains the given model in place.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbridge.env import Task
from agentbridge.rollout.agent import Agent
from agentbridge.training.evaluate import EvalResult, evaluate
from agentbridge.training.stats import mcnemar_exact, wilcoxon_paired
from agentbridge.training.warm_start import SFTRun, continue_sft, demonstrations, dev_tasks, sft_rows, warm_start

if TYPE_CHECKING:
    from agentbridge.training.sharded_eval import GatheredEval, ShardedEval

ARMS = ("before_training", "before_rl", "after_rl", "sft_control")


def paired_tests(evals: dict[str, EvalResult]) -> dict[str, Any]:
    """``rl_vs_warm_start_p`` and ``rl_vs_control_p`` (None when an arm is missing), with discordant counts; under
    ``components``, the same comparisons of every other reward component (mean difference, Wilcoxon p)."""
    out: dict[str, Any] = {"rl_vs_warm_start_p": None, "rl_vs_control_p": None}
    rl = evals.get("after_rl")
    for key, other in (("rl_vs_warm_start", "before_rl"), ("rl_vs_control", "sft_control")):
        if rl is not None and other in evals:
            test = mcnemar_exact(rl.scores, evals[other].scores)
            out[f"{key}_p"] = test["p"]
            out[key] = {"rl_only": int(test["a_only"]), f"{other}_only": int(test["b_only"])}
            both = [c for c in rl.components if c in evals[other].components]
            if both:  # the other reward components, graded: the Wilcoxon signed-rank test
                out.setdefault("components", {})[key] = {
                    c: wilcoxon_paired(rl.components[c], evals[other].components[c]) for c in both}
    return out


def write_evals(run_dir: Path, evals: dict[str, EvalResult]) -> dict[str, Any]:
    """``eval.json`` (one object per arm, then ``paired``) and ``eval_scores.jsonl`` (every task's score per arm,
    and per ``arm:component`` for the other reward components)."""
    summary: dict[str, Any] = {name: evals[name].summary() for name in ARMS if name in evals}
    summary["paired"] = paired_tests(evals)
    (run_dir / "eval.json").write_text(json.dumps(summary, indent=2) + "\n")
    if evals:
        first = next(iter(evals.values()))
        with (run_dir / "eval_scores.jsonl").open("w") as f:
            for i, task_id in enumerate(first.task_ids):
                row = {"task_id": task_id, **{n: r.scores[i] for n, r in evals.items()}}
                row |= {f"{n}:{c}": v[i] for n, r in evals.items() for c, v in r.components.items()}
                f.write(json.dumps(row) + "\n")
    return summary


def load_evals(run_dir: Path, tasks: list[Task]) -> dict[str, EvalResult]:
    """The arms already evaluated in ``run_dir`` on ``tasks`` (from ``eval_scores.jsonl``), to extend."""
    path = run_dir / "eval_scores.jsonl"
    if not path.is_file():
        return {}
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    summary = json.loads((run_dir / "eval.json").read_text())
    arms = [k for k in rows[0] if k != "task_id" and ":" not in k] if rows else []
    group = {t.id: str(t.data.get("group", "")) for t in tasks}

    def components(arm: str) -> dict[str, list[float]]:
        keys = [k for k in rows[0] if k.startswith(f"{arm}:")]
        return {k.split(":", 1)[1]: [r[k] for r in rows] for k in keys}

    return {arm: EvalResult(metric=summary[arm]["metric"], task_ids=[r["task_id"] for r in rows],
                            scores=[r[arm] for r in rows], finish=summary[arm].get("finish", {}),
                            seconds=summary[arm].get("seconds", 0.0),
                            groups=[group.get(r["task_id"], "") for r in rows], components=components(arm))
            for arm in arms}


class Experiment:
    """Runs the arms around a backend's RL phase and writes ``eval.json``, ``warm_start.json`` and progress.

    ``say(text)`` prints a line; ``progress(label, total)`` returns an ``update(step, info)`` function for a bar.
    """

    def __init__(self, agent: Agent, model: Any, run_dir: Path, eval_tasks: list[Task], *,
                 say: Callable[[str], None],
                 progress: Callable[[str, int | None], Callable[[int, str, bool], None]]) -> None:
        self.agent, self.model, self.run_dir, self.eval_tasks = agent, model, run_dir, eval_tasks
        self.say, self.progress = say, progress
        self.evals: dict[str, EvalResult] = {}
        self.sft: SFTRun | None = None
        self.snapshot: dict[str, Any] | None = None
        self.rl_seconds = 0.0
        self.sharded: ShardedEval | GatheredEval | None = None   # held-out evaluation spread over devices

    def evaluate(self, arm: str, *, source: str | None = None, seed: int = 0) -> EvalResult | None:
        """Greedy held-out success of the model as it is now, as ``arm``; with ``self.sharded`` set, spread as it
        says (``source``, ``seed``: where its other processes load the same weights from)."""
        if not self.eval_tasks:
            return None
        where = f", {self.sharded.label}" if self.sharded is not None and self.sharded.label else ""
        self.say(f"evaluating {arm} on {len(self.eval_tasks)} held-out tasks (greedy{where})")
        if self.sharded is not None:
            result = self.sharded(self.agent, self.model, self.eval_tasks, source, seed)
        else:
            result = evaluate(self.agent, self.model, self.eval_tasks)
        self.evals[arm] = result
        s = result.summary()
        groups = "".join(f", {g} {v:.3f}" for g, v in s.get("by_group", {}).items())
        self.say(f"  {arm}: {s['mean']:.3f} [{s['ci95_low']:.3f}, {s['ci95_high']:.3f}] (n={s['n']}{groups}, "
                 f"{result.seconds:.0f} s)")
        if s.get("components"):
            self.say("    " + ", ".join(f"{c} {v:.3f}" for c, v in s["components"].items()))
        write_evals(self.run_dir, self.evals)
        return result

    def _sft_run(self, rows: list[Any]) -> SFTRun:
        """The warm start's SFT loop over ``rows`` on the experiment's model."""
        ws = self.agent.spec.algorithm.warm_start
        assert ws is not None
        pad = self.agent.tokenizer.pad_token_id
        return SFTRun(self.model, rows, lr=ws.lr, batch_size=ws.batch_size, seed=self.agent.spec.seed,
                      pad_id=pad if pad is not None else self.agent.tokenizer.eos_token_id)

    def warm_start(self) -> None:
        """SFT on the scripted expert's demonstrations until dev success reaches the target (or a cap)."""
        ws = self.agent.spec.algorithm.warm_start
        if ws is None:
            return
        self.say(f"warm start: {ws.demos} scripted demonstrations")
        self.sft = self._sft_run(sft_rows(demonstrations(self.agent, ws.demos)))
        dev = None
        if ws.target is not None:
            tasks = dev_tasks(self.agent, self.agent.spec.data.dev.size or 200)  # type: ignore[union-attr]
            dev = lambda: evaluate(self.agent, self.model, tasks)  # noqa: E731
            floor = f" and {ws.group_floor:.2f} in every task group" if ws.group_floor is not None else ""
            self.say(f"  stops at dev success {ws.target:.2f}{floor} (checked on {len(tasks)} dev tasks every "
                     f"{ws.dev_every} steps)")
        update = self.progress("SFT", None)

        info = ""

        def on_progress(step: int, cap: int, loss: float, dev_success: float | None) -> None:
            nonlocal info
            info = f"loss {loss:.3f}" + (f"  dev {dev_success:.3f}" if dev_success is not None else "")
            update(step, info, False)

        result = warm_start(self.sft, ws, dev=dev, on_progress=on_progress)
        update(result.steps, info, True)
        (self.run_dir / "warm_start.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
        last = f", dev {result.dev[-1]['success']:.3f}" if result.dev else ""
        last += "".join(f", {g} {v:.3f}" for g, v in result.dev[-1].get("groups", {}).items()) if result.dev else ""
        self.say(f"  warm start stopped ({result.stopped}) after {result.steps} steps, {result.seconds:.0f} s{last}")
        if ws.control and self.eval_tasks:
            self.snapshot = self.sft.snapshot()

    def keep_warm_start(self, path: Path) -> None:
        """Save what the SFT-only control starts from (demonstrations, weights, optimizer, data position) to
        ``path``, so that a resumed run can still train the control; nothing when there is no control."""
        import torch

        if self.sft is not None and self.snapshot is not None:
            torch.save({"rows": self.sft.rows, **self.snapshot}, path)

    def resume_warm_start(self, path: Path) -> None:
        """A resumed run: the warm start is done (``warm_start.json``); read the control's start back from ``path``
        (:meth:`keep_warm_start`). Without that file the control is not trained."""
        import torch

        ws = self.agent.spec.algorithm.warm_start
        if ws is None or not ws.control or not self.eval_tasks:
            return
        if not path.is_file():
            self.say(f"no {path.name} in the run: the SFT-only control is not trained")
            return
        state = torch.load(path, weights_only=True)
        self.sft = self._sft_run(state.pop("rows"))
        self.snapshot = state

    def rl(self, train: Callable[[], None], *, earlier_s: float = 0.0) -> None:
        """Run the RL phase and time it; ``earlier_s`` is the RL time a resumed run spent before its checkpoint
        (the SFT-only control gets the total)."""
        started = time.perf_counter()
        train()
        self.rl_seconds = earlier_s + time.perf_counter() - started

    def control(self) -> None:
        """The SFT-only control: the warm start continued from the same weights for RL's wall time, or for
        ``control_steps`` SFT steps when the spec sets them."""
        if self.sft is None or self.snapshot is None:
            return
        ws = self.agent.spec.algorithm.warm_start
        budget = ws.control_steps if ws is not None else None
        self.say(f"SFT-only control: {budget} more SFT steps from the warm start (algorithm.warm_start.control_steps)"
                 if budget is not None else
                 f"SFT-only control: {self.rl_seconds:.0f} s of more SFT from the warm start (RL's wall time)")
        self.sft.restore(self.snapshot)
        update = self.progress("SFT control", budget)
        steps = continue_sft(self.sft, self.rl_seconds,
                             on_progress=lambda n, loss: update(n, f"loss {loss:.3f}", False), steps=budget)
        update(steps, f"loss {self.sft.loss:.3f}", True)
        warm = json.loads((self.run_dir / "warm_start.json").read_text())
        warm["control"] = {"steps": steps, "seconds": round(self.rl_seconds, 2), "loss": self.sft.loss}
        (self.run_dir / "warm_start.json").write_text(json.dumps(warm, indent=2) + "\n")
        self.evaluate("sft_control")

    def conclude(self) -> dict[str, Any]:
        summary = write_evals(self.run_dir, self.evals)
        paired = summary["paired"]
        for key, other, label in (("rl_vs_warm_start", "before_rl", "the warm start"),
                                  ("rl_vs_control", "sft_control", "the SFT control")):
            if paired.get(f"{key}_p") is not None:
                counts = paired[key]
                self.say(f"  RL vs {label}: McNemar exact p = {paired[f'{key}_p']:.2g} ({counts['rl_only']} tasks "
                         f"solved only after RL, {counts[f'{other}_only']} only by {label})")
                for c, test in paired.get("components", {}).get(key, {}).items():
                    self.say(f"    {c}: {test['mean_diff']:+.3f} (Wilcoxon p = {test['p']:.2g})")
        return summary

"""The warm start: SFT on the environment's scripted demonstrations, stopped on dev success, not a step count.

Demonstrations are driver trajectories of the scripted expert, so the SFT rows have exactly the tokens and masks RL
will see: loss on the policy's own tokens (``response_mask == 1``), none on the prompt or tool output. The loop is
plain torch (any backend's environment has it): AdamW, constant learning rate after a short warm-up, and a loss
that computes the batch's shared prompt prefix (system prompt, tool schemas) once per batch.
"""

from __future__ import annotations

import asyncio
import copy
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from agentbridge.env import Task
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.hf_policy import cache_kwarg, output_cache
from agentbridge.rollout.policy import ScriptedPolicy
from agentbridge.rollout.trajectory import Trajectory
from agentbridge.spec.schema import WarmStartSpec
from agentbridge.training.evaluate import EvalResult

Row = dict[str, list[int]]


def demonstrations(agent: Agent, n: int, split: str = "train") -> list[Trajectory]:
    """``n`` scripted-expert episodes on ``split`` tasks; only solved, self-terminated ones are kept.

    An environment without a scripted expert is refused (ValueError, one line) before any task is built.
    """
    expert = ScriptedPolicy.expert_factory(agent)
    tasks = agent.tasks(split, size=n)
    trajs = asyncio.run(agent.run(tasks, expert))
    return [t for t in trajs if t.finish_reason == "done" and t.reward > 0]


def sft_rows(trajs: list[Trajectory]) -> list[Row]:
    """Pre-tokenized SFT rows: ``input_ids`` and ``labels`` (-100 outside the policy's own tokens)."""
    return [{"input_ids": t.prompt_ids + t.response_ids,
             "labels": [-100] * len(t.prompt_ids) + [i if m else -100 for i, m in zip(t.response_ids,
                                                                                      t.response_mask, strict=True)]}
            for t in trajs]


def shared_prefix_length(input_ids: Any, attention_mask: Any) -> int:
    """How many leading tokens every row of the batch shares (and attends to)."""
    same = (input_ids == input_ids[:1]).all(dim=0) & attention_mask.bool().all(dim=0)
    return int(same.long().cumprod(0).sum().item()) if same.numel() else 0


def prefix_shared_loss(model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> Any:
    """Causal-LM loss that runs the batch's shared prefix (system prompt, tools) once, not once per row.

    The prefix's key/value cache is computed for one row and repeated over the batch; gradients flow back
    through it, so loss and gradients equal the plain forward's while the prefix costs 1/B of the compute. The
    output layer runs only where a label is (the policy's own tokens), not over prompt or tool tokens.
    """
    import torch

    ids, labels = inputs["input_ids"], inputs["labels"]
    attention = inputs.get("attention_mask")
    attention = torch.ones_like(ids) if attention is None else attention
    shared = min(shared_prefix_length(ids, attention), ids.size(1) - 1)
    body, head = _body_and_head(model)
    if shared < 2:
        hidden = body(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1]
        targets = labels[:, 1:]
    else:
        prefix = body(input_ids=ids[:1, :shared], use_cache=True)
        cache = output_cache(prefix)
        cache.batch_repeat_interleave(ids.size(0))
        rest = body(input_ids=ids[:, shared:], attention_mask=attention,
                    **{cache_kwarg(body): cache}).last_hidden_state
        hidden = torch.cat([prefix.last_hidden_state[:, -1:].expand(ids.size(0), -1, -1), rest[:, :-1]], dim=1)
        targets = labels[:, shared:]
    keep = targets != -100
    logits = head(hidden[keep]).float()
    total = torch.nn.functional.cross_entropy(logits, targets[keep], reduction="sum")
    count = num_items_in_batch if num_items_in_batch is not None else keep.sum()
    return total / count


def _body_and_head(model: Any) -> tuple[Any, Any]:
    """The transformer body (returns hidden states and a cache) and the output layer of a causal LM."""
    body = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings()
    if body is None or head is None:
        raise ValueError(f"{type(model).__name__}: the warm start needs a causal LM with a decoder and an output "
                         "layer (get_decoder(), get_output_embeddings())")
    return body, head


class SFTRun:
    """A resumable SFT loop over fixed rows: seeded epoch order, AdamW, constant lr after a linear warm-up,
    gradients clipped to norm 1.

    ``snapshot()``/``restore()`` keep the weights, optimizer and data position, so a control arm can continue
    exactly where the warm start stopped.
    """

    def __init__(self, model: Any, rows: list[Row], *, lr: float, batch_size: int, pad_id: int, seed: int = 0,
                 warmup_steps: int = 20) -> None:
        import torch

        if not rows:
            raise ValueError("algorithm.warm_start: no demonstrations to train on (the expert solved none)")
        self.model, self.rows, self.batch_size, self.pad_id = model, rows, min(batch_size, len(rows)), pad_id
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / (warmup_steps + 1)))
        self.generator = torch.Generator().manual_seed(seed)
        self.order: list[int] = []
        self.step = 0
        self.loss = math.nan

    @property
    def steps_per_epoch(self) -> int:
        return max(1, len(self.rows) // self.batch_size)

    def _batch(self) -> dict[str, Any]:
        import torch

        if len(self.order) < self.batch_size:
            self.order = torch.randperm(len(self.rows), generator=self.generator).tolist()
        picked, self.order = self.order[:self.batch_size], self.order[self.batch_size:]
        rows = [self.rows[i] for i in picked]
        width = max(len(r["input_ids"]) for r in rows)
        pad = [width - len(r["input_ids"]) for r in rows]
        return {"input_ids": torch.tensor([r["input_ids"] + [self.pad_id] * p for r, p in zip(rows, pad, strict=True)]),
                "labels": torch.tensor([r["labels"] + [-100] * p for r, p in zip(rows, pad, strict=True)]),
                "attention_mask": torch.tensor([[1] * len(r["input_ids"]) + [0] * p
                                                for r, p in zip(rows, pad, strict=True)])}

    def train_step(self) -> float:
        """One optimizer step on the next batch; returns its loss."""
        import torch

        self.model.train()
        device = next(self.model.parameters()).device
        loss = prefix_shared_loss(self.model, {k: v.to(device) for k, v in self._batch().items()})
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.loss = float(loss.item())
        return self.loss

    def snapshot(self) -> dict[str, Any]:
        return {"model": copy.deepcopy(self.model.state_dict()),
                "optimizer": copy.deepcopy(self.optimizer.state_dict()),
                "scheduler": self.scheduler.state_dict(), "generator": self.generator.get_state(),
                "order": list(self.order), "step": self.step}

    def restore(self, snap: dict[str, Any]) -> None:
        self.model.load_state_dict(snap["model"])
        self.optimizer.load_state_dict(snap["optimizer"])
        self.scheduler.load_state_dict(snap["scheduler"])
        self.generator.set_state(snap["generator"])
        self.order, self.step = list(snap["order"]), snap["step"]


@dataclass
class WarmStartResult:
    """What the warm start did: steps, time, last loss, every dev check, and why it stopped."""

    demonstrations: int
    target: float | None = None
    steps: int = 0
    seconds: float = 0.0
    loss: float = math.nan
    stopped: str = ""                  # target | max_steps | max_minutes
    dev: list[dict[str, Any]] = field(default_factory=list)   # {"step", "seconds", "success"[, "groups"]}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Progress = Callable[[int, int, float, float | None], None]   # (step, max_steps, loss, last dev success)


def max_steps(ws: WarmStartSpec, demos: int) -> int:
    """The warm start's step cap: ``max_steps`` if set, else ``epochs`` passes over the demonstrations."""
    return ws.max_steps or max(1, demos // min(ws.batch_size, max(1, demos))) * ws.epochs


def reached(ws: WarmStartSpec, check: EvalResult) -> bool:
    """Whether a dev check meets the stop rule: ``target`` overall and ``group_floor`` in every task group."""
    if ws.target is None or check.mean < ws.target:
        return False
    return ws.group_floor is None or all(v >= ws.group_floor for v in check.by_group().values())


def warm_start(run: SFTRun, ws: WarmStartSpec, *, dev: Callable[[], EvalResult] | None = None,
               on_progress: Progress | None = None) -> WarmStartResult:
    """Train until dev success reaches ``ws.target`` (checked every ``ws.dev_every`` steps), or a step/time cap."""
    result = WarmStartResult(demonstrations=len(run.rows), target=ws.target)
    cap = max_steps(ws, len(run.rows))
    started = time.perf_counter()
    last_dev: float | None = None
    done = False
    checked = 0
    while True:
        run.train_step()
        elapsed = time.perf_counter() - started
        # learning is sudden: once dev success passes a quarter of the target, check five times as often
        near = last_dev is not None and ws.target is not None and last_dev >= ws.target / 4
        every = max(1, ws.dev_every // 5) if near else ws.dev_every
        if dev is not None and ws.target is not None and (run.step - checked >= every or run.step >= cap):
            checked = run.step
            check = dev()
            last_dev, done = check.mean, reached(ws, check)
            elapsed = time.perf_counter() - started
            entry: dict[str, Any] = {"step": run.step, "seconds": round(elapsed, 2), "success": last_dev}
            if groups := check.by_group():
                entry["groups"] = groups
            result.dev.append(entry)
        if on_progress is not None:
            on_progress(run.step, cap, run.loss, last_dev)
        if done:
            result.stopped = "target"
        elif run.step >= cap:
            result.stopped = "max_steps"
        elif ws.max_minutes is not None and elapsed > ws.max_minutes * 60:
            result.stopped = "max_minutes"
        if result.stopped:
            break
    result.steps, result.seconds, result.loss = run.step, time.perf_counter() - started, run.loss
    return result


def continue_sft(run: SFTRun, seconds: float, on_progress: Callable[[int, float], None] | None = None) -> int:
    """More SFT for ``seconds`` of wall time (the control arm); returns the steps taken."""
    started, taken = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        run.train_step()
        taken += 1
        if on_progress is not None:
            on_progress(taken, run.loss)
    return taken


def dev_tasks(agent: Agent, size: int) -> list[Task]:
    """The dev split (``data.dev``) used to decide when the warm start has learned enough."""
    return agent.tasks("dev", size=size)

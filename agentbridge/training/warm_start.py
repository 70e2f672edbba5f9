"""The warm start: SFT on the environment's scripted demonstrations, stopped on dev success, not a step count.

Demonstrations are driver trajectories of the scripted expert, so the SFT rows have exactly the tokens and masks RL
will see: loss on the policy's own tokens (``response_mask == 1``), none on the prompt or tool output. The loop is
plain torch (any backend's environment has it): AdamW, constant learning rate after a short warm-up, and a loss
that computes the batch's shared prompt prefix (system prompt, tool schemas) once per batch.

Episodes that saw images (a vision-language policy's screenshots) keep them: each row carries its images in
placeholder order, and the loss runs the model's vision tower on their pixels, as generation did.
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
from agentbridge.spec.schema import WarmStartSpec
from agentbridge.training.evaluate import EvalResult
from agentbridge.trajectory import Trajectory

Row = dict[str, Any]   # input_ids, labels (lists of ints) and, for episodes with images, images (uint8 HxWx3 tensors)


def demonstrations(agent: Agent, n: int, split: str = "train") -> list[Trajectory]:
    """``n`` scripted-expert episodes on ``split`` tasks; only solved, self-terminated ones are kept.

    An environment without a scripted expert is refused (ValueError, one line) before any task is built.
    """
    expert = ScriptedPolicy.expert_factory(agent)
    tasks = agent.tasks(split, size=n)
    trajs = asyncio.run(agent.run(tasks, expert))
    return [t for t in trajs if t.finish_reason == "done" and t.reward > 0]


def sft_rows(trajs: list[Trajectory]) -> list[Row]:
    """Pre-tokenized SFT rows: ``input_ids`` and ``labels`` (-100 outside the policy's own tokens), plus ``images``
    (uint8 tensors, in placeholder order) when the episode saw any."""
    rows: list[Row] = []
    for t in trajs:
        row: Row = {"input_ids": t.prompt_ids + t.response_ids,
                    "labels": [-100] * len(t.prompt_ids) + [i if m else -100 for i, m in
                                                            zip(t.response_ids, t.response_mask, strict=True)]}
        if t.images:
            row["images"] = [image_tensor(im) for im in t.images]
        rows.append(row)
    return rows


def image_tensor(image: Any) -> Any:
    """An image as a uint8 ``(height, width, 3)`` tensor: rows stay loadable with ``torch.load(weights_only=True)``."""
    import numpy as np
    import torch

    return torch.from_numpy(np.array(image.convert("RGB") if hasattr(image, "convert") else image, dtype=np.uint8))


def vision_inputs(rows: list[Row], image_processor: Any, image_token_id: int) -> dict[str, Any]:
    """The image processor's ``pixel_values`` / ``image_grid_thw`` for every image of ``rows``, row after row;
    each row's placeholder count must equal its images' visual tokens (ValueError, one line, if not)."""
    from PIL import Image

    images = [im for r in rows for im in r.get("images", [])]
    if not images:
        return {}
    out = dict(image_processor(images=[Image.fromarray(im.numpy()) for im in images], return_tensors="pt"))
    grid = out.get("image_grid_thw")
    if grid is not None:
        merge = int(getattr(image_processor, "merge_size", 1) or 1) ** 2
        tokens, start = (grid.prod(-1) // merge).tolist(), 0
        for r in rows:
            n = len(r.get("images", []))
            want, got = sum(tokens[start:start + n]), r["input_ids"].count(image_token_id)
            if want != got:
                raise ValueError(f"algorithm.warm_start: a demonstration has {got} image tokens but its {n} images "
                                 f"need {want}; its ids and images do not belong together")
            start += n
    return out


def attended_prefix_length(input_ids: Any, attention_mask: Any) -> int:
    """How many leading tokens every row of the batch shares (and attends to)."""
    same = (input_ids == input_ids[:1]).all(dim=0) & attention_mask.bool().all(dim=0)
    return int(same.long().cumprod(0).sum().item()) if same.numel() else 0


def prefix_shared_loss(model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> Any:
    """Causal-LM loss that runs the batch's shared prefix (system prompt, tools) once, not once per row.

    The prefix's key/value cache is computed for one row and repeated over the batch; gradients flow back
    through it, so loss and gradients equal the plain forward's while the prefix costs 1/B of the compute. The
    output layer runs only where a label is (the policy's own tokens), not over prompt or tool tokens. A batch with
    ``pixel_values`` (and ``image_grid_thw``) runs the model's full multimodal forward instead, so the visual tokens
    carry the images' features.
    """
    import torch

    ids, labels = inputs["input_ids"], inputs["labels"]
    attention = inputs.get("attention_mask")
    attention = torch.ones_like(ids) if attention is None else attention
    shared = min(attended_prefix_length(ids, attention), ids.size(1) - 1)
    body, head = _body_and_head(model)
    if inputs.get("pixel_values") is not None:   # a VLM's rows with images: the whole multimodal forward, pixels in
        vision = {k: inputs[k] for k in ("pixel_values", "image_grid_thw") if inputs.get(k) is not None}
        image_token = getattr(model.config, "image_token_id", None)
        if image_token is not None:
            vision["mm_token_type_ids"] = (ids == image_token).int()
        hidden = model.base_model(input_ids=ids, attention_mask=attention, **vision).last_hidden_state[:, :-1]
        targets = labels[:, 1:]
    elif shared < 2:
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


def _vision_of(model: Any, image_processor: Any) -> tuple[Any, int]:
    """The image processor (given, else the one saved with the model) and image placeholder id for image rows."""
    from agentbridge.models import load_image_processor

    token = getattr(model.config, "image_token_id", None)
    if getattr(model.config, "vision_config", None) is None or token is None:
        raise ValueError(f"algorithm.warm_start: the demonstrations have images but {type(model).__name__} is not a "
                         "vision-language model; use a VLM (e.g. builtin:tiny-vl) or a text observation")
    name = getattr(model.config, "name_or_path", "") or getattr(model, "name_or_path", "")
    processor = image_processor if image_processor is not None else (load_image_processor(name) if name else None)
    if processor is None:
        raise ValueError(f"algorithm.warm_start: no image processor for the demonstrations' images (none saved with "
                         f"{name or 'the model'})")
    return processor, int(token)


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
                 warmup_steps: int = 20, image_processor: Any = None) -> None:
        import torch

        if not rows:
            raise ValueError("algorithm.warm_start: no demonstrations to train on (the expert solved none)")
        self.model, self.rows, self.batch_size, self.pad_id = model, rows, min(batch_size, len(rows)), pad_id
        self.image_processor, self.image_token_id = None, None
        if any(r.get("images") for r in rows):
            self.image_processor, self.image_token_id = _vision_of(model, image_processor)
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
        padded = list(zip(rows, pad, strict=True))
        batch = {"input_ids": torch.tensor([r["input_ids"] + [self.pad_id] * p for r, p in padded]),
                 "labels": torch.tensor([r["labels"] + [-100] * p for r, p in padded]),
                 "attention_mask": torch.tensor([[1] * len(r["input_ids"]) + [0] * p for r, p in padded])}
        if self.image_processor is not None and self.image_token_id is not None:
            batch.update(vision_inputs(rows, self.image_processor, self.image_token_id))
        return batch

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


def continue_sft(run: SFTRun, seconds: float, on_progress: Callable[[int, float], None] | None = None,
                 steps: int | None = None) -> int:
    """More SFT (the control arm): ``steps`` steps when given, else for ``seconds`` of wall time; returns the steps
    taken."""
    started, taken = time.perf_counter(), 0

    def more() -> bool:
        return taken < steps if steps is not None else time.perf_counter() - started < seconds

    while more():
        run.train_step()
        taken += 1
        if on_progress is not None:
            on_progress(taken, run.loss)
    return taken


def dev_tasks(agent: Agent, size: int) -> list[Task]:
    """The dev split (``data.dev``) used to decide when the warm start has learned enough."""
    return agent.tasks("dev", size=size)

"""One optimizer step: from the same weights and the same batch, the parameter update each backend's own update code
makes, against agentbridge's reference step.

The step batch is the golden batch (:func:`~agentbridge.conformance.algorithms.golden_batch`) as tokens: twelve
rows of a 4-token prompt and an 8-token response (the golden masks: different lengths, an environment gap, a
truncated row) on the golden spec's tiny model. Its old log-probs are the model's own log-probs minus the golden
batch's ratio offsets (ratios inside and outside the clip range), its reference log-probs are offset likewise, its
advantages are the reference GRPO advantages of the golden rewards, and KL is on (``KL_COEF``), so the step checks
the update code alone: forward, policy loss, KL loss, backward, gradient clipping, optimizer.

The reference step: float32 forward, :func:`~agentbridge.conformance.algorithms.policy_loss` (``grpo``), backward,
gradient norm clipped to 1, ``torch.optim.AdamW(lr=LR, betas=(0.9, 0.999), eps=1e-8,
weight_decay=0)``. A backend's probe (the module its ``step_probe`` names: ``step(job_dir, init, batch)``) runs its
own code, in its own environment, configured by the job directory ``compile`` wrote, and returns each parameter's
gradient (after clipping) and update, or says which call stops it from running on CPU.

Quantities: ``loss`` (|Δ| of the loss the backend computed), ``grad`` (max |Δ| over every clipped gradient entry,
relative to the reference's largest) and ``update`` (max |Δ| between each parameter's change and the reference
optimizer's step on the backend's own gradients, in units of the learning rate, beyond float32 rounding of the
weights: Adam's first step is ``lr x g / (|g| + eps)``, so comparing updates of two backends directly mostly
measures the sign of gradients near 0; on its own gradients the optimizer's configuration — learning rate, weight
decay, betas, eps — is what differs).

A difference in the loss math the backend's adapter documents for ``grpo`` with KL on (its ``DIFFERENCES``, see
:func:`~agentbridge.conformance.algorithms.documented`: ``loss`` or ``kl``) explains ``loss`` and ``grad``: the
step is then ≠ (documented) there, and ✘ when it is identical after all (the documentation is stale).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbridge.conformance.algorithms import (
    CLOSE,
    IDENTICAL,
    KL_COEF,
    documented,
    golden_batch,
    policy_loss,
    probe_module,
)

ALGORITHM = "grpo"
PROMPT = 4
STEP_QUANTITIES = ("loss", "grad", "update")
LOSS_MATH = ("loss", "kl")  # documented algorithm differences that change a step's loss and gradient
MAX_GRAD_NORM = 1.0
LR = 1e-3  # large enough that weight decay (lr x wd x w) is not lost to float32 rounding of the weights
BATCH_FILE = "step_batch.pt"


def step_spec(backend: str, sets: list[str] | None = None) -> Any:
    """The golden text spec set up for one step: grpo, three groups of four (one optimizer step over the batch),
    KL on, learning rate ``LR``; then ``sets`` (``--set`` overrides)."""
    from agentbridge.conformance.suite import golden_spec

    return golden_spec("text", [f"backend.name={backend}", f"algorithm.name={ALGORITHM}", "algorithm.group_size=4",
                                "algorithm.batch_size=3", f"algorithm.kl_coef={KL_COEF}", f"algorithm.lr={LR}",
                                *(sets or [])])


def response_logp(model: Any, input_ids: Any, attention_mask: Any, width: int) -> Any:
    """Per-token log-probs of the last ``width`` tokens of each row under ``model`` (float32, with grad)."""
    import torch

    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -width - 1:-1, :].float()
    return torch.log_softmax(logits, -1).gather(-1, input_ids[:, -width:].unsqueeze(-1)).squeeze(-1)


def step_batch(init: str) -> dict[str, Any]:
    """The step batch for the model in ``init`` (see the module docstring); float32 tensors."""
    import torch
    from transformers import AutoModelForCausalLM

    from agentbridge.conformance.algorithms import reference_advantages

    golden = golden_batch()
    g = golden.tensors()
    n, width = g["mask"].shape
    prompt = torch.tensor([[(17 + 31 * i + 7 * k) % 5000 + 100 for k in range(PROMPT)] for i in range(n)])
    response = torch.tensor([[(53 + 11 * i + 29 * k) % 5000 + 100 for k in range(width)] for i in range(n)])
    lengths = torch.tensor(golden.lengths())
    response_attention = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()
    input_ids = torch.cat([prompt, response * response_attention], 1)
    attention_mask = torch.cat([torch.ones(n, PROMPT, dtype=torch.long), response_attention], 1)
    model = AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32)
    with torch.no_grad():
        logp = response_logp(model, input_ids, attention_mask, width) * g["mask"]
    m = g["mask"].float()
    old_logp = (logp - (g["logp"] - g["old_logp"])) * m  # ratio exp(logp - old) as in the golden batch
    ref_logp = (old_logp - (g["old_logp"] - g["ref_logp"])) * m
    adv = reference_advantages(ALGORITHM, golden.tensors(dtype=torch.float64), KL_COEF).float()
    return {"input_ids": input_ids, "attention_mask": attention_mask, "response_mask": g["mask"],
            "old_logp": old_logp, "ref_logp": ref_logp, "advantages": adv, "lengths": lengths,
            "max_response_tokens": torch.tensor(golden.max_response_tokens)}


def reference_step(init: str, batch: dict[str, Any], lr: float) -> dict[str, Any]:
    """agentbridge's reference step on ``batch`` from the weights in ``init``."""

    def loss_of(model: Any) -> Any:
        width = batch["response_mask"].shape[1]
        logp = response_logp(model, batch["input_ids"], batch["attention_mask"], width)
        loss, kl, _ = policy_loss(ALGORITHM, logp, batch["old_logp"], batch["ref_logp"], batch["advantages"],
                                  batch["response_mask"].float(), KL_COEF, int(batch["max_response_tokens"]))
        return loss + kl

    return train_step(init, loss_of, lambda model: adamw(list(model.parameters()), lr))


def train_step(init: str, loss_of: Callable[[Any], Any], optimizer_of: Callable[[Any], Any],
               max_norm: float = MAX_GRAD_NORM) -> dict[str, Any]:
    """One step on the model in ``init`` (float32, train mode): ``loss_of(model)``'s backward, then
    :func:`optimizer_step` with ``optimizer_of(model)`` and gradients clipped to ``max_norm``; the loss, gradients
    and updates (what a step probe returns)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32)
    model.train()
    loss = loss_of(model)
    loss.backward()
    return optimizer_step(model, optimizer_of(model), float(loss.detach()), max_norm)


def optimizer_step(model: Any, optimizer: Any, loss: float, max_norm: float = MAX_GRAD_NORM) -> dict[str, Any]:
    """Clip the gradients of ``model`` to ``max_norm``, step ``optimizer``; the loss, gradients and updates."""
    import torch

    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    optimizer.step()
    return {"loss": loss, "grad": grads, "before": before,
            "update": {k: p.detach() - before[k] for k, p in model.named_parameters()}}


def hf_names(tensors: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Parameter names without a wrapper's ``prefix`` (e.g. ``model.`` of a module holding the HF model)."""
    return {k[len(prefix):] if prefix and k.startswith(prefix) else k: v for k, v in tensors.items()}


# ---------------------------------------------------------------------------------------------- comparison


@dataclass
class StepCell:
    """One backend's step against the reference: ✔ identical, ≈ within tolerance, ≠ a documented difference, ✘
    with the quantities, or ``stopped`` (the call that keeps its update code off the CPU)."""

    backend: str
    status: str = "✔"
    deltas: dict[str, float] = field(default_factory=dict)
    stopped: str = ""
    known: dict[str, str] = field(default_factory=dict)  # step quantity -> the documented difference explaining it

    def worst(self) -> list[str]:
        """The quantities beyond tolerance."""
        return [q for q, d in self.deltas.items() if d > CLOSE]

    def differing(self) -> list[str]:
        """The quantities beyond tolerance, and documented ones that are not identical."""
        return [q for q, d in self.deltas.items() if d > CLOSE or (q in self.known and d > IDENTICAL)]

    def unexpected(self) -> list[str]:
        """Quantities that differ without a documented reason, then documented ones that are identical."""
        differing = self.differing()
        return [q for q in differing if q not in self.known] + \
            [f"{q} (documented, yet equal)" for q in self.known if q in self.deltas and q not in differing]


def step_deltas(want: dict[str, Any], got: dict[str, Any], lr: float) -> dict[str, float]:
    """``loss``: |Δ|; ``grad``: max |Δ| relative to the reference's largest entry; ``update``: max |Δ| / lr. A
    parameter missing on either side counts as infinite."""
    out = {"loss": abs(float(want["loss"]) - float(got["loss"])) if got.get("loss") is not None else math.inf}
    if set(want["grad"]) != set(got["grad"]) or set(got["grad"]) != set(got["update"]):
        return {**out, "grad": math.inf, "update": math.inf}
    scale = max(float(g.abs().max()) for g in want["grad"].values())
    out["grad"] = max(float((want["grad"][k] - got["grad"][k].float()).abs().max()) for k in want["grad"]) / scale
    own = reference_update(got["grad"], lr)  # the reference optimizer on the backend's own gradients
    if set(own) != set(want["before"]):
        return {**out, "update": math.inf}
    out["update"] = max(float(_beyond_rounding(own[k] - got["update"][k].float(), want["before"][k]).max())
                        for k in own) / lr
    return out


def _beyond_rounding(delta: Any, weights: Any) -> Any:
    """|delta| less what float32 rounding of ``weights + update`` can account for (two ulps of each weight)."""
    import torch

    return (delta.abs() - 2 * torch.finfo(torch.float32).eps * weights.abs()).clamp(min=0)


def reference_update(grads: dict[str, Any], lr: float) -> dict[str, Any]:
    """The reference optimizer's first step on ``grads`` (already clipped): the update of each parameter."""
    import torch

    params = {k: torch.zeros_like(g, dtype=torch.float32, requires_grad=True) for k, g in grads.items()}
    for k, p in params.items():
        p.grad = grads[k].float().clone()
    adamw(list(params.values()), lr).step()
    return {k: p.detach() for k, p in params.items()}


def adamw(params: list[Any], lr: float) -> Any:
    """The reference optimizer: ``AdamW(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)``."""
    import torch

    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


def step_known(backend: Any) -> dict[str, str]:
    """The step quantities a backend's documented differences for ``grpo`` with KL on explain (``loss`` and
    ``grad``, when the loss math differs), each with the documented reason."""
    why = "; ".join(f"{q}: {w}" for q, w in documented(backend, ALGORITHM, KL_COEF).items() if q in LOSS_MATH)
    return {"loss": why, "grad": why} if why else {}


def compare_step(backend: str, want: dict[str, Any], got: dict[str, Any], lr: float,
                 known: dict[str, str] | None = None) -> StepCell:
    """A backend's step (its probe's output, or ``{"stopped": call}``) against the reference step; ``known``:
    the quantities a documented difference explains (:func:`step_known`)."""
    if "stopped" in got:
        return StepCell(backend, "stopped", stopped=str(got["stopped"]))
    cell = StepCell(backend, deltas=step_deltas(want, got, lr), known=dict(known or {}))
    worst = max(cell.deltas.values(), default=0.0)
    cell.status = "✘" if cell.unexpected() else "≠" if cell.differing() else "≈" if worst > IDENTICAL else "✔"
    return cell


def step_lines(cells: list[StepCell]) -> list[str]:
    """One line per backend: its status and max |Δ| per quantity (and a documented difference's reason), or the
    call that stops it."""
    lines = []
    for c in cells:
        if c.status == "stopped":
            lines.append(f"step {ALGORITHM} {c.backend}: not run on CPU: {c.stopped}")
        else:
            deltas = ", ".join(f"{q} max|Δ|={d:.3g}" for q, d in c.deltas.items())
            why = dict.fromkeys(c.known[q] for q in c.differing() if q in c.known)
            lines.append(f"step {ALGORITHM} {c.backend} {c.status} {deltas}"
                         + "".join(f" (documented: {w})" for w in why))
    return lines


def step_table(cells: list[StepCell]) -> str:
    """The one-step table as plain text: backend, result (✔, ≈, ≠ or ✘ with the quantities, or not run) and
    max |Δ| of loss, grad and update."""
    rows = [["step " + ALGORITHM, "result", *STEP_QUANTITIES]]
    for c in cells:
        if c.status == "stopped":
            rows.append([c.backend, "not run on CPU", *[""] * len(STEP_QUANTITIES)])
            continue
        result = {"✘": "✘ " + ",".join(c.unexpected()), "≠": "≠ " + ",".join(c.differing())}.get(c.status, c.status)
        rows.append([c.backend, result, *[f"{c.deltas[q]:.2g}" if q in c.deltas else "" for q in STEP_QUANTITIES]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip() for r in rows)


# ---------------------------------------------------------------------------------------------- running probes


def probe_step(backend_name: str, workdir: Path, sets: list[str] | None = None) -> dict[str, Any]:
    """Compile the step spec for ``backend_name`` into ``workdir`` and run the backend's step probe on the batch
    in ``workdir``; runs here."""
    import torch

    from agentbridge.conformance.suite import _backend
    from agentbridge.models import resolve_model_path

    backend = _backend(backend_name)
    spec = step_spec(backend_name, sets)
    job = backend.compile(spec, Path(workdir) / backend_name).path
    module = probe_module(backend, "step")
    batch = torch.load(Path(workdir) / BATCH_FILE)
    return module.step(job, str(resolve_model_path(spec.model.path)), batch)


def run_step(backend_name: str, workdir: Path | None = None, sets: list[str] | None = None) -> StepCell:
    """The reference step and one backend's step on the same weights and batch: in this interpreter when the
    backend's package imports here, else in its own environment (``python -m agentbridge.conformance.step``)."""
    import torch

    from agentbridge.backends import backend_python
    from agentbridge.conformance.suite import ConformanceError, _backend
    from agentbridge.models import resolve_model_path

    backend = _backend(backend_name)
    module = getattr(backend, "module", backend_name)
    probe = getattr(backend, "step_probe", None) or f"{type(backend).__module__.split('.')[0]}.step_probe"
    if importlib.util.find_spec(probe) is None:  # the adapter is installed here even when its backend is not
        return StepCell(backend_name, "stopped", stopped=f"its adapter has no step probe ({probe})")
    spec = step_spec(backend_name, sets)
    init = str(resolve_model_path(spec.model.path))
    with tempfile.TemporaryDirectory(prefix=f"step-{backend_name}-") as tmp:
        work = Path(workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        batch = step_batch(init)
        torch.save(batch, work / BATCH_FILE)
        want = reference_step(init, batch, spec.algorithm.lr)
        if importlib.util.find_spec(module) is not None:
            got = probe_step(backend_name, work, sets)
        else:
            python = backend_python(backend_name, module)
            if python is None:
                from agentbridge.backend_envs import no_environment

                raise ConformanceError(f"backend {backend_name}: {no_environment(backend_name, module)}")
            cmd = [python, "-m", "agentbridge.conformance.step", backend_name, "--workdir", str(work),
                   *[f"--set={s}" for s in sets or []]]
            result = subprocess.run(cmd, capture_output=True, text=True)
            out = work / backend_name / "step.pt"
            if result.returncode != 0 or not out.exists():
                tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
                raise ConformanceError(f"backend {backend_name}: the step probe in {python} failed: {tail}")
            got = torch.load(out)
    return compare_step(backend_name, want, got, spec.algorithm.lr, step_known(backend))


def main(argv: list[str] | None = None) -> int:
    """``python -m agentbridge.conformance.step BACKEND --workdir DIR``: the backend's step, saved to
    ``DIR/BACKEND/step.pt``."""
    import torch

    parser = argparse.ArgumentParser(prog="python -m agentbridge.conformance.step")
    parser.add_argument("backend")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    args = parser.parse_args(argv)
    got = probe_step(args.backend, args.workdir, args.sets)
    torch.save(got, args.workdir / args.backend / "step.pt")
    print(json.dumps({"stopped": got["stopped"]} if "stopped" in got else {"loss": got["loss"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

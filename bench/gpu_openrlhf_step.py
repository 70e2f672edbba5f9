"""OpenRLHF's actor update on one device: the compiled job's own loss code (``agentbridge_openrlhf.step_probe``:
OpenRLHF 0.11.2's ``log_probs_from_logits``, ``PolicyLoss`` as ``PolicyModelActor`` builds it, its KL loss, the
job's Adam settings) on micro-batches of the job's shape, timed.

DeepSpeed's engine (ZeRO, its fused Adam) is not run: ``torch.optim.AdamW`` over fp32 master weights with bf16
autocast on a GPU stands in for it, as in the one-step conformance. Prints (and with ``--json`` writes) step time,
tokens/s and peak memory. Used by ``bench/gpu_check.sh``; on CPU with ``--device cpu`` (its dry run).

Usage: python bench/gpu_openrlhf_step.py JOB_DIR MODEL_DIR [--device cuda] [--steps 3] [--micro 4]
       [--length 3072] [--response 512] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path
from typing import Any


def batch(rows: int, length: int, response: int, vocab: int, device: str) -> dict[str, Any]:
    """One micro-batch of random tokens: ``length - response`` prompt tokens then ``response`` response tokens, the
    last quarter of each response masked as environment output, old/ref log-probs near the model's, GRPO-like
    advantages."""
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, length), generator=g)
    mask = torch.ones(rows, response)
    mask[:, response // 2: response // 2 + response // 4] = 0
    logp = -torch.rand(rows, response, generator=g) * 3
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device),
            "response_mask": mask.to(device), "old_logp": logp.to(device), "ref_logp": (logp - 0.01).to(device),
            "advantages": torch.randn(rows, 1, generator=g).expand(rows, response).contiguous().to(device)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job")
    parser.add_argument("model")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps (the first is warm-up)")
    parser.add_argument("--micro", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--length", type=int, default=0, help="tokens per row (default: the job's data.max_len)")
    parser.add_argument("--response", type=int, default=0, help="response tokens (default: rollout.max_new_tokens)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from agentbridge_openrlhf.step_probe import actor_loss, actor_optimizer, job_args

    job = job_args(Path(args.job))
    length = args.length or int(job.data.max_len)
    response = args.response or int(job.rollout.max_new_tokens)
    rows = int(job.train.micro_batch_size)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(args.device)
    model.train()
    optimizer = actor_optimizer(model, job)
    cuda = args.device.startswith("cuda")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()
    data = batch(rows, length, response, model.config.vocab_size, args.device)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        for _ in range(args.micro):
            with autocast:
                loss = actor_loss(job, model, data) / args.micro
            loss.backward()
            losses.append(float(loss.detach()) * args.micro)
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(job.actor.max_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    step_s = statistics.median(times[1:] or times)
    tokens = rows * length * args.micro
    figures = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "rows_per_micro_batch": rows,
               "micro_batches_per_step": args.micro, "tokens_per_row": length, "response_tokens": response,
               "parameters_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
               "first_step_s": round(times[0], 3), "median_step_s": round(step_s, 3),
               "tokens_per_s": round(tokens / step_s, 1),
               "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
               "losses_finite": all(x == x and abs(x) != float("inf") for x in losses)}
    print(f"OpenRLHF actor update: {figures['parameters_m']}M parameters, {args.micro} x {rows} row(s) of {length} "
          f"tokens ({response} response) per step on {figures['device']}")
    print(f"  step time {step_s:.3f} s (first {times[0]:.3f} s) · {figures['tokens_per_s']:.0f} tokens/s · peak "
          f"memory {figures['peak_memory_gb']} GB · losses finite: {figures['losses_finite']}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["losses_finite"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

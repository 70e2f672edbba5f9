"""GRPO step time on the calculator task: a hand-written TRL ``rollout_func`` (A) vs. the agentbridge job (B).

Both arms train ``examples/calculator.yaml``'s task with TRL 1.16's ``GRPOTrainer`` on CPU, from the same
warm-started ``builtin:tiny`` weights, with the same ``GRPOConfig`` (``grpo_config_kwargs`` of the spec), the same
seed per repeat and the same training problems in the same order:

* A (baseline) is what a researcher writes by hand without agentbridge: apply_chat_template with the calculator
  tool, batched ``model.generate`` over the still-running episodes each turn, ``<tool_call>`` JSON parsed with a
  regex, ``agentbridge_math.calculator.evaluate`` as the tool, the tool response appended as the template's
  continuation tokens (masked out with ``env_mask``), and an exact-answer reward.
* B is ``agentbridge_trl.trainer.build_trainer``: agentbridge's driver inside the ``rollout_func``, the spec's
  reward components as reward functions, and the job's per-step logging (metrics.jsonl / episodes.jsonl).

Runs alternate A,B / B,A (repeat r starts with A when r is even) so machine noise hits both arms. The first
step of every run is dropped (one-time warm-up); the table reports the median step time of the rest, the
ratio B/A, and tokens per step so the reader can see the work was comparable.

    python bench/trl_step_time.py [--steps 5] [--repeats 3] [--threads 1] [--quick]

The warm start (plain-torch SFT on the environment's scripted demonstrations, with ``agentbridge.training.warm_start``'s
demonstrations and prefix-shared loss) runs once and is cached in ``--workdir`` (default ``$AGENTBRIDGE_CACHE/bench``
or ``~/.cache/agentbridge/bench``). Both arms run with ``--threads`` torch threads (default 1: on a shared 2-core
machine two OpenMP threads contend with other jobs and run several times slower and noisier).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402

from agentbridge_math.calculator import evaluate  # noqa: E402

SPEC_PATH = Path(__file__).resolve().parent.parent / "examples" / "calculator.yaml"


# ----------------------------------------------------------------------------------------------------------------
# A: the hand-written baseline (no agentbridge inside the rollout)
# ----------------------------------------------------------------------------------------------------------------
def calculator(expression: str) -> str:
    return evaluate(expression)


CALCULATOR_SCHEMA = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {
        "expression": {"type": "string", "description": 'The expression to compute, e.g. "(15 + 27) * 3".'}},
        "required": ["expression"]}}}


TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def run_tool_calls(text: str) -> list[dict[str, str]]:
    """Tool messages for every ``<tool_call>`` in ``text``; errors go back to the model as text."""
    messages = []
    for raw in TOOL_CALL.findall(text):
        try:
            call = json.loads(raw)
            if call.get("name") != "calculator":
                raise ValueError(f"unknown tool {call.get('name')!r}")
            content = calculator(**call.get("arguments", {}))
        except Exception as e:  # noqa: BLE001 - the model sees the error and may retry
            content = f"Error: {type(e).__name__}: {e}"
        messages.append({"role": "tool", "name": "calculator", "content": content})
    return messages


def tool_suffix_ids(tok: Any, tool_messages: list[dict[str, str]]) -> list[int]:
    """Ids the chat template puts after an assistant turn's EOS: the tool responses and the next header."""
    head = [{"role": "user", "content": "x"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {}}}]}]
    prefix = tok.apply_chat_template(head, tokenize=True, return_dict=False)
    full = tok.apply_chat_template(head + tool_messages, tokenize=True, return_dict=False, add_generation_prompt=True)
    cut = len(prefix) - prefix[::-1].index(tok.eos_token_id)
    assert full[:cut] == prefix[:cut], "the chat template is not prefix-preserving"
    return full[cut:]


def sample(model: Any, tok: Any, seqs: list[list[int]], max_new: int, args: Any) -> tuple[list[list[int]],
                                                                                        list[list[float]]]:
    """One batched ``generate`` call (left padding); returns new ids and their log-probs per row."""
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    width = max(len(s) for s in seqs)
    ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=True,
                         temperature=args.temperature, top_p=args.top_p, top_k=args.top_k or None,
                         eos_token_id=tok.eos_token_id, pad_token_id=pad, output_logits=True,
                         return_dict_in_generate=True)
    new = out.sequences[:, width:]
    logits = torch.stack(out.logits, dim=1).float() / args.temperature
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    return new.tolist(), logprobs.tolist()


class HandWrittenRollout:
    """``rollout_func(prompts, trainer)``: multi-turn calculator episodes, batched across the episodes."""

    def __init__(self, tok: Any, answers: dict[str, str], max_turns: int, per_turn: int, budget: int) -> None:
        self.tok, self.answers = tok, answers
        self.max_turns, self.per_turn, self.budget = max_turns, per_turn, budget
        self.last: dict[str, Any] = {}

    def __call__(self, prompts: list[list[dict[str, str]]], trainer: Any) -> dict[str, Any]:
        tok, eos = self.tok, self.tok.eos_token_id
        model = trainer.accelerator.unwrap_model(trainer.model)
        n = len(prompts)
        prompt_ids = [tok.apply_chat_template(p, tools=[CALCULATOR_SCHEMA], add_generation_prompt=True, tokenize=True,
                                              return_dict=False) for p in prompts]
        comp: list[list[int]] = [[] for _ in range(n)]
        env_mask: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        final_text, turns = [""] * n, [0] * n
        active = list(range(n))
        with torch.no_grad():
            for turn in range(self.max_turns):
                budgets = {i: min(self.per_turn, self.budget - len(comp[i])) for i in active}
                active = [i for i in active if budgets[i] > 0]
                if not active:
                    break
                new, lps = sample(model, tok, [prompt_ids[i] + comp[i] for i in active],
                                  max(budgets[i] for i in active), trainer.args)
                still = []
                for i, ids, lp in zip(active, new, lps, strict=True):
                    cut = min(ids.index(eos) + 1 if eos in ids else len(ids), budgets[i])
                    ids, lp = ids[:cut], lp[:cut]
                    comp[i] += ids
                    env_mask[i] += [1] * len(ids)
                    logprobs[i] += lp
                    turns[i] += 1
                    stopped = bool(ids) and ids[-1] == eos
                    final_text[i] = tok.decode(ids[:-1] if stopped else ids)
                    if not stopped or "<tool_call>" not in final_text[i] or turn == self.max_turns - 1:
                        continue  # truncated, answered, or out of turns: the episode is over
                    suffix = tool_suffix_ids(tok, run_tool_calls(final_text[i]) or
                                             [{"role": "tool", "name": "calculator",
                                               "content": "Error: malformed tool call"}])
                    if len(comp[i]) + len(suffix) >= self.budget:
                        continue
                    comp[i] += suffix
                    env_mask[i] += [0] * len(suffix)
                    logprobs[i] += [0.0] * len(suffix)
                    still.append(i)
                active = still
        rewards = []
        for p, text in zip(prompts, final_text, strict=True):
            found = ANSWER.findall(text)
            try:
                rewards.append(float(bool(found) and abs(float(found[-1].strip()) -
                                                         float(self.answers[p[-1]["content"]])) < 1e-6))
            except ValueError:
                rewards.append(0.0)
        for i in range(n):  # TRL needs at least one completion token
            if not comp[i]:
                comp[i], env_mask[i], logprobs[i] = [eos], [0], [0.0]
        self.last = {"prompt_ids": prompt_ids, "completion_ids": comp, "logprobs": logprobs, "env_mask": env_mask,
                     "exact_answer": rewards, "turns": turns}
        return self.last


def exact_answer_reward(completions: list[Any], exact_answer: list[float], **kwargs: Any) -> list[float]:
    return list(exact_answer)


# ----------------------------------------------------------------------------------------------------------------
# Shared setup, timing, runs
# ----------------------------------------------------------------------------------------------------------------
def warm_checkpoint(spec: Any, workdir: Path, demos: int, steps: int, minutes: float, rebuild: bool) -> Path:
    """SFT ``builtin:tiny`` once on the environment's scripted demonstrations (plain torch, loss on the policy's
    tokens, shared prompt prefix computed once per batch); cached on disk. Both arms start from it."""
    import random

    from transformers import AutoModelForCausalLM

    from agentbridge.models import resolve_model_path
    from agentbridge.rollout.agent import Agent
    from agentbridge.training.warm_start import demonstrations, prefix_shared_loss, sft_rows

    key = hashlib.sha256(f"{spec.model.path}|{demos}|{steps}|{minutes}|{spec.seed}".encode()).hexdigest()[:10]
    out = workdir / f"calculator-warm-{key}"
    if (out / "config.json").is_file() and not rebuild:
        print(f"warm start: cached {out}", flush=True)
        return out
    started = time.perf_counter()
    agent = Agent.from_spec(spec)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(spec.model.path))
    rows = sft_rows(demonstrations(agent, demos))
    rng = random.Random(spec.seed)
    torch.manual_seed(spec.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    done, loss = 0, float("nan")
    while done < steps and time.perf_counter() - started < minutes * 60:
        batch = rng.sample(rows, min(16, len(rows)))
        width = max(len(r["input_ids"]) for r in batch)
        inputs = {"input_ids": torch.tensor([r["input_ids"] + [0] * (width - len(r["input_ids"])) for r in batch]),
                  "labels": torch.tensor([r["labels"] + [-100] * (width - len(r["labels"])) for r in batch]),
                  "attention_mask": torch.tensor([[1] * len(r["input_ids"]) + [0] * (width - len(r["input_ids"]))
                                                  for r in batch])}
        step_loss = prefix_shared_loss(model, inputs)
        step_loss.backward()
        opt.step()
        opt.zero_grad()
        done, loss = done + 1, step_loss.item()
        if done % 25 == 0:
            print(f"  warm start step {done}: loss {loss:.3f} ({time.perf_counter() - started:.0f}s)", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out)
    agent.tokenizer.save_pretrained(out)
    print(f"warm start: {done} SFT steps (batch 16) on {len(rows)} demonstrations, loss {loss:.3f}, "
          f"{time.perf_counter() - started:.0f}s -> {out}", flush=True)
    return out


class StepStats:
    """A TrainerCallback recording each step's wall time and the tokens of that step's rollout."""

    def __init__(self, tokens_of_last_rollout: Any) -> None:
        from transformers import TrainerCallback

        stats = self

        class Callback(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                stats.t0, stats.c0 = time.perf_counter(), time.process_time()

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                stats.rows.append({"step_s": time.perf_counter() - stats.t0, "cpu_s": time.process_time() - stats.c0,
                                   **tokens_of_last_rollout()})

        self.t0 = self.c0 = 0.0
        self.rows: list[dict[str, float]] = []
        self.callback = Callback()


def run_a(ckpt: Path, spec: Any, train_tasks: list[Any], kwargs: dict[str, Any]) -> list[dict[str, float]]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    system = spec.agent.system_prompt
    dataset = Dataset.from_list([{"prompt": [{"role": "system", "content": system},
                                             {"role": "user", "content": t.prompt}]} for t in train_tasks])
    answers = {t.prompt: t.data["answer"] for t in train_tasks}
    a = spec.agent
    rollout = HandWrittenRollout(tok, answers, a.max_turns, a.max_tokens_per_turn, a.max_response_tokens)

    def tokens() -> dict[str, float]:
        out = rollout.last
        return {"completion_tokens": sum(len(c) for c in out["completion_ids"]),
                "generated_tokens": sum(sum(m) for m in out["env_mask"]),
                "prompt_tokens": sum(len(p) for p in out["prompt_ids"]),
                "turns": sum(out["turns"]) / len(out["turns"]), "reward": statistics.mean(out["exact_answer"])}

    stats = StepStats(tokens)
    trainer = GRPOTrainer(model=model, reward_funcs=[exact_answer_reward],
                          args=GRPOConfig(**{**kwargs, "reward_weights": [1.0]}), train_dataset=dataset,
                          processing_class=tok, rollout_func=rollout, callbacks=[stats.callback])
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return stats.rows


def run_b(ckpt: Path, spec: Any, train_tasks: list[Any], kwargs: dict[str, Any],
          run_dir: Path) -> list[dict[str, float]]:
    from transformers import AutoModelForCausalLM, PrinterCallback

    from agentbridge.rollout.agent import Agent
    from agentbridge.training.logger import RunLogger
    from agentbridge_trl.trainer import build_trainer

    spec_b = spec.model_copy(update={"model": spec.model.model_copy(update={"path": str(ckpt)})})
    agent = Agent.from_spec(spec_b)
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    holder: dict[str, Any] = {}

    def tokens() -> dict[str, float]:
        trajs = holder["rollout"].last
        return {"completion_tokens": sum(max(1, len(t.response_ids)) for t in trajs),
                "generated_tokens": sum(sum(t.response_mask) for t in trajs),
                "prompt_tokens": sum(len(t.prompt_ids) for t in trajs),
                "turns": sum(len(t.turns) for t in trajs) / len(trajs),
                "reward": statistics.mean(t.reward_components.get("math/exact_answer", 0.0) for t in trajs)}

    stats = StepStats(tokens)
    trainer, holder["rollout"] = build_trainer(agent, model, kwargs, train_tasks, RunLogger(run_dir, prefix="trl"))
    trainer.add_callback(stats.callback)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return stats.rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="GRPO steps per run (the first is dropped)")
    parser.add_argument("--repeats", type=int, default=3, help="A/B run pairs, alternating which goes first")
    parser.add_argument("--quick", action="store_true", help="smoke test: 2 steps x 1 repeat, 10-step warm start")
    parser.add_argument("--warm-demos", type=int, default=512)
    parser.add_argument("--warm-steps", type=int, default=200, help="SFT steps of the (cached) warm start")
    parser.add_argument("--warm-minutes", type=float, default=5.0, help="time cap of the warm start")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for both arms (1 is fastest and steadiest on a shared 2-core box)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--rebuild", action="store_true", help="redo the warm start even if cached")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw per-step rows here")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.warm_steps = 2, 1, 10
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step of each run is dropped)")

    from transformers.utils import logging as hf_logging

    from agentbridge.models import cache_dir
    from agentbridge.rollout.agent import load_tasks
    from agentbridge.spec import load_spec
    from agentbridge_trl.config import grpo_config_kwargs

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    started = time.perf_counter()
    workdir = args.workdir or cache_dir() / "bench"
    workdir.mkdir(parents=True, exist_ok=True)
    spec = load_spec(str(SPEC_PATH))
    torch.set_num_threads(args.threads)
    ckpt = warm_checkpoint(spec, workdir, args.warm_demos, args.warm_steps, args.warm_minutes, args.rebuild)
    train_tasks = load_tasks(spec, "train")
    rows: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            kwargs = {**grpo_config_kwargs(spec, str(Path(tmp) / "trainer")), "max_steps": args.steps,
                      "seed": spec.seed + r, "data_seed": spec.seed + r, "save_strategy": "no"}  # steps only
            for arm in ("AB" if r % 2 == 0 else "BA"):
                t0 = time.perf_counter()
                got = (run_a(ckpt, spec, train_tasks, kwargs) if arm == "A"
                       else run_b(ckpt, spec, train_tasks, kwargs, Path(tmp) / "run"))
                for i, row in enumerate(got):
                    row.update(repeat=r, step=i + 1)
                rows[arm] += got
                print(f"repeat {r} {arm}: steps " + " ".join(f"{x['step_s']:.2f}" for x in got)
                      + f"  ({time.perf_counter() - t0:.0f}s with setup)", flush=True)

    def summary(arm: str) -> dict[str, float]:
        kept = [x for x in rows[arm] if x["step"] > 1]
        return {"median_step_s": statistics.median(x["step_s"] for x in kept),
                "median_cpu_s": statistics.median(x["cpu_s"] for x in kept),
                **{k: statistics.mean(x[k] for x in kept)
                   for k in ("completion_tokens", "generated_tokens", "prompt_tokens", "turns", "reward")},
                "n": len(kept)}

    def pair_ratio(r: int, key: str) -> float:
        med = {arm: statistics.median(x[key] for x in rows[arm] if x["repeat"] == r and x["step"] > 1)
               for arm in "AB"}
        return med["B"] / med["A"]

    sa, sb = summary("A"), summary("B")
    ratio = sb["median_step_s"] / sa["median_step_s"]
    cpu_ratio = sb["median_cpu_s"] / sa["median_cpu_s"]
    pair_ratios = [pair_ratio(r, "step_s") for r in range(args.repeats)]
    pair_cpu = [pair_ratio(r, "cpu_s") for r in range(args.repeats)]
    same = sum(a == b for a, b in zip(
        [(x["repeat"], x["step"], x["generated_tokens"], x["completion_tokens"]) for x in rows["A"]],
        [(x["repeat"], x["step"], x["generated_tokens"], x["completion_tokens"]) for x in rows["B"]], strict=False))
    print()
    print(f"calculator GRPO, builtin:tiny warm-started ({ckpt.name}), {args.repeats} repeats x {args.steps} steps "
          f"(first step of each run dropped), torch threads {torch.get_num_threads()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print("| arm | steps | median step s (wall) | median step s (CPU) | completion tok/step | generated tok/step "
          "| prompt tok/step | turns/episode | exact answer |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, s in (("A hand-written rollout_func", sa), ("B agentbridge job", sb)):
        print(f"| {name} | {s['n']} | {s['median_step_s']:.2f} | {s['median_cpu_s']:.2f} | "
              f"{s['completion_tokens']:.0f} | {s['generated_tokens']:.0f} | {s['prompt_tokens']:.0f} | "
              f"{s['turns']:.2f} | {s['reward']:.3f} |")
    print(f"\nB/A median step time, wall: {ratio:.3f}; CPU: {cpu_ratio:.3f} (target <= 1.05)")
    print("per-repeat B/A, wall: " + ", ".join(f"{x:.3f}" for x in pair_ratios)
          + "; CPU: " + ", ".join(f"{x:.3f}" for x in pair_cpu))
    print(f"B/A generated tokens per step: {sb['generated_tokens'] / sa['generated_tokens']:.3f}; steps with "
          f"identical token counts in A and B: {same}/{len(rows['A'])}")
    print(f"total {time.perf_counter() - started:.0f}s")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "A": sa, "B": sb, "ratio": ratio, "cpu_ratio": cpu_ratio,
                                         "pair_ratios": pair_ratios, "pair_cpu_ratios": pair_cpu}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Driver CPU overhead per turn: run_episode vs. a naive re-render-everything loop (real Qwen2.5 tokenizer).

A scripted policy (pre-tokenized turns, so no model and no encode cost) plays ``turns - 1`` hermes tool calls
then ``<answer>done</answer>`` against a ToolEnvironment with one cheap tool. run_episode renders each
observation from a constant-size stub, so its cost per turn should not grow with the conversation: the
per-turn(32)/per-turn(2) ratio should stay near 1.0, and so should the ratio of marginal costs per added turn
(8->32 over 2->8, free of the fixed prompt and answer-turn costs). The naive loop re-renders the whole
conversation with apply_chat_template every turn, so its per-turn cost grows with length. Times are process
CPU time (time.process_time), which other processes on the machine disturb less than wall time.

    python bench/driver_overhead.py [--repeats 7] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from agentbridge.env import Message, Task
from agentbridge.models import load_tokenizer
from agentbridge.rollout import HermesParser, Limits, Renderer, SamplingParams, ScriptedPolicy, run_episode
from agentbridge.tools import ToolEnvironment, tool

LENGTHS = (2, 8, 32)
CALL = '<tool_call>\n{"name": "lookup", "arguments": {"key": "k7"}}\n</tool_call>'
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()


@tool
async def lookup(key: str) -> str:
    """Look up a key in the reference table.

    Args:
        key: The key to look up.
    """
    return f"{key}: " + " ".join(WORDS[(i * 7 + len(key)) % len(WORDS)] for i in range(40))


def make_script(tok: Any, turns: int) -> list[list[int]]:
    texts = [CALL] * (turns - 1) + ["<answer>done</answer>"]
    return [list(tok.encode(t, add_special_tokens=False)) + [tok.eos_token_id] for t in texts]


async def driver_episode(tok: Any, renderer: Renderer, turns: int) -> tuple[float, list[int]]:
    env = ToolEnvironment([lookup])
    limits = Limits(max_turns=turns, max_prompt_tokens=4096, max_response_tokens=100000, max_tokens_per_turn=256)
    policy = ScriptedPolicy(tok, make_script(tok, turns))
    t0 = time.process_time()
    traj = await run_episode(policy, env, Task(id="t", prompt="Find k7."), renderer, limits)
    elapsed = time.process_time() - t0
    assert traj.finish_reason == "done" and len(traj.turns) == turns, (traj.finish_reason, traj.error)
    return elapsed, traj.prompt_ids + traj.response_ids


async def naive_episode(tok: Any, renderer: Renderer, turns: int) -> tuple[float, list[int]]:
    """Same loop shape, but the whole conversation is re-rendered with the chat template before every turn."""
    env, parser, sampling = ToolEnvironment([lookup]), HermesParser(), SamplingParams(max_tokens=256)
    policy = ScriptedPolicy(tok, make_script(tok, turns))
    t0 = time.process_time()
    messages: list[Message] = list(await env.reset(Task(id="t", prompt="Find k7.")))
    ids: list[int] = []
    for _ in range(turns):
        ids = renderer.render_prompt(messages)
        gen = await policy.generate(ids, sampling)
        text = renderer.decode(gen.token_ids[:-1])
        parsed = parser.parse(text)
        action: Message = {"role": "assistant", "content": text}
        if parsed.tool_calls:
            action["tool_calls"] = parsed.tool_calls
        messages.append({"role": "assistant", "content": text})  # the text already holds the call
        step = await env.step(action)
        if step.done:
            break
        messages.extend(step.observation)
    elapsed = time.process_time() - t0
    return elapsed, ids + list(gen.token_ids)


async def main(repeats: int) -> None:
    tok = load_tokenizer("builtin:tiny-qwen2.5")
    renderer = Renderer(tok, tools=ToolEnvironment([lookup]).tool_schemas())
    for n in LENGTHS:  # warm-up (template compilation, tokenizer caches)
        await driver_episode(tok, renderer, n)
        await naive_episode(tok, renderer, n)
    times: dict[str, dict[int, list[float]]] = {"driver": {n: [] for n in LENGTHS}, "naive": {n: [] for n in LENGTHS}}
    tokens: dict[str, dict[int, list[int]]] = {"driver": {}, "naive": {}}
    for _ in range(repeats):
        for n in LENGTHS:  # interleaved: 2, 8, 32, 2, 8, 32, ...
            for name, fn in (("driver", driver_episode), ("naive", naive_episode)):
                elapsed, tokens[name][n] = await fn(tok, renderer, n)
                times[name][n].append(elapsed)
    med = {name: {n: statistics.median(times[name][n]) * 1e6 for n in LENGTHS} for name in times}
    per_turn = {name: {n: med[name][n] / n for n in LENGTHS} for name in times}
    print(f"repeats={repeats}, median episode CPU time / turns, tokenizer builtin:tiny-qwen2.5")
    print(f"{'turns':>5} | {'driver us/turn':>14} | {'naive us/turn':>13} | {'final tokens':>12}")
    print(f"{'-' * 5}-|-{'-' * 14}-|-{'-' * 13}-|-{'-' * 12}")
    for n in LENGTHS:
        assert tokens["driver"][n] == tokens["naive"][n], n  # both build the very same final sequence
        drv, nai = per_turn["driver"][n], per_turn["naive"][n]
        print(f"{n:>5} | {drv:>14.0f} | {nai:>13.0f} | {len(tokens['driver'][n]):>12}")
    lo, hi = LENGTHS[0], LENGTHS[-1]
    for name in ("driver", "naive"):
        print(f"{name} per-turn({hi})/per-turn({lo}) = {per_turn[name][hi] / per_turn[name][lo]:.2f}")
    for name in ("driver", "naive"):  # cost of one more turn, free of the fixed prompt/answer costs
        m1, m2 = ((med[name][b] - med[name][a]) / (b - a) for a, b in zip(LENGTHS, LENGTHS[1:], strict=False))
        mid = LENGTHS[1]
        print(f"{name} marginal us/turn: {lo}->{mid} {m1:.0f}, {mid}->{hi} {m2:.0f}, ratio {m2 / m1:.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="interleaved repeats per length (median is taken)")
    ap.add_argument("--quick", action="store_true", help="2 repeats, for a smoke run")
    args = ap.parse_args()
    asyncio.run(main(2 if args.quick else args.repeats))

"""The token-level episode driver: ``run_episode`` and ``run_episodes``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agentbridge.env import Environment, Message, Task, images_of, task_images
from agentbridge.rewards import PROCESS, RewardSet
from agentbridge.rollout.agent_edge import prompt_messages
from agentbridge.rollout.parsers import HermesParser, ParsedAction, ToolCallParser
from agentbridge.rollout.policy import Policy
from agentbridge.rollout.renderer import Renderer
from agentbridge.trajectory import Limits, SamplingParams, Trajectory, Turn


def assistant_action(text: str, parser: ToolCallParser) -> tuple[Message, ParsedAction]:
    """The assistant message the driver builds from a turn's generated text (tool calls and malformed ones
    attached), and the parse result."""
    parsed = parser.parse(text)
    action: Message = {"role": "assistant", "content": text}
    if parsed.tool_calls:
        action["tool_calls"] = parsed.tool_calls
    if parsed.errors:
        action["tool_call_errors"] = parsed.errors  # type: ignore[typeddict-unknown-key]
    return action, parsed


def _add(metrics: dict[str, float], new: dict[str, float]) -> None:
    for key, value in new.items():
        metrics[key] = metrics.get(key, 0.0) + float(value)


async def run_episode(policy: Policy, env: Environment, task: Task, renderer: Renderer, limits: Limits,
                      *, sampling: SamplingParams | None = None, parser: ToolCallParser | None = None,
                      rewards: RewardSet | None = None, system_prompt: str | None = None) -> Trajectory:
    """Run one episode; never raises. Failures end it with ``finish_reason = "error"`` and ``error`` set."""
    sampling = sampling or SamplingParams()
    parser = parser or HermesParser()
    traj = Trajectory(task_id=task.id, prompt_ids=[])
    metrics = {"tools/calls": 0.0, "tools/failures": 0.0, "tools/parse_errors": 0.0,
               "time/generate_s": 0.0, "time/env_s": 0.0}
    process_reward = 0.0
    try:
        t0 = time.perf_counter()
        if not task.images and task.data.get("images"):  # a dataset's first images travel as references
            task.images = task_images(task)
        initial = await env.reset(task)
        metrics["time/env_s"] += time.perf_counter() - t0
        messages = prompt_messages(system_prompt) + initial
        traj.messages = messages
        traj.prompt_ids = renderer.render_prompt(messages)
        traj.images = [im for m in messages for im in images_of(m)]
        if len(traj.prompt_ids) > limits.max_prompt_tokens:
            traj.finish_reason = "length"
            traj.error = f"prompt has {len(traj.prompt_ids)} tokens > max_prompt_tokens {limits.max_prompt_tokens}"
            return traj
        traj.finish_reason = "max_turns"
        for turn_index in range(limits.max_turns):
            budget = min(limits.max_tokens_per_turn, limits.max_response_tokens - len(traj.response_ids))
            if budget <= 0:
                traj.finish_reason = "length"
                break
            t0 = time.perf_counter()
            gen = await policy.generate(traj.prompt_ids + traj.response_ids, replace(sampling, max_tokens=budget),
                                        images=traj.images or None)
            gen_s = time.perf_counter() - t0
            ids = list(gen.token_ids[:budget])
            logprobs = list(gen.logprobs[: len(ids)]) if gen.logprobs else [0.0] * len(ids)
            traj.response_ids += ids
            traj.response_mask += [1] * len(ids)
            traj.logprobs += logprobs
            stopped = bool(ids) and ids[-1] == renderer.eos_token_id
            text = renderer.decode(ids[:-1] if stopped else ids)
            action, parsed = assistant_action(text, parser)
            metrics["tools/parse_errors"] += len(parsed.errors)
            turn = Turn(text=text, tool_calls=[dict(c) for c in parsed.tool_calls], generated_tokens=len(ids),
                        generate_s=gen_s, end=len(traj.response_ids) - 1, message_index=len(messages))
            traj.turns.append(turn)
            messages.append(action)
            metrics["time/generate_s"] += gen_s
            if not stopped:  # the turn was cut by a token budget: it cannot be continued faithfully
                traj.finish_reason = "length"
                break
            t0 = time.perf_counter()
            step = await env.step(action)
            turn.env_s = time.perf_counter() - t0
            metrics["time/env_s"] += turn.env_s
            turn.reward = float(step.reward)
            turn.observations = list(step.observation)
            process_reward += turn.reward
            _add(metrics, step.metrics)
            if step.done:
                traj.finish_reason = "done"
                break
            if turn_index == limits.max_turns - 1:
                break
            obs_ids = renderer.continuation(step.observation)
            # keep room for at least one generated token after the observation
            if len(traj.response_ids) + len(obs_ids) >= limits.max_response_tokens:
                traj.finish_reason = "length"
                break
            turn.observation_tokens = len(obs_ids)
            traj.response_ids += obs_ids
            traj.response_mask += [0] * len(obs_ids)
            traj.logprobs += [0.0] * len(obs_ids)
            messages.extend(step.observation)
            traj.images += [im for m in step.observation for im in images_of(m)]
    except Exception as e:  # noqa: BLE001 - one failing episode must never fail the others
        traj.finish_reason = "error"
        traj.error = f"{type(e).__name__}: {e}"
    finally:
        try:
            await env.close()
        except Exception as e:  # noqa: BLE001
            traj.error = traj.error or f"close failed: {type(e).__name__}: {e}"
    metrics.update({"episode/turns": float(len(traj.turns)),
                    "episode/response_tokens": float(len(traj.response_ids)),
                    "episode/generated_tokens": float(sum(traj.response_mask))})
    traj.metrics.update(metrics)  # before scoring: rewards may read them (core/format reads parse errors)
    await _score(traj, task, rewards, process_reward)
    return traj


async def _score(traj: Trajectory, task: Task, rewards: RewardSet | None, process_reward: float) -> None:
    """The episode's reward components and weighted total, and each turn's weighted process reward
    (``Turn.credit``: its step reward plus its ``per: turn`` rewards; 0 in an ``error`` episode)."""
    if rewards is None:
        traj.reward_components = {PROCESS: process_reward}
        traj.reward = process_reward
        for turn in traj.turns:
            turn.credit = turn.reward
        return
    if traj.finish_reason == "error":
        components = {item.id: 0.0 for item in rewards.items}
    else:
        components, errors = await rewards.score(traj, task)
        traj.metrics["reward/errors"] = float(len(errors))
        if errors:
            traj.error = "; ".join(errors)
    components[PROCESS] = process_reward if traj.finish_reason != "error" else 0.0
    traj.reward_components = components
    traj.reward = rewards.total(components)
    for turn in traj.turns:
        turn.credit = 0.0 if traj.finish_reason == "error" else rewards.total({PROCESS: turn.reward, **turn.scores})


async def run_episodes(tasks: Sequence[Task], make_env: Callable[[Task], Environment],
                       policy: Policy | Callable[[Environment], Policy], renderer: Renderer, limits: Limits,
                       *, concurrency: int = 32, on_done: Callable[[Trajectory], Any] | None = None,
                       **kwargs: Any) -> list[Trajectory]:
    """Run many episodes with at most ``concurrency`` in flight; results keep the order of ``tasks``.

    ``policy`` is one shared policy, or a callable building a policy per environment (scripted experts).
    An environment that cannot even be built gives an ``error`` trajectory, not an exception.
    """
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(task: Task) -> Trajectory:
        async with gate:
            try:
                env = make_env(task)
                pol = policy if hasattr(policy, "generate") else policy(env)
            except Exception as e:  # noqa: BLE001
                traj = Trajectory(task_id=task.id, prompt_ids=[], finish_reason="error",
                                  error=f"environment setup failed: {type(e).__name__}: {e}")
                await _score(traj, task, kwargs.get("rewards"), 0.0)
            else:
                traj = await run_episode(pol, env, task, renderer, limits, **kwargs)
            if on_done is not None:
                on_done(traj)
            return traj

    return list(await asyncio.gather(*(one(t) for t in tasks)))

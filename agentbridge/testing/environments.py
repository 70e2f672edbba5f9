"""The environment checker for plugin authors' own tests.

:func:`check_environment` plays an environment the way the rollout driver does and reports everything a backend
would trip over later, one line per problem::

    from agentbridge.testing import check_environment

    def test_environment() -> None:
        check_environment(MyEnv, tasks=my_tasks("train", size=4), rewards={"my/exact": exact})

:func:`check_seed_block_dataset` asserts that a dataset built from per-split seed blocks declares its capacity truly.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agentbridge.env import Environment, Message, StepResult, Task, ToolCall, text_of
from agentbridge.rewards import RewardFn
from agentbridge.rollout.driver import assistant_action
from agentbridge.rollout.parsers import HermesParser, ToolCallParser
from agentbridge.trajectory import Trajectory, Turn

ROLES = ("system", "user", "assistant", "tool")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-style function calling accepts
UNKNOWN_TOOL = "agentbridge_check_no_such_tool"

EnvSource = Environment | Callable[[], Environment]


class EnvironmentCheckError(AssertionError):
    """An environment failed :func:`check_environment`; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(f"{len(problems)} problem(s) with the environment:\n" + "\n".join(f"- {p}" for p in problems))
        self.problems = problems


def check_environment(env: EnvSource, tasks: Sequence[Task], *, rewards: Mapping[str, RewardFn] | None = None,
                      solved_at: float = 1.0, max_turns: int = 10, parser: ToolCallParser | None = None,
                      timeout_s: float = 60.0) -> None:
    """Check an environment as the driver will use it; raise :class:`EnvironmentCheckError` listing every problem.

    ``env`` is an environment class (or any callable returning a fresh environment; the driver makes one per
    episode) or an instance (reused, with ``reset`` between episodes). For each task it checks that ``reset``
    returns messages, that ``step`` returns a :class:`~agentbridge.env.StepResult` of the right types, and, when
    the environment has ``expert_action()``, that the expert ends the episode within ``max_turns`` without a failed
    tool call and scores at least ``solved_at`` on every reward in ``rewards`` (``{id: (trajectory, task) ->
    float | dict}``). Tools must declare complete schemas (a description, every argument typed and described),
    and ``step`` must survive bad actions (a malformed tool call, an unknown tool, bad arguments, an empty answer)
    by telling the model, not by raising. The expert's text is parsed with ``parser`` (Hermes by default).
    Synchronous: in async code await :func:`environment_problems_async`.
    """
    problems = environment_problems(env, tasks, rewards=rewards, solved_at=solved_at, max_turns=max_turns,
                                    parser=parser, timeout_s=timeout_s)
    if problems:
        raise EnvironmentCheckError(problems)


def environment_problems(env: EnvSource, tasks: Sequence[Task], *, rewards: Mapping[str, RewardFn] | None = None,
                         solved_at: float = 1.0, max_turns: int = 10, parser: ToolCallParser | None = None,
                         timeout_s: float = 60.0) -> list[str]:
    """The problems :func:`check_environment` would raise, as a list (empty when the environment passes)."""
    return asyncio.run(environment_problems_async(env, tasks, rewards=rewards, solved_at=solved_at,
                                                  max_turns=max_turns, parser=parser, timeout_s=timeout_s))


async def environment_problems_async(env: EnvSource, tasks: Sequence[Task], *,
                                     rewards: Mapping[str, RewardFn] | None = None, solved_at: float = 1.0,
                                     max_turns: int = 10, parser: ToolCallParser | None = None,
                                     timeout_s: float = 60.0) -> list[str]:
    """:func:`environment_problems` for code that already runs an event loop."""
    check = _Checker(env, parser or HermesParser(), timeout_s)
    if not tasks:
        return ["tasks: give at least one task to play"]
    first = check.make()
    if first is None:
        return check.problems
    check.interface(first)
    if check.problems:
        return check.problems
    check.tools(first)
    for i, task in enumerate(tasks):
        env_i = first if i == 0 else check.make()
        if env_i is not None:
            await check.episode(env_i, task, rewards or {}, solved_at, max_turns)
    for name, action in _bad_actions(check.tool_names(first), check.parser):
        env_b = check.make()
        if env_b is not None:
            await check.survives(env_b, tasks[0], name, action)
    return check.problems


def _bad_actions(tools: list[str], parser: ToolCallParser) -> list[tuple[str, Message]]:
    """Actions a model will produce sooner or later: each must become a message to the model, not an exception."""
    out: list[tuple[str, Message]] = []
    out.append(("a malformed tool call", _action('<tool_call>\n{"name": "oops", "arguments": {\n', parser)[0]))

    def call(name: str, arguments: Any) -> Message:
        tool_call: ToolCall = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}
        return {"role": "assistant", "content": "", "tool_calls": [tool_call]}

    out.append(("a call to an unknown tool", call(UNKNOWN_TOOL, {})))
    if tools:
        out.append((f"a call to {tools[0]} with an unknown argument", call(tools[0], {"agentbridge_check_bad": 1})))
        out.append((f"a call to {tools[0]} whose arguments are not an object", call(tools[0], "not an object")))
    out.append(("an empty answer", {"role": "assistant", "content": ""}))
    return out


def _action(text: str, parser: ToolCallParser) -> tuple[Message, list[str]]:
    """The assistant message the driver builds from generated text, and the text's malformed tool calls."""
    action, parsed = assistant_action(text, parser)
    return action, parsed.errors


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def message_problem(message: Any) -> str | None:
    """Why ``message`` is not a chat message the renderer can show the model, or None when it is."""
    if not isinstance(message, dict):
        return f"a message must be a dict, got {type(message).__name__}"
    role = message.get("role")
    if role not in ROLES:
        return f"message role {role!r} is not one of {', '.join(ROLES)}"
    if "content" not in message:
        return f"a {role} message has no 'content'"
    content = message["content"]
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"a {role} message's content must be text or a list of blocks, got {type(content).__name__}"
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            continue
        if kind == "image" and block.get("image") is not None:
            continue
        return f"a {role} message has a content block that is not {{'type': 'text', 'text': str}} or " \
               f"{{'type': 'image', 'image': ...}}: {str(block)[:80]}"
    return None


def step_result_problems(result: Any) -> list[str]:
    """Why ``result`` is not a well-typed :class:`~agentbridge.env.StepResult` (empty when it is)."""
    if not isinstance(result, StepResult):
        return [f"returned {type(result).__name__}, expected agentbridge.env.StepResult"]
    out = []
    if not isinstance(result.observation, list):
        out.append(f"StepResult.observation must be a list of messages, got {type(result.observation).__name__}")
    else:
        out += [f"StepResult.observation: {p}" for p in map(message_problem, result.observation) if p]
    if not _number(result.reward):
        out.append(f"StepResult.reward must be a finite number, got {result.reward!r}")
    if not isinstance(result.done, bool):
        out.append(f"StepResult.done must be a bool, got {type(result.done).__name__}")
    if not isinstance(result.metrics, dict):
        out.append(f"StepResult.metrics must be a dict of str -> number, got {type(result.metrics).__name__}")
    else:
        bad = [k for k, v in result.metrics.items() if not isinstance(k, str) or not _number(v)]
        if bad:
            out.append(f"StepResult.metrics must map names to finite numbers; not so for {', '.join(map(str, bad))}")
    return out


def tool_schema_problems(schemas: Any) -> list[str]:
    """Why the tool schemas (``env.tool_schemas()``) would render badly or mislead the model (empty when fine)."""
    if not isinstance(schemas, list):
        return [f"tool_schemas() must return a list, got {type(schemas).__name__}"]
    out: list[str] = []
    seen: set[str] = set()
    for schema in schemas:
        fn = schema.get("function") if isinstance(schema, dict) else None
        if not isinstance(schema, dict) or schema.get("type") != "function" or not isinstance(fn, dict):
            out.append(f"a tool schema must be {{'type': 'function', 'function': {{...}}}}, got {str(schema)[:80]}")
            continue
        name = fn.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            out.append(f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'")
            continue
        if name in seen:
            out.append(f"tool {name}: declared twice")
        seen.add(name)
        if not isinstance(fn.get("description"), str) or not fn["description"].strip() or fn["description"] == name:
            out.append(f"tool {name}: no description (the first lines of its docstring)")
        params = fn.get("parameters")
        if not isinstance(params, dict) or params.get("type") != "object" or \
                not isinstance(params.get("properties", {}), dict):
            out.append(f"tool {name}: parameters must be a JSON schema of type 'object' with 'properties'")
            continue
        props = params.get("properties", {})
        for arg, prop in props.items():
            if not isinstance(prop, dict) or not ({"type", "anyOf", "enum"} & set(prop)):
                out.append(f"tool {name}: argument '{arg}' has no type (annotate it)")
            elif not prop.get("description"):
                out.append(f"tool {name}: argument '{arg}' has no description (document it under Args: in the "
                           "docstring)")
        missing = [r for r in params.get("required", []) if r not in props]
        if missing:
            out.append(f"tool {name}: required argument(s) {', '.join(map(str, missing))} are not in properties")
        try:
            json.dumps(schema)
        except (TypeError, ValueError) as e:
            out.append(f"tool {name}: the schema is not JSON ({e})")
    return out


class _Checker:
    """Collects problems while playing episodes."""

    def __init__(self, source: EnvSource, parser: ToolCallParser, timeout_s: float) -> None:
        self.source = source
        self.parser = parser
        self.timeout_s = timeout_s
        self.found: dict[str, list[str]] = {}  # problem -> where it happened, in order
        self.factory = inspect.isclass(source) or not hasattr(source, "reset")

    def add(self, where: str, message: str) -> None:
        self.found.setdefault(message, []).append(where)

    @property
    def problems(self) -> list[str]:
        """One line per distinct problem: where it happened first, and how often it came back."""
        out = []
        for message, places in self.found.items():
            again = f" (and {len(places) - 1} more time(s), e.g. {places[1]})" if len(places) > 1 else ""
            out.append(f"{places[0]}: {message}{again}")
        return out

    def make(self) -> Any:
        """A fresh environment from a class or factory; the same instance otherwise. None when it cannot be made."""
        if not self.factory:
            return self.source
        name = getattr(self.source, "__name__", type(self.source).__name__)
        try:
            return self.source()  # type: ignore[operator]
        except Exception as e:  # noqa: BLE001 - reported, one line
            self.add(f"{name}()", f"raised {type(e).__name__}: {e}")
            return None

    def interface(self, env: Any) -> None:
        for method in ("reset", "step", "close"):
            fn = getattr(env, method, None)
            if fn is None:
                self.add(type(env).__name__, f"has no {method}() (see agentbridge.env.Environment)")
            elif not inspect.iscoroutinefunction(fn):
                self.add(type(env).__name__, f"{method}() must be async (async def {method}...)")

    def tool_names(self, env: Any) -> list[str]:
        try:
            schemas = env.tool_schemas() if callable(getattr(env, "tool_schemas", None)) else []
            return [s["function"]["name"] for s in schemas]
        except Exception:  # noqa: BLE001 - already reported by tools()
            return []

    def tools(self, env: Any) -> None:
        if not callable(getattr(env, "tool_schemas", None)):
            if getattr(env, "tools", None):
                self.add(type(env).__name__, "has tools but no tool_schemas(); the model would not see them")
            return
        try:
            schemas = env.tool_schemas()
        except Exception as e:  # noqa: BLE001
            self.add("tool_schemas()", f"raised {type(e).__name__}: {e}")
            return
        for problem in tool_schema_problems(schemas):
            self.add("tool_schemas()", problem)
        from agentbridge.tools import ToolSpec, tool_problem

        tools = getattr(env, "tools", None)
        specs = tools.values() if isinstance(tools, Mapping) else tools if isinstance(tools, list | tuple) else ()
        for spec in specs:
            if isinstance(spec, ToolSpec) and (why := tool_problem(spec)):
                self.add("tools", f"tool {spec.name}: {why}")

    async def call(self, where: str, fn: Callable[..., Awaitable[Any]], *args: Any) -> tuple[bool, Any]:
        """``(ok, value)``: the awaited ``fn(*args)``, or a problem recorded when it raised or took too long."""
        try:
            awaitable = fn(*args)
            if not inspect.isawaitable(awaitable):
                self.add(where, "did not return an awaitable (the method must be async)")
                return False, None
            return True, await asyncio.wait_for(awaitable, self.timeout_s)
        except TimeoutError:
            self.add(where, f"took longer than {self.timeout_s:g}s")
        except Exception as e:  # noqa: BLE001 - reported, one line
            self.add(where, f"raised {type(e).__name__}: {e}")
        return False, None

    async def reset(self, env: Any, task: Task) -> list[Message] | None:
        where = f"task {task.id}: reset"
        ok, messages = await self.call(where, env.reset, task)
        if not ok:
            return None
        if not isinstance(messages, list) or not messages:
            self.add(where, f"must return a non-empty list of messages, got {str(messages)[:80]}")
            return None
        bad = [p for p in map(message_problem, messages) if p]
        for problem in bad:
            self.add(where, problem)
        return None if bad else messages

    async def close(self, env: Any, task: Task) -> None:
        await self.call(f"task {task.id}: close", env.close)

    async def step(self, env: Any, where: str, action: Message) -> StepResult | None:
        ok, result = await self.call(where, env.step, action)
        if not ok:
            return None
        bad = step_result_problems(result)
        for problem in bad:
            self.add(where, problem)
        return None if bad else result

    async def episode(self, env: Any, task: Task, rewards: Mapping[str, RewardFn], solved_at: float,
                      max_turns: int) -> None:
        messages = await self.reset(env, task)
        try:
            if messages is not None and callable(getattr(env, "expert_action", None)):
                await self.expert(env, task, messages, rewards, solved_at, max_turns)
        finally:
            await self.close(env, task)

    async def expert(self, env: Any, task: Task, messages: list[Message], rewards: Mapping[str, RewardFn],
                     solved_at: float, max_turns: int) -> None:
        where = f"task {task.id}: expert"
        turns: list[Turn] = []
        parse_errors = 0
        step_metrics: dict[str, float] = {}  # summed over steps, as the driver does: rewards may read them
        for n in range(1, max_turns + 1):
            try:
                text = env.expert_action()
            except Exception as e:  # noqa: BLE001
                self.add(f"{where} turn {n}", f"expert_action() raised {type(e).__name__}: {e}")
                return
            if not isinstance(text, str):
                self.add(f"{where} turn {n}", f"expert_action() returned {text!r}, expected the assistant's text")
                return
            action, errors = _action(text, self.parser)
            for error in errors:
                self.add(f"{where} turn {n}", f"malformed tool call: {error}")
            parse_errors += len(errors)
            result = await self.step(env, f"{where} turn {n}: step", action)
            if result is None:
                return
            failed = [text_of(m) for m in result.observation if m.get("role") == "tool"][:1] \
                if result.metrics.get("tools/failures", 0) else []
            if failed:
                self.add(f"{where} turn {n}", f"a tool call failed: {failed[0][:200]}")
            messages = [*messages, action, *result.observation]
            for key, value in result.metrics.items():
                step_metrics[key] = step_metrics.get(key, 0.0) + float(value)
            turns.append(Turn(text=text, tool_calls=[dict(c) for c in action.get("tool_calls") or []],
                              observations=list(result.observation), reward=float(result.reward)))
            if result.done:
                break
        else:
            self.add(where, f"did not end the episode within {max_turns} turns")
            return
        traj = Trajectory(task_id=task.id, prompt_ids=[], turns=turns, finish_reason="done", messages=messages,
                          metrics={**step_metrics, "tools/parse_errors": float(parse_errors),
                                   "episode/turns": float(len(turns))})
        for name, fn in rewards.items():
            await self.score(where, name, fn, traj, task, solved_at)

    async def score(self, where: str, name: str, fn: RewardFn, traj: Trajectory, task: Task,
                    solved_at: float) -> None:
        try:
            value = fn(traj, task)
            if inspect.isawaitable(value):
                value = await value
        except Exception as e:  # noqa: BLE001
            self.add(where, f"reward {name} raised {type(e).__name__}: {e}")
            return
        scores = value if isinstance(value, dict) else {name: value}
        for key, score in scores.items():
            if not _number(score):
                self.add(where, f"reward {key} returned {score!r}, expected a finite number")
            elif score < solved_at:
                self.add(where, f"reward {key} is {score:g} for the expert's episode, expected at least {solved_at:g}")

    async def survives(self, env: Any, task: Task, name: str, action: Message) -> None:
        where = f"task {task.id}: step({name})"
        if await self.reset(env, task) is None:
            await self.close(env, task)
            return
        try:
            result = await self.step(env, where, action)
            if result is not None and not result.done and not result.observation:
                self.add(where, "returned no observation and did not end the episode: the model is not told what "
                                "went wrong")
        finally:
            await self.close(env, task)


def check_seed_block_dataset(build: Callable[..., Sequence[Task]], capacity: Callable[[str, int], int],
                             dataset_id: str, *, split_base: Mapping[str, int], split_seeds: int,
                             seed_field: str = "seed") -> None:
    """Assert that a dataset whose splits each own ``split_seeds`` seeds from ``split_base[split]`` (task ``i`` of
    ``size`` with ``seed`` gets ``base + seed * size + i``, kept in ``task.data[seed_field]``) declares its capacity
    truly: ``capacity(split, seed)`` is the most tasks whose seeds stay in the split, that many are built and the
    splits stay disjoint, and one more, a negative seed or an unknown split is one line."""
    import re

    from agentbridge.datasets import declared_capacity
    from agentbridge.spec.schema import DatasetSpec

    def raises(match: str, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except ValueError as e:
            assert re.search(match, str(e)), f"{dataset_id}: {e!s} does not match {match!r}"
            return
        raise AssertionError(f"{dataset_id}: {fn.__name__}{args} raised nothing, expected {match!r}")

    for seed in (0, 1, 7, 99, 999_999, 5_000_000):
        n = capacity("train", seed)
        assert n == split_seeds // (seed + 1), (seed, n)
        for base in set(split_base.values()):
            assert base + seed * n + n <= base + split_seeds  # the last seed of n tasks is the split's own
            assert base + seed * (n + 1) + n + 1 > base + split_seeds  # one more would reach the next split's
    seeds = {}
    for split in ("train", "dev", "eval"):
        n = capacity(split, 99)
        tasks = build(split, n, 99)
        seeds[split] = {t.data[seed_field] for t in tasks}
        assert len(tasks) == n == len(seeds[split]) == split_seeds // 100
        assert all(split_base[split] <= s < split_base[split] + split_seeds for s in seeds[split])
    assert not seeds["train"] & seeds["dev"] and not seeds["dev"] & seeds["eval"] and not seeds["train"] & seeds["eval"]
    most = split_seeds // 10
    raises(rf"^{re.escape(dataset_id)} can produce at most {most} distinct dev tasks \(.*seed=9\), asked for "
           rf"{most + 1}$", build, "dev", most + 1, 9)
    raises("seed must be 0 or more", build, "train", 1, -1)
    raises("split must be train, dev or eval", capacity, "valid", 0)
    assert declared_capacity(build, DatasetSpec(id=dataset_id, split="test", seed=3)) == split_seeds // 4

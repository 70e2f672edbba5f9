"""Tools: the ``@tool`` decorator, ToolSpec (OpenAI function JSON schema), dispatch, ToolEnvironment."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import functools
import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired, Required, Union, get_args, get_origin

import pydantic
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic reads typing's TypedDict only from Python 3.12

from agentbridge.env import Message, StepResult, Task, ToolCall

if TYPE_CHECKING:
    from agentbridge.trajectory import Trajectory

DEFAULT_WORKERS = 8  # threads per sync tool
DEFAULT_MAX_FAILURE_RATE = 0.2  # a rollout above this share of failed tool calls is warned about

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               dict: "object", list: "array"}


def _json_schema(tp: Any) -> dict[str, Any]:
    """JSON schema of a type hint (str, int, float, bool, list[X], dict, Literal, Optional)."""
    origin = get_origin(tp)
    if tp in _JSON_TYPES:
        return {"type": _JSON_TYPES[tp]}
    if origin is Literal:
        values = list(get_args(tp))
        return {"type": _JSON_TYPES.get(type(values[0]), "string"), "enum": values}
    if origin in (list, Sequence, tuple):
        args = get_args(tp)
        return {"type": "array", "items": _json_schema(args[0])} if args else {"type": "array"}
    if origin is dict:
        return {"type": "object"}
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return _json_schema(members[0])
        return {"anyOf": [_json_schema(a) for a in members]}
    return {}


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {arg: description})."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    desc: list[str] = []
    args: dict[str, str] = {}
    section = "desc"
    current = ""
    for line in lines:
        stripped = line.strip()
        if re.fullmatch(r"(Args|Arguments|Parameters):", stripped):
            section = "args"
            continue
        if re.fullmatch(r"(Returns|Raises|Yields|Examples?|Notes?):", stripped):
            section = "other"
            continue
        if section == "desc":
            desc.append(stripped)
        elif section == "args":
            m = re.match(r"(\w+)\s*(\([^)]*\))?\s*:\s*(.*)", stripped)
            if m and not line.startswith(" " * 8):
                current = m.group(1)
                args[current] = m.group(3)
            elif current and stripped:
                args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(x for x in desc if x).strip(), args


@dataclass
class ToolSpec:
    """A callable tool with its OpenAI function schema."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    timeout_s: float | None = None
    hints: dict[str, Any] = field(default_factory=dict)
    max_workers: int = DEFAULT_WORKERS

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    @functools.cached_property
    def workers(self) -> ToolWorkers:
        """The threads this (sync) tool runs on: its own, so a hung tool cannot starve the others."""
        return ToolWorkers(self.max_workers, self.name)

    @functools.cached_property
    def _arguments(self) -> _Arguments:
        return _Arguments.of(self.fn)

    def __getstate__(self) -> dict[str, Any]:  # threads and validators are rebuilt where it is unpickled
        return {k: v for k, v in self.__dict__.items() if k not in ("workers", "_arguments")}

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema (what chat templates render in the tools block)."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def check_arguments(self, arguments: Any) -> str | None:
        """Why ``arguments`` do not fit this tool's signature, or None when they do."""
        try:
            self.parse_arguments(arguments)
        except ToolArgumentError as e:
            return str(e)
        return None

    def parse_arguments(self, arguments: Any) -> dict[str, Any]:
        """``arguments`` validated and coerced against the signature (pydantic's lax mode: ``"7"`` → 7 for an
        ``int``, ``null`` for an Optional, ``null`` for an argument with a default → the default); raises
        ToolArgumentError with one line."""
        if not isinstance(arguments, dict):
            raise ToolArgumentError(f"arguments must be a JSON object, got {type(arguments).__name__}")
        props = self.parameters.get("properties", {})
        missing = [k for k in self.parameters.get("required", []) if k not in arguments]
        if missing:
            raise ToolArgumentError(f"missing required argument(s): {', '.join(missing)}")
        unknown = [k for k in arguments if k not in props]
        if unknown and not self._arguments.open:
            raise ToolArgumentError(f"unknown argument(s): {', '.join(unknown)}; expected {', '.join(props) or 'none'}")
        return self._arguments.validate(arguments, props)

    async def __call__(self, **kwargs: Any) -> Any:
        if self.is_async:
            return await self.fn(**kwargs)
        return await asyncio.wrap_future(self.workers.submit(self.fn, kwargs))


class ToolArgumentError(ValueError):
    """Arguments that do not fit a tool's signature (one line)."""


def _refuse_bool(kind: str) -> Callable[[Any], Any]:
    article = "an integer" if kind == "integer" else "a number"

    def check(value: Any) -> Any:
        if isinstance(value, bool):
            raise PydanticCustomError("bool_not_number", "a boolean is not {kind}", {"kind": article})
        return value

    return check


def _json_types(tp: Any) -> Any:
    """``tp`` with ``int`` and ``float`` refusing booleans (pydantic's lax mode would take ``true`` as 1)."""
    if tp is int or tp is float:
        return Annotated[tp, pydantic.BeforeValidator(_refuse_bool(_JSON_TYPES[tp]))]
    origin, args = get_origin(tp), get_args(tp)
    if not args or origin in (Literal, Annotated):
        return tp
    new = tuple(a if a is Ellipsis else _json_types(a) for a in args)
    if origin in (Union, types.UnionType):
        return Union[new]  # noqa: UP007 - built from a tuple of types
    try:
        return origin[new]
    except TypeError:
        return tp


def _accepts_none(tp: Any) -> bool:
    return tp in (Any, None, type(None), object) or (get_origin(tp) in (Union, types.UnionType)
                                                     and type(None) in get_args(tp))


@dataclass
class _Arguments:
    """A pydantic validator of a function's keyword arguments, built from its signature."""

    adapter: pydantic.TypeAdapter[Any]
    defaulted: frozenset[str]  # arguments with a default that do not accept None: null means the default
    open: bool                 # the function takes **kwargs

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> _Arguments:
        hints = typing.get_type_hints(fn, include_extras=True)
        fields: dict[str, Any] = {}
        defaulted: set[str] = set()
        open_ = False
        for pname, param in inspect.signature(fn).parameters.items():
            if param.kind is param.VAR_KEYWORD:
                open_ = True
                continue
            if param.kind is param.VAR_POSITIONAL:
                continue
            tp = hints.get(pname, str)
            if param.default is inspect.Parameter.empty:
                fields[pname] = Required[_json_types(tp)]
            else:
                fields[pname] = NotRequired[_json_types(tp)]
                if not _accepts_none(tp):
                    defaulted.add(pname)
        typed = TypedDict(f"{getattr(fn, '__name__', 'tool')}_arguments", fields)  # type: ignore[misc]
        typed.__pydantic_config__ = pydantic.ConfigDict(  # type: ignore[attr-defined]
            extra="allow" if open_ else "forbid", arbitrary_types_allowed=True)
        return cls(pydantic.TypeAdapter(typed), frozenset(defaulted), open_)

    def validate(self, arguments: dict[str, Any], props: Mapping[str, Any]) -> dict[str, Any]:
        """The coerced arguments; ToolArgumentError naming each argument that does not fit, on one line."""
        given = {k: v for k, v in arguments.items() if not (v is None and k in self.defaulted)}
        try:
            return dict(self.adapter.validate_python(given))
        except pydantic.ValidationError as e:
            raise ToolArgumentError("; ".join(_one_line(err, props) for err in e.errors())) from None


def _one_line(err: Any, props: Mapping[str, Any]) -> str:
    """``argument 'key' must be string: <pydantic's reason> (got 5)``; nested places as ``tags[0]``."""
    loc = err["loc"]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    kind = props.get(loc[0], {}).get("type") if len(loc) == 1 else None
    try:
        got = json.dumps(err["input"], ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        got = type(err["input"]).__name__
    got = got if len(got) <= 60 else got[:57] + "..."
    head = f"argument '{where}' must be {kind}:" if kind else f"argument '{where}':"
    return f"{head} {err['msg']} (got {got})".replace("\n", " ")


class ToolWorkers:
    """A bounded set of daemon threads for one sync tool: at most ``size`` calls run at once, the rest wait in
    line. A call that outlives its timeout keeps its thread (Python cannot stop one) but holds up only this tool,
    and never the interpreter's exit; a waiting call whose caller gave up is dropped before it starts."""

    def __init__(self, size: int, name: str = "tool") -> None:
        if size < 1:
            raise ValueError(f"tool '{name}': max_workers must be at least 1, got {size}")
        self.size, self.name = size, name
        self.busy = 0
        self._lock = threading.Lock()
        self._waiting: collections.deque[tuple[concurrent.futures.Future[Any], Callable[[], Any]]] = (
            collections.deque())

    def submit(self, fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> concurrent.futures.Future[Any]:
        """Run ``fn(**kwargs)`` on one of the threads (in the caller's context, as ``asyncio.to_thread`` does)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        job = functools.partial(contextvars.copy_context().run, fn, **kwargs)
        with self._lock:
            if self.busy >= self.size:
                self._waiting.append((future, job))
                return future
            self.busy += 1
        threading.Thread(target=self._work, args=(future, job), name=f"tool-{self.name}", daemon=True).start()
        return future

    def _work(self, future: concurrent.futures.Future[Any], job: Callable[[], Any]) -> None:
        while True:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(job())
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    future.set_exception(e)
            with self._lock:
                if not self._waiting:
                    self.busy -= 1
                    return
                future, job = self._waiting.popleft()


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None,
         timeout_s: float | None = None, max_workers: int = DEFAULT_WORKERS) -> Any:
    """Turn a sync or async function with type hints and a Google-style docstring into a ToolSpec.

    Use as ``@tool`` or ``@tool(name="calc", timeout_s=5)``. A sync function runs on ``max_workers`` threads of
    its own. Arguments are validated and coerced against the type hints (see ``ToolSpec.parse_arguments``).
    """

    def wrap(f: Callable[..., Any]) -> ToolSpec:
        description, arg_docs = _parse_docstring(f.__doc__ or "")
        hints = typing.get_type_hints(f)
        props: dict[str, Any] = {}
        required: list[str] = []
        for pname, param in inspect.signature(f).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            prop = _json_schema(hints.get(pname, str))
            if pname in arg_docs:
                prop["description"] = arg_docs[pname]
            props[pname] = prop
            if param.default is inspect.Parameter.empty:
                required.append(pname)
        parameters = {"type": "object", "properties": props, "required": required}
        spec = ToolSpec(name=name or f.__name__, description=description or f.__name__,
                        parameters=parameters, fn=f, timeout_s=timeout_s, max_workers=max_workers)
        spec._arguments  # noqa: B018 - a signature pydantic cannot read fails here, at definition
        return spec

    return wrap(fn) if fn is not None else wrap


def tool_problem(spec: ToolSpec) -> str | None:
    """Why a tool's function does not give the model a true JSON schema, in one line; None when it does.

    Every parameter the model fills needs a type hint with a JSON schema (``str``, ``int``, ``float``, ``bool``,
    ``list[X]``, ``dict``, ``Literal``, ``Optional``; ``Any`` on purpose): ``@tool`` reads a parameter without one
    as a string. Positional-only parameters cannot be filled: tools are called with keyword arguments.
    """
    try:
        sig = inspect.signature(spec.fn)
        hints = typing.get_type_hints(spec.fn)
    except (TypeError, ValueError, NameError) as e:
        return f"its signature cannot be read ({type(e).__name__}: {e})"
    untyped: list[str] = []
    schemaless: list[str] = []
    positional: list[str] = []
    kinds: list[str] = []
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.kind is param.POSITIONAL_ONLY:
            positional.append(pname)
        elif pname not in hints:
            untyped.append(pname)
        elif hints[pname] not in (Any, object) and not _json_schema(hints[pname]):
            schemaless.append(pname)
            kinds.append(str(getattr(hints[pname], "__name__", hints[pname])))
    problems = []
    if untyped:
        problems.append(f"{_params(untyped)} no type hint (the JSON schema needs one; without it the model is told "
                        "the argument is a string)")
    if schemaless:
        problems.append(f"{_params(schemaless)} a type without a JSON schema ({', '.join(kinds)}; use str, int, "
                        "float, bool, list[...], dict, Literal[...] or Optional[...])")
    if positional:
        problems.append(f"{_params(positional, 'is', 'are')} positional-only (tools are called with keyword "
                        "arguments)")
    return "; ".join(problems) if problems else None


def _params(names: list[str], one: str = "has", many: str = "have") -> str:
    """``parameter 'a' has`` / ``parameters 'a', 'b' have``."""
    quoted = ", ".join(f"'{n}'" for n in names)
    return f"parameter {quoted} {one}" if len(names) == 1 else f"parameters {quoted} {many}"


def as_tool(obj: ToolSpec | Callable[..., Any]) -> ToolSpec:
    """A ToolSpec for ``obj``: itself when already one, else ``@tool`` applied to the function."""
    return obj if isinstance(obj, ToolSpec) else tool(obj)


def _render_result(result: Any) -> Any:
    """Tool return value → message content: text, or content blocks when images are involved."""
    if isinstance(result, str):
        return result
    if isinstance(result, list) and any(isinstance(b, dict) and b.get("type") in ("image", "text")
                                        for b in result):
        return result
    if hasattr(result, "save") and hasattr(result, "size"):  # a PIL image
        return [{"type": "image", "image": result}]
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(result)


def _truncate(content: Any, limit: int) -> tuple[Any, bool]:
    if isinstance(content, str) and len(content) > limit:
        return content[:limit] + f"\n... [truncated {len(content) - limit} characters]", True
    if isinstance(content, list):
        out, cut = [], False
        for block in content:
            if block.get("type") == "text" and len(block.get("text", "")) > limit:
                block = {**block, "text": block["text"][:limit] + " ... [truncated]"}
                cut = True
            out.append(block)
        return out, cut
    return content, False


class ToolEnvironment:
    """Runs the model's tool calls against ``@tool`` functions; ends when the model answers without one.

    A tool that raises, times out, gets bad arguments or an unknown name yields an error message to the
    model and a counted metric (``tools/failures``), never an exception. Arguments are coerced to the tool's
    type hints first; sync tools run on threads of their own (``ToolSpec.workers``), so a hung tool times out
    without holding up the others. Tool output is truncated to ``max_output_chars``.
    """

    def __init__(self, tools: Sequence[ToolSpec | Callable[..., Any]] = (), *, timeout_s: float = 10.0,
                 max_output_chars: int = 4000) -> None:
        self.tools: dict[str, ToolSpec] = {t.name: t for t in map(as_tool, tools)}
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars
        self.task: Task | None = None
        self.history: list[Message] = []

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools.values()]

    async def reset(self, task: Task) -> list[Message]:
        self.task = task
        content: Any = task.prompt
        if task.images:
            content = [*({"type": "image", "image": im} for im in task.images), {"type": "text", "text": task.prompt}]
        self.history = [{"role": "user", "content": content}]
        return list(self.history)

    async def step(self, action: Message) -> StepResult:
        self.history.append(action)
        calls: list[ToolCall] = action.get("tool_calls") or []
        parse_errors: list[str] = action.get("tool_call_errors") or []  # type: ignore[assignment]
        if not calls and not parse_errors:
            return StepResult(observation=[], done=True, reward=await self.final_reward(action))
        results = await asyncio.gather(*(self.call(c) for c in calls))
        observation: list[Message] = [m for m, _ in results]
        failures = sum(not ok for _, ok in results) + len(parse_errors)
        observation += [{"role": "tool", "name": "error", "content": f"Error: {e}"} for e in parse_errors]
        truncated = 0
        for msg in observation:
            msg["content"], cut = _truncate(msg["content"], self.max_output_chars)
            truncated += cut
        self.history.extend(observation)
        metrics = {"tools/calls": float(len(calls) + len(parse_errors)), "tools/failures": float(failures),
                   "tools/truncated": float(truncated)}
        return StepResult(observation=observation, metrics=metrics)

    async def call(self, call: ToolCall) -> tuple[Message, bool]:
        """Run one tool call; returns the tool message and whether it succeeded."""
        name = call["function"].get("name", "")
        args = call["function"].get("arguments")
        msg: Message = {"role": "tool", "tool_call_id": call.get("id", ""), "name": name}
        spec = self.tools.get(name)
        if spec is None:
            known = ", ".join(self.tools) or "none"
            msg["content"] = f"Error: unknown tool '{name}'. Available tools: {known}."
            return msg, False
        try:
            kwargs = spec.parse_arguments(args)
        except ToolArgumentError as e:
            msg["content"] = f"Error: bad arguments for {name}: {e}."
            return msg, False
        timeout = spec.timeout_s or self.timeout_s
        queued: concurrent.futures.Future[Any] | None = None
        if spec.is_async:
            work = spec.fn(**kwargs)
        else:
            queued = spec.workers.submit(spec.fn, kwargs)
            work = asyncio.wrap_future(queued)
        try:
            result = await asyncio.wait_for(work, timeout=timeout)
        except TimeoutError:
            msg["content"] = f"Error: tool '{name}' timed out after {timeout:g}s."
            if queued is not None and queued.cancelled():  # it never started: every worker was taken
                msg["content"] = (f"Error: tool '{name}' timed out after {timeout:g}s waiting for one of its "
                                  f"{spec.workers.size} workers (all busy with earlier calls that have not returned).")
            return msg, False
        except Exception as e:  # noqa: BLE001 - a tool failure must reach the model, not crash the batch
            msg["content"] = f"Error: {name} failed: {type(e).__name__}: {e}"
            return msg, False
        msg["content"] = _render_result(result)
        return msg, True

    async def final_reward(self, action: Message) -> float:
        """Process reward for the final answer step; 0 unless a subclass says otherwise."""
        return 0.0

    def expert_action(self) -> str | None:
        """The text a scripted expert would emit next (used by the ``scripted`` policy); None if unknown."""
        return None

    async def close(self) -> None:
        return None


def tool_failure_rate(trajectories: Iterable[Trajectory], max_rate: float = DEFAULT_MAX_FAILURE_RATE,
                      limit: str | None = None) -> tuple[float, str | None]:
    """The share of the episodes' tool calls that failed, and one line saying so when it is above ``max_rate``
    (with the most frequent error); ``limit`` is how that line names the threshold (default: a percentage)."""
    trajs = list(trajectories)
    calls = sum(t.metrics.get("tools/calls", 0.0) for t in trajs)
    failures = sum(t.metrics.get("tools/failures", 0.0) for t in trajs)
    rate = failures / calls if calls else 0.0
    if rate <= max_rate:
        return rate, None
    errors = collections.Counter(m["content"] for t in trajs for turn in t.turns for m in turn.observations
                                 if m.get("role") == "tool" and isinstance(m.get("content"), str)
                                 and m["content"].startswith("Error:"))
    line = f"{rate:.0%} of tool calls failed ({failures:g} of {calls:g}), above {limit or f'{max_rate:.0%}'}"
    if errors:
        common = errors.most_common(1)[0][0].replace("\n", " ")
        line += f"; most often: {common[:200]!r}"
    return rate, line

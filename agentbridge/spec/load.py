"""Load a spec from YAML with ``--set`` overrides; every problem is one line naming file (or ``--set``), field and
line.

The YAML reading is bounded: a spec file holds at most ``MAX_SPEC_BYTES``, ``MAX_VALUES`` values after expanding
aliases and ``MAX_DEPTH`` levels of nesting. Numbers follow YAML 1.2 (``1e-5`` is a float, ``017`` is 17); a key
given twice in one mapping is an error.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
import stat
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import ValidationError

from agentbridge.plugin_args import args_problems
from agentbridge.spec.schema import MAX_SEED, Spec

MAX_SPEC_BYTES = 256 * 1024
MAX_VALUES = 10_000
MAX_DEPTH = 64

_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"
# YAML 1.2 core schema: decimal, 0o octal and 0x hex integers; floats with an optional exponent, .inf, .nan
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


class SpecError(ValueError):
    """A spec problem a user caused. ``problems`` holds one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class IdRegistry(Protocol):
    """The registered ids of one kind (``agentbridge.plugins.Registry``)."""

    def __contains__(self, id: str, /) -> bool: ...

    def unknown(self, id: str) -> str: ...

    def get(self, id: str) -> Any: ...


def _short(text: object, limit: int = 60) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def field_path(loc: tuple[Any, ...]) -> str:
    """('reward', 1, 'weight') → 'reward[1].weight'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{_short(part)}" if out else _short(part))
    return out or "(top level)"


class _ReadError(yaml.MarkedYAMLError):
    """A problem the reader finds itself (a bound passed, a duplicate key, a value of the wrong form); not syntax."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(None, None, problem, mark)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 numbers, duplicate keys refused and aliases counted as expanded."""

    yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
                               for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.values = 0                              # values composed so far, aliases counted as expanded
        self.shapes: dict[int, tuple[int, int]] = {}  # id(node) → (values, nesting) of its expansion
        self.aliased = False

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _ReadError(f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if isinstance(event, yaml.AliasEvent):
            shape = self.shapes.get(id(node))
            if shape is None:
                raise _ReadError(f"alias *{_short(event.anchor)} is inside the node it names", event.start_mark)
            self.aliased = True
            self.values += shape[0]
            if self.depth + shape[1] > MAX_DEPTH:
                raise _ReadError(f"alias *{_short(event.anchor)} nests the spec more than {MAX_DEPTH} levels deep",
                             event.start_mark)
        else:
            kids: list[yaml.Node] = []
            if isinstance(node, yaml.SequenceNode):
                kids = node.value
            elif isinstance(node, yaml.MappingNode):
                kids = [n for pair in node.value for n in pair]
            shapes = [self.shapes[id(k)] for k in kids]
            self.shapes[id(node)] = (1 + sum(s[0] for s in shapes), 1 + max((s[1] for s in shapes), default=0))
            self.values += 1
        if self.values > MAX_VALUES:
            raise _ReadError(f"more than {MAX_VALUES} values once aliases are expanded (the limit for a spec)",
                         event.start_mark)
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception:  # e.g. `!!int abc`, `!!timestamp 2020-99-99`: one line, not a traceback
            tag = node.tag.rsplit(":", 1)[-1]
            raise _ReadError(f"cannot read {_short(node.value)!r} as {tag}", node.start_mark) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if first is not None:
                    raise _ReadError(f"duplicate key '{_short(key)}' (first on line {first})", key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node))
        if text.startswith(("0o", "0x")):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text, 10)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        text = str(self.construct_scalar(node))
        if text.lower().lstrip("+-") in (".inf", ".nan"):
            value = math.inf if text.lower().endswith("inf") else math.nan
            return -value if text.startswith("-") else value
        return float(text)


_Loader.add_implicit_resolver(_INT_TAG, _INT, list("-+0123456789"))
_Loader.add_implicit_resolver(_FLOAT_TAG, _FLOAT, list("-+.0123456789"))
_Loader.add_constructor(_INT_TAG, _Loader.construct_yaml_int)
_Loader.add_constructor(_FLOAT_TAG, _Loader.construct_yaml_float)


class _Dumper(yaml.SafeDumper):
    """Quotes a string that a YAML 1.2 reader (``_Loader``) or a YAML 1.1 one would read as a number."""


_Dumper.add_implicit_resolver(_INT_TAG, _INT, list("-+0123456789"))
_Dumper.add_implicit_resolver(_FLOAT_TAG, _FLOAT, list("-+.0123456789"))


def _unshare(value: Any) -> Any:
    """A copy in which no two places share a mapping or list (so ``--set`` changes one place only)."""
    if isinstance(value, dict):
        return {k: _unshare(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unshare(v) for v in value]
    return value


def _read_yaml(text: str) -> tuple[Any, yaml.Node | None]:
    """The value of a one-document YAML text and its node graph; raises ``yaml.YAMLError``."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError:
        raise
    except Exception as e:  # the reader's own bug guard: never a traceback for a user's file
        raise _ReadError(f"cannot read the document ({type(e).__name__})", None) from None
    finally:
        loader.dispose()
    return (_unshare(data) if loader.aliased else data), node


def _yaml_problem(e: yaml.YAMLError, text: str) -> tuple[int | None, str]:
    """The 1-based line (when known) and one-line description of a YAML error in ``text``."""
    if isinstance(e, yaml.reader.ReaderError):
        char = e.character if isinstance(e.character, int) else ord(e.character)
        return text.count("\n", 0, e.position) + 1, f"character #x{char:04x} is not allowed in YAML"
    if not isinstance(e, yaml.MarkedYAMLError):
        return None, " ".join(str(e).split())
    problem = e.problem or e.context or type(e).__name__
    if e.context and e.context.startswith("found "):  # e.g. "found duplicate anchor 'a'; first occurrence"
        problem = e.context.split(";")[0]
    label = "" if isinstance(e, _ReadError | yaml.constructor.ConstructorError) else "YAML syntax error: "
    mark = e.problem_mark
    return (mark.line + 1 if mark is not None else None), label + " ".join(problem.split())


def _line_index(node: yaml.Node | None, prefix: tuple[Any, ...] = (),
                seen: set[int] | None = None) -> dict[tuple[Any, ...], int]:
    """Map each key path in a composed YAML document to its 1-based line. An aliased node is indexed once, where
    its anchor is; a problem under an alias is reported on the alias's line."""
    seen = set() if seen is None else seen
    lines: dict[tuple[Any, ...], int] = {}
    if node is None or id(node) in seen:
        return lines
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                path = (*prefix, key_node.value)
                lines[path] = key_node.start_mark.line + 1
                lines.update(_line_index(value_node, path, seen))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*prefix, i)] = item.start_mark.line + 1
            lines.update(_line_index(item, (*prefix, i), seen))
    return lines


def _read_spec_file(path: Path) -> str:
    """The text of a spec file; a missing, unreadable, oversized or binary file is one ``SpecError`` line."""

    def fail(problem: str) -> SpecError:
        return SpecError([f"{path}: {problem}"])

    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError, ValueError):
        raise fail("no such spec file") from None
    except OSError as e:
        raise fail(f"cannot read it ({e.strerror or e})") from None
    if stat.S_ISDIR(info.st_mode):
        raise fail("is a directory, not a spec file")
    if not stat.S_ISREG(info.st_mode):
        raise fail("is not a regular file")
    too_big = f"is over the {MAX_SPEC_BYTES}-byte limit for a spec file"
    if info.st_size > MAX_SPEC_BYTES:
        raise fail(f"{too_big} ({info.st_size} bytes)")
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        raise fail(f"cannot read it ({(e.strerror or str(e)).lower()})") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise fail(too_big)
    if b"\0" in raw:
        raise fail("is not a text file (it holds NUL bytes); a spec is YAML text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise fail(f"is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> tuple[str, ...]:
    """Set ``dotted`` (list indices as numbers) to ``value``; returns the path set, indices made non-negative."""
    parts = dotted.split(".")
    resolved: list[str] = []
    target: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        key: Any = int(part) if isinstance(target, list) and part.lstrip("-").isdigit() else part
        if isinstance(target, list):
            if not isinstance(key, int) or not -len(target) <= key < len(target):
                raise KeyError(f"'{_short('.'.join(parts[: i + 1]))}' is not an index into a list of {len(target)}")
            key %= len(target)
        elif not isinstance(target, dict):
            raise KeyError(f"'{_short('.'.join(parts[:i]))}' is not a mapping")
        resolved.append(str(key))
        if last:
            target[key] = value
        else:
            if isinstance(target, dict) and (key not in target or target[key] is None):
                target[key] = {}
            target = target[key]
    return tuple(resolved)


def _nesting(value: Any) -> int:
    """Levels of mappings and lists in ``value`` (0 for a scalar)."""
    if isinstance(value, dict):
        return 1 + max(map(_nesting, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_nesting, value), default=0)
    return 0


def set_label(item: str) -> str:
    """How a problem names the ``--set`` item ``item`` (shortened past 100 characters)."""
    return f"--set {_short(item, 100)}"


def apply_overrides(data: dict[str, Any], sets: list[str]) -> dict[tuple[str, ...], str]:
    """Apply ``dotted.key=value`` items (values read as YAML, like the file) in place; returns each path set and
    the item that set it last."""
    touched: dict[tuple[str, ...], str] = {}
    for item in sets:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise SpecError([f"{set_label(item)}: expected dotted.key=value"])
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if len(parts) > MAX_DEPTH:
            raise SpecError([f"{set_label(item)}: the key is {len(parts)} levels deep; a spec nests at most "
                             f"{MAX_DEPTH}"])
        if not all(part.strip() for part in parts):
            raise SpecError([f"{set_label(item)}: the key '{_short(key.strip())}' has an empty part (two dots in "
                             f"a row, or a dot at an end)"])
        try:
            value = _read_yaml(raw)[0] if raw.strip() else ""
        except yaml.YAMLError as e:
            raise SpecError([f"{set_label(item)}: value is not valid YAML ({_yaml_problem(e, raw)[1]})"]) from None
        if len(parts) + _nesting(value) > MAX_DEPTH:
            raise SpecError([f"{set_label(item)}: the key ({len(parts)} levels) and its value nest the spec more "
                             f"than {MAX_DEPTH} levels deep"])
        try:
            path = _set_path(data, key.strip(), value)
        except KeyError as e:
            raise SpecError([f"{set_label(item)}: {e.args[0]}"]) from None
        touched.pop(path, None)
        touched[path] = item
    return touched


# problems about ids first, then other values, then unknown keys, then missing fields (often a misspelled key's echo)
_RANK = {"extra_forbidden": 2, "missing": 3}


def _describe(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "missing":
        return "required field is missing"
    return msg


def _ids(data: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], str, str]]:
    """(field path, registry kind, id) of each registered id a spec mapping names, in ``check_ids``'s order."""

    def get(obj: Any, key: str) -> Any:
        return obj.get(key) if isinstance(obj, dict) else None

    if isinstance(env := get(data, "environment"), dict) and isinstance(env.get("id"), str):
        yield ("environment", "id"), "environments", env["id"]
    for i, tool in enumerate(tools if isinstance(tools := data.get("tools"), list) else []):
        if isinstance(tool, str):
            yield ("tools", i), "tools", tool
    for i, reward in enumerate(rewards if isinstance(rewards := data.get("reward"), list) else []):
        if isinstance(reward_id := get(reward, "id"), str):
            yield ("reward", i, "id"), "rewards", reward_id
    if isinstance(fmt := get(get(data, "model"), "tool_call_format"), str):
        yield ("model", "tool_call_format"), "tool_parsers", fmt
    for split in ("train", "eval", "dev"):
        if isinstance(dataset_id := get(get(get(data, "data"), split), "id"), str):
            yield ("data", split, "id"), "datasets", dataset_id


def _args(data: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], str, str, dict[str, Any]]]:
    """(field path of ``args``, registry kind, id, args) of each plugin the spec passes arguments to."""
    env = data.get("environment")
    if isinstance(env, dict) and isinstance(env.get("id"), str) and isinstance(env.get("args", {}), dict):
        yield ("environment", "args"), "environments", env["id"], env.get("args") or {}
    for i, reward in enumerate(rewards if isinstance(rewards := data.get("reward"), list) else []):
        if isinstance(reward, dict) and isinstance(reward.get("id"), str) and isinstance(reward.get("args"), dict):
            yield ("reward", i, "args"), "rewards", reward["id"], reward["args"]
    splits: dict[str, Any] = data["data"] if isinstance(data.get("data"), dict) else {}
    for split in ("train", "eval", "dev"):
        ds = splits.get(split)
        if isinstance(ds, dict) and isinstance(ds.get("id"), str) and isinstance(ds.get("args", {}), dict):
            yield ("data", split, "args"), "datasets", ds["id"], ds.get("args") or {}


MAX_SECONDS = 7 * 24 * 3600  # a duration argument (``timeout_s``, ``time_limit_s``, ...): at most a week
_SECONDS_KEY = re.compile(r"(?:_s|_secs?|_seconds)$|timeout|time_limit", re.IGNORECASE)
_SEED_KEY = re.compile(r"^(?:.*_)?seed$", re.IGNORECASE)


def _free_mappings(data: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], dict[str, Any], bool]]:
    """(field path, mapping, whether key names say what a number means) of each free-form mapping of a spec: the
    plugins' ``args``, ``backend.options`` and ``backend.overrides`` (passed on verbatim: only finiteness there)."""

    def get(obj: Any, key: str) -> Any:
        return obj.get(key) if isinstance(obj, dict) else None

    if isinstance(args := get(get(data, "environment"), "args"), dict):
        yield ("environment", "args"), args, True
    for i, reward in enumerate(rewards if isinstance(rewards := data.get("reward"), list) else []):
        if isinstance(args := get(reward, "args"), dict):
            yield ("reward", i, "args"), args, True
    for split in ("train", "eval", "dev"):
        if isinstance(args := get(get(get(data, "data"), split), "args"), dict):
            yield ("data", split, "args"), args, True
    if isinstance(options := get(get(data, "backend"), "options"), dict):
        yield ("backend", "options"), options, True
    if isinstance(overrides := get(get(data, "backend"), "overrides"), dict):
        yield ("backend", "overrides"), overrides, False


def _number_problem(key: Any, value: Any, named: bool) -> str | None:
    """Why a number in a free-form mapping would poison a run, or None: not finite, beyond 64 bits, and (``named``)
    a negative, zero-timeout or over-a-week duration key, or a seed outside numpy's range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {'.nan' if math.isnan(value) else ('-' if value < 0 else '') + '.inf'}"
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return f"{_short(value, 30)} does not fit a 64-bit integer"
    name = str(key)
    if named and _SECONDS_KEY.search(name):
        if value < 0:
            return f"must not be negative (seconds), got {value:g}"
        if value == 0 and re.search("timeout|time_limit", name, re.IGNORECASE):
            return "must be more than 0 seconds (0 would time out at once)"
        if value > MAX_SECONDS:
            return f"{value:g} seconds is more than a week ({MAX_SECONDS} s)"
    if named and _SEED_KEY.match(name) and (isinstance(value, int) or value.is_integer()):
        if not 0 <= value <= MAX_SEED:
            return f"a seed must be 0 .. {MAX_SEED} (what numpy and the backends accept), got {value:g}"
    return None


def _free_value_problems(value: Any, loc: tuple[Any, ...], named: bool) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(field path, problem) of each number under a free-form mapping that would poison a run."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(item, dict | list):
            yield from _free_value_problems(item, (*loc, key), named)
        elif (problem := _number_problem(key if isinstance(value, dict) else loc[-1], item, named)) is not None:
            yield (*loc, key), problem


def runs_listed_tools(factory: Any) -> bool:
    """Whether an environment factory runs the tools a spec lists (``tools:``): it must take a ``tools`` argument,
    and a class must be a ``ToolEnvironment`` (another environment class acts on its own and ignores them); a
    factory function that takes ``tools`` is believed."""
    from agentbridge.tools import ToolEnvironment

    if isinstance(factory, type) and not issubclass(factory, ToolEnvironment):
        return False
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # no signature to read: believe it
        return True
    return any(p.name == "tools" or p.kind is p.VAR_KEYWORD for p in params)


def unused_tools_problem(env_id: str, factory: Any, tools: list[str]) -> str | None:
    """``tools: ...`` problem when the environment would not run the listed tools; None when it would (or none
    are listed)."""
    if not tools or runs_listed_tools(factory):
        return None
    return (f"environment '{env_id}' does not run listed tools, so {', '.join(map(_short, tools[:3]))}"
            f"{' ...' if len(tools) > 3 else ''} would be shown to the model and never run; remove the list")


def _where(loc: tuple[Any, ...], source: str, lines: dict[tuple[Any, ...], int],
           overridden: Mapping[tuple[str, ...], str]) -> str:
    """``--set KEY=VALUE`` when a ``--set`` gave the field (or a mapping above it), else ``file:line``."""
    as_str = tuple(str(p) for p in loc)
    for path, item in reversed(list(overridden.items())):
        if as_str[: len(path)] == path:
            return set_label(item)
    found = next((loc[:n] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
    where = f"{source}:{lines[found]}" if found is not None else source
    inside = [item for path, item in overridden.items() if as_str and path[: len(as_str)] == as_str]
    return f"{where} (after {set_label(inside[-1])})" if inside else where


def parse_spec(data: Any, source: str = "<spec>", lines: dict[tuple[Any, ...], int] | None = None,
               overridden: Mapping[tuple[str, ...], str] | None = None,
               registries: Mapping[str, IdRegistry] | None = None) -> Spec:
    """Validate a spec mapping; raise SpecError with one line per problem, the most specific first.

    ``registries`` (kind → registered ids, e.g. ``get_plugins().registries``): also report every environment,
    tool, reward, tool-call parser and dataset id none of them holds, and every ``args`` key or value the plugin
    it is passed to does not accept (``agentbridge.plugin_args``).
    """
    if not isinstance(data, dict):
        raise SpecError([f"{source}: the spec must be a YAML mapping, got {type(data).__name__}"])
    lines, overridden, registries = lines or {}, overridden or {}, registries or {}
    problems: list[tuple[int, str]] = []
    spec: Spec | None = None
    for loc, kind, id in _ids(data):
        registry = registries.get(kind)
        if registry is not None and id not in registry:
            problems.append((0, f"{_where(loc, source, lines, overridden)}: {field_path(loc)}: {registry.unknown(id)}"))
    envs, env, tools = registries.get("environments"), data.get("environment"), data.get("tools")
    if (envs is not None and isinstance(env, dict) and isinstance(env_id := env.get("id"), str) and env_id in envs
            and isinstance(tools, list) and all(isinstance(t, str) for t in tools)):
        if (problem := unused_tools_problem(env_id, envs.get(env_id), tools)) is not None:
            problems.append((0, f"{_where(('tools',), source, lines, overridden)}: tools: {problem}"))
    reported: set[tuple[Any, ...]] = set()
    for loc, kind, id, args in _args(data):
        registry = registries.get(kind)
        if registry is not None and id in registry:
            for key, problem in args_problems(kind, registry.get(id), args):
                at = loc + key
                reported.add(at)
                problems.append((0, f"{_where(at, source, lines, overridden)}: {field_path(at)}: {problem} ({id})"))
    for loc, mapping, named in _free_mappings(data):
        for at, problem in _free_value_problems(mapping, loc, named):
            if at not in reported:
                problems.append((1, f"{_where(at, source, lines, overridden)}: {field_path(at)}: {problem}"))
    try:
        spec = Spec.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            loc = tuple(err["loc"])
            problems.append((_RANK.get(err["type"], 1),
                             f"{_where(loc, source, lines, overridden)}: {field_path(loc)}: {_describe(err)}"))
    if problems or spec is None:
        raise SpecError([line for _, line in sorted(problems, key=lambda p: p[0])])
    _remember(spec, source, lines, overridden)
    return spec


# where each parsed spec's fields came from (by id; an entry goes when its spec does), for ``locate``
_ORIGINS: dict[int, tuple[str, dict[tuple[Any, ...], int], dict[tuple[str, ...], str]]] = {}


def _remember(spec: Spec, source: str, lines: dict[tuple[Any, ...], int],
              overridden: Mapping[tuple[str, ...], str]) -> None:
    _ORIGINS[id(spec)] = (source, lines, dict(overridden))
    weakref.finalize(spec, _ORIGINS.pop, id(spec), None)


_FIELD = re.compile(r"[A-Za-z_][\w-]*(?:\.[^.\[\]:\s]+|\[\d+\])*")


def locate(spec: Spec, problem: str, source: str | None = None) -> str:
    """``problem`` (``field.path: what is wrong``, as ``agentbridge.preflight`` writes it) prefixed with where the
    field came from: ``file:line``, or the ``--set`` that gave it, like the problems ``load_spec`` reports; just
    ``source`` (default: the spec's file) when the spec was not loaded from a file or the field has no line."""
    origin = _ORIGINS.get(id(spec))
    if source is None and origin is not None:
        source = origin[0]
    field = _FIELD.match(problem)
    if origin is None or source is None or field is None or problem[field.end():field.end() + 2] != ": " \
            or field.group().split(".")[0].split("[")[0] not in Spec.model_fields:
        return f"{source}: {problem}" if source else problem
    loc = tuple(int(part[1:-1]) if part.startswith("[") else part
                for part in re.findall(r"\[\d+\]|[^.\[\]]+", field.group()))
    return f"{_where(loc, source, origin[1], origin[2])}: {problem}"


def load_spec(path: str | Path, sets: list[str] | None = None,
              registries: Mapping[str, IdRegistry] | None = None) -> Spec:
    """Read a YAML spec file, apply ``--set`` overrides, validate (ids too, given ``registries``)."""
    path = Path(path)
    text = _read_spec_file(path)
    try:
        data, node = _read_yaml(text)
    except yaml.YAMLError as e:
        line, problem = _yaml_problem(e, text)
        raise SpecError([f"{path}:{line}: {problem}" if line else f"{path}: {problem}"]) from None
    if data is None:
        data = {}
    overridden = apply_overrides(data, sets or []) if isinstance(data, dict) else {}
    return parse_spec(data, str(path), _line_index(node), overridden, registries)


def spec_hash(spec: Spec) -> str:
    """Stable hash of what the resolved spec trains (sha256 of its canonical JSON; ``logging`` left out)."""
    canonical = json.dumps(spec.model_dump(mode="json", exclude={"logging"}), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def dump_spec(spec: Spec) -> str:
    """The resolved spec as YAML (read back by ``load_spec`` to the same values)."""
    return yaml.dump(spec.model_dump(mode="json"), Dumper=_Dumper, sort_keys=False)

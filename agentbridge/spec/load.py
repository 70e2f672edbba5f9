"""Load a spec from YAML with ``--set`` overrides; every problem is one line naming file, field and line."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agentbridge.spec.models import Spec


class SpecError(ValueError):
    """A spec problem a user caused. ``problems`` holds one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def field_path(loc: tuple[Any, ...]) -> str:
    """('reward', 1, 'weight') → 'reward[1].weight'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _line_index(node: yaml.Node | None, prefix: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], int]:
    """Map each key path in a composed YAML document to its 1-based line."""
    lines: dict[tuple[Any, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = (*prefix, key_node.value)
            lines[path] = key_node.start_mark.line + 1
            lines.update(_line_index(value_node, path))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*prefix, i)] = item.start_mark.line + 1
            lines.update(_line_index(item, (*prefix, i)))
    return lines


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    target: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        key: Any = int(part) if isinstance(target, list) and part.lstrip("-").isdigit() else part
        if isinstance(target, list):
            if not isinstance(key, int) or not -len(target) <= key < len(target):
                raise KeyError(f"'{'.'.join(parts[: i + 1])}' is not an index into a list of {len(target)}")
        elif not isinstance(target, dict):
            raise KeyError(f"'{'.'.join(parts[:i])}' is not a mapping")
        if last:
            target[key] = value
        else:
            if isinstance(target, dict) and (key not in target or target[key] is None):
                target[key] = {}
            target = target[key]


def apply_overrides(data: dict[str, Any], sets: list[str]) -> set[tuple[str, ...]]:
    """Apply ``dotted.key=value`` items (values parsed as YAML) in place; returns the paths set."""
    touched: set[tuple[str, ...]] = set()
    for item in sets:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise SpecError([f"--set {item}: expected dotted.key=value"])
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as e:
            raise SpecError([f"--set {item}: value is not valid YAML ({e.__class__.__name__})"]) from None
        try:
            _set_path(data, key.strip(), value)
        except KeyError as e:
            raise SpecError([f"--set {item}: {e.args[0]}"]) from None
        touched.add(tuple(key.strip().split(".")))
    return touched


def _describe(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "missing":
        return "required field is missing"
    return msg


def parse_spec(data: Any, source: str = "<spec>", lines: dict[tuple[Any, ...], int] | None = None,
               overridden: set[tuple[str, ...]] | None = None) -> Spec:
    """Validate a spec mapping; raise SpecError with one line per problem."""
    if not isinstance(data, dict):
        raise SpecError([f"{source}: the spec must be a YAML mapping, got {type(data).__name__}"])
    try:
        return Spec.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = tuple(err["loc"])
            where = source
            found = next((loc[:n] for n in range(len(loc), 0, -1) if loc[:n] in (lines or {})), None)
            if overridden and tuple(str(p) for p in loc) in overridden:
                where = f"{source} (--set)"
            elif found is not None and lines:
                where = f"{source}:{lines[found]}"
            problems.append(f"{where}: {field_path(loc)}: {_describe(err)}")
        raise SpecError(problems) from None


def load_spec(path: str | Path, sets: list[str] | None = None) -> Spec:
    """Read a YAML spec file, apply ``--set`` overrides, validate."""
    path = Path(path)
    if not path.is_file():
        raise SpecError([f"{path}: no such spec file"])
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
        lines = _line_index(yaml.compose(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError([f"{where}: YAML syntax error: {problem}"]) from None
    if data is None:
        data = {}
    overridden = apply_overrides(data, sets or []) if isinstance(data, dict) else set()
    return parse_spec(data, str(path), lines, overridden)


def spec_hash(spec: Spec) -> str:
    """Stable hash of the resolved spec (sha256 of its canonical JSON)."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def dump_spec(spec: Spec) -> str:
    """The resolved spec as YAML."""
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)

"""The arguments a plugin accepts, read from what it declares, and checked before any work.

A plugin declares its arguments either as a pydantic model on the registered object (``Args``) or, by default,
with its typed signature: an environment class's ``__init__``, a dataset builder's or a reward function's
parameters. The parameters agentbridge passes itself (an environment's ``tools``, a dataset's ``split``/``size``/
``seed``, a reward's trajectory and task) are not spec arguments. A signature with ``**kwargs`` accepts any key.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

# what agentbridge passes by itself, per registry kind (rewards also get their first two positional parameters)
PASSED_BY_AGENTBRIDGE = {"environments": {"tools"}, "datasets": {"split", "size", "seed"}, "rewards": set()}
_POSITIONAL_SKIPPED = {"environments": 0, "datasets": 0, "rewards": 2}


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj, eval_str=True)
    except (NameError, TypeError, SyntaxError):  # an annotation only importable for type checkers
        try:
            return inspect.signature(obj)
        except (TypeError, ValueError):
            return None
    except ValueError:  # a builtin without a signature
        return None


def args_model(kind: str, obj: Any) -> type[BaseModel] | None:
    """The pydantic model of ``obj``'s spec arguments (``None``: nothing declared, anything goes)."""
    declared = getattr(obj, "Args", None)
    if isinstance(declared, type) and issubclass(declared, BaseModel):
        return declared
    signature = _signature(obj)
    if signature is None:
        return None
    fields: dict[str, Any] = {}
    extra = "forbid"
    params = list(signature.parameters.values())[_POSITIONAL_SKIPPED.get(kind, 0):]
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            extra = "allow"
            continue
        if p.kind is p.VAR_POSITIONAL or p.name in PASSED_BY_AGENTBRIDGE.get(kind, set()):
            continue
        annotation = Any if p.annotation is p.empty or isinstance(p.annotation, str) else p.annotation
        fields[p.name] = (annotation, ... if p.default is p.empty else p.default)
    config = ConfigDict(extra=extra, arbitrary_types_allowed=True)  # type: ignore[typeddict-item]
    name = getattr(obj, "__name__", type(obj).__name__)
    try:
        return create_model(f"{name}Args", __config__=config, **fields)
    except Exception:  # noqa: BLE001 - a type pydantic cannot build a schema for: fall back to names only
        loose = {k: (Any, default) for k, (_, default) in fields.items()}
        return create_model(f"{name}Args", __config__=config, **loose)  # type: ignore[call-overload]


def args_problems(kind: str, obj: Any, args: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    """(key path inside ``args``, problem) for each argument ``obj`` would refuse; empty when all fit."""
    model = args_model(kind, obj)
    if model is None:
        return []
    try:
        model.model_validate(args)
    except ValidationError as e:
        known = sorted(model.model_fields)
        problems = []
        for err in e.errors():
            loc = tuple(err["loc"])
            if err["type"] == "extra_forbidden":
                close = difflib.get_close_matches(str(loc[0]), known, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(known) or 'none'}"
                problems.append((loc, f"unknown argument{hint}"))
            elif err["type"] == "missing":
                problems.append((loc, "required argument is missing"))
            else:
                problems.append((loc, str(err["msg"]).removeprefix("Value error, ")))
        return problems
    return []


def args_schema(kind: str, obj: Any) -> dict[str, Any] | None:
    """JSON Schema of ``obj``'s spec arguments, for editors (``None`` when it cannot be written)."""
    model = args_model(kind, obj)
    if model is None:
        return None
    try:
        return model.model_json_schema()
    except Exception:  # noqa: BLE001 - an argument type without a JSON form
        return None

"""What an adapter checks in a spec before it compiles: algorithm, options, recipe, images, groups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentbridge.backends import Problem, algorithm_problem, known_capabilities
from agentbridge.spec import Spec
from agentbridge.spec.recipe import recipe_key


def algorithm_check(backend: Any, spec: Spec, why_not: Mapping[str, str] | None = None) -> list[Problem]:
    """The problem when ``backend`` cannot run the spec's algorithm (naming the backends that can), with the reason
    from ``why_not`` (algorithm -> why) when given."""
    problem = algorithm_problem(spec, backend.name, backend.capabilities(), known_capabilities())
    if problem is None:
        return []
    if why_not is not None:
        problem.message += f" ({why_not.get(spec.algorithm.name, 'not mapped')})"
    return [problem]


def unknown_options(backend: Any, spec: Spec, known: Iterable[str], label: str) -> list[Problem]:
    """One problem per ``backend.options`` key ``backend`` does not know; none when the options belong to another
    backend (the spec's ``backend.name``)."""
    if spec.backend.name != backend.name:
        return []
    names = sorted(known)
    return [Problem(f"backend.options.{key}", f"unknown {label} option; known: {', '.join(names)}")
            for key in spec.backend.options if key not in names]


def foreign_note(backend: Any, spec: Spec, label: str) -> str | None:
    """The note that the spec's ``backend.options`` / ``backend.overrides`` belong to its own backend and are not
    applied to ``backend``'s job; None when there are none or they are ``backend``'s."""
    foreign = [k for k in ("options", "overrides") if getattr(spec.backend, k)]
    if not foreign or spec.backend.name == backend.name:
        return None
    return (f"backend.{' and backend.'.join(foreign)} are for backend {spec.backend.name} (backend.name): "
            f"not applied to the {label} job")


def group_problem(spec: Spec, grouped: Iterable[str]) -> list[Problem]:
    """The problem when the spec's algorithm computes advantages within a group and a group has one sample."""
    if spec.algorithm.name in set(grouped) and spec.algorithm.group_size < 2:
        return [Problem("algorithm.group_size", f"{spec.algorithm.name} computes advantages within a group: it "
                        "needs at least 2 samples per prompt")]
    return []


def multimodal_problem(backend: Any, spec: Spec) -> list[Problem]:
    """The problem when the spec's model sees images and ``backend`` cannot feed them (it would train on the image
    placeholders alone), naming the backends that can."""
    from agentbridge.models import is_vlm

    if backend.capabilities().multimodal or not is_vlm(spec.model.path):
        return []
    can = sorted(n for n, c in known_capabilities().items() if c.multimodal and n != backend.name)
    return [Problem("model.path", f"{spec.model.path} is a vision-language model and {backend.name} feeds it no "
                    f"images (its policy would train on image placeholders); backends that can: "
                    f"{', '.join(can) or 'none installed'}")]


def owned_override_problems(backend: Any, spec: Spec, owned: Mapping[str, str]) -> list[Problem]:
    """One problem per ``backend.overrides`` key that sets what ``backend`` writes from a spec field (``owned``: the
    backend's dotted key -> the spec field to set instead); nested overrides are read as dotted keys."""
    if spec.backend.name != backend.name or not owned:
        return []
    from agentbridge.adapter.job import flatten

    keys = flatten(spec.backend.overrides)
    return [Problem(f"backend.overrides.{key}", f"is written from {owned[key]}: set that instead (an override of it "
                    "would make the job differ from its spec, unseen by compare)")
            for key in keys if key in owned]


def recipe_problems(backend: Any, spec: Spec) -> list[Problem]:
    """What in the spec's recipe ``backend`` cannot honour (its ``recipe_refusals``), one line each, naming the
    installed backends that can run the same spec's recipe and algorithm."""
    refusals: dict[str, str] = getattr(backend, "recipe_refusals", lambda _s: {})(spec)
    if not refusals:
        return []
    from agentbridge.plugins import get_plugins

    others: list[tuple[str, dict[str, str]]] = []
    for name in get_plugins().backends.ids():
        if name == backend.name:
            continue
        try:
            other = get_plugins().backends.get(name)
            if spec.algorithm.name in other.capabilities().algorithms:
                others.append((name, getattr(other, "recipe_refusals", lambda _s: {})(spec)))
        except Exception:  # noqa: BLE001 - a broken backend package is left out of what the others are told
            continue
    problems = []
    for where, why in refusals.items():
        can = sorted(name for name, theirs in others if where not in theirs)
        hint = f"; backends that can: {', '.join(can)}" if can else "; no installed backend can"
        value: Any = spec
        for part in where.split("."):
            value = getattr(value, part, None)
        field = where.rsplit(".", 1)[-1]
        if isinstance(value, (str, int, float)):
            setting = f"{field} {value}"
        elif field in ("is_correction", "rollout"):  # the block as the refusal is keyed: token_mask, async+partial
            setting = f"{field} {recipe_key(field, value)}"
        else:
            setting = where
        problems.append(Problem(where, f"{backend.name} cannot run {spec.algorithm.name} with {setting} ({why}){hint}"))
    return problems


def option_problems(backend: Any, spec: Spec, model: Any) -> list[Problem]:
    """One problem per ``backend.options`` value of the spec that ``model`` (the adapter's pydantic options model)
    refuses, strictly (no ``"3"`` for 3, no ``true`` for 1): ``must be <the field's description>, got <value>``. Keys
    the model does not have are :func:`unknown_options`' to report; another backend's options are not checked."""
    from pydantic import ValidationError

    if spec.backend.name != backend.name:
        return []
    given = {k: v for k, v in spec.backend.options.items() if k in model.model_fields}
    try:
        model.model_validate(given, strict=True)
    except ValidationError as e:
        keys = list(dict.fromkeys(str(err["loc"][0]) for err in e.errors() if err["loc"]))
        return [Problem(f"backend.options.{key}", f"must be {model.model_fields[key].description or 'valid'}, "
                        f"got {given[key]!r}") for key in keys]
    return []

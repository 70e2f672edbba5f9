"""How many tasks a registered dataset can produce, and building a data split that holds the dataset to its size.

A dataset (``register_datasets``) may declare how many distinct tasks each of its splits can produce: a callable
``capacity`` attribute on the registered builder, called with the builder's own keyword arguments except ``size``
(``split``, ``seed`` and the spec's ``args``), returning an ``int`` (the most distinct tasks that split yields with
those arguments) or ``None`` (unbounded or unknown). It may raise ValueError for arguments the builder would refuse.
Declaring it is optional: without it a split is held to its size only once it is built. Attach it with
:func:`declares_capacity` or by assigning ``builder.capacity = fn``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from agentbridge.env import Task
    from agentbridge.plugins import Plugins
    from agentbridge.spec.schema import DatasetSpec, Spec

DEFAULT_SIZE = 100  # tasks a split gets when neither the caller nor ``data.<split>.size`` says
SPLITS = ("train", "eval", "dev")
_PASSED = {"split", "size", "seed"}

F = TypeVar("F", bound=Callable[..., Any])


def declares_capacity(capacity: Callable[..., int | None]) -> Callable[[F], F]:
    """Decorator for a dataset builder: ``capacity(split=..., seed=..., **args)`` is how many distinct tasks it can
    produce (``None``: no bound)."""

    def attach(build: F) -> F:
        build.capacity = capacity  # type: ignore[attr-defined]
        return build

    return attach


def declared_capacity(build: Callable[..., Any], ds: DatasetSpec) -> int | None:
    """The capacity ``build`` declares for ``ds``'s split and arguments; ``None`` when it declares none.

    A ValueError from the declaration (arguments it refuses) propagates; a declaration that cannot be called with
    those arguments, or returns anything but a non-negative ``int`` or ``None``, is a ValueError naming the dataset.
    """
    capacity = getattr(build, "capacity", None)
    if not callable(capacity):
        return None
    try:
        n = capacity(split=ds.split, seed=ds.seed, **ds.args)
    except TypeError as e:  # a declaration that does not take the builder's arguments
        raise ValueError(f"{ds.id}: its capacity() failed: TypeError: {e}") from e
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"{ds.id}: its capacity() returned {n!r}; a dataset's capacity is a non-negative int "
                         f"or None")
    return n


def seed_block_capacity(seed: int, span: int) -> int:
    """Tasks one split can have when task ``i`` of ``size`` gets seed ``base + seed * size + i`` and each split owns
    ``span`` seeds from its ``base``: ``span // (seed + 1)`` (more would reach the next split's seeds). A negative
    ``seed`` is a ValueError (its seeds would fall before the split's base)."""
    if seed < 0:
        raise ValueError(f"seed must be 0 or more, got {seed} (task i gets seed base + seed * size + i)")
    return span // (seed + 1)


def _shown(value: Any) -> str:
    if isinstance(value, str | bool | int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def described_args(build: Callable[..., Any], ds: DatasetSpec) -> str:
    """The arguments a split is built with, as ``k=v, ...``: the spec's ``args``, the builder's scalar defaults and
    the seed when it is not 0."""
    values: dict[str, Any] = {}
    try:
        params = list(inspect.signature(build).parameters.values())
    except (TypeError, ValueError):
        params = []
    for p in params:
        if p.name in _PASSED or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is p.empty:
            continue
        if p.default is not None and isinstance(p.default, str | bool | int | float):
            values[p.name] = p.default
    values.update(ds.args)
    if ds.seed != 0:
        values["seed"] = ds.seed
    return ", ".join(f"{k}={_shown(v)}" for k, v in values.items())


def capacity_line(id: str, capacity: int, split: str, asked: int, args: str = "") -> str:
    """``<id> can produce at most N distinct <split> tasks (args), asked for M``: one line, also for a builder's own
    ValueError."""
    shown = f" ({args})" if args else ""
    return f"{id} can produce at most {capacity} distinct {split} tasks{shown}, asked for {asked}"


def _where(key: str, message: str) -> str:
    return message if message.startswith((f"data.{key}:", f"data.{key}.")) else f"data.{key}: {message}"


def build_split(ds: DatasetSpec, key: str, plugins: Plugins, size: int | None = None) -> list[Task]:
    """The tasks of the generator dataset ``ds`` (``data.<key>``): ``size`` of them, else ``ds.size``, else 100.

    Refused before building (ValueError, one line naming ``data.<key>``) when the dataset declares fewer distinct
    tasks than that; a ValueError the builder raises gets the same prefix; a builder that returns fewer tasks than
    asked is refused too (``data.train: <id> returned 5 tasks, asked for 100``).
    """
    assert ds.id is not None, "build_split builds a registered dataset (data.<split>.id), not a file"
    build = plugins.datasets.get(ds.id)
    asked = size or ds.size or DEFAULT_SIZE
    try:
        capacity = declared_capacity(build, ds)
        if capacity is not None and asked > capacity:
            raise ValueError(capacity_line(ds.id, capacity, ds.split, asked, described_args(build, ds)))
        tasks = list(build(split=ds.split, size=asked, seed=ds.seed, **ds.args))
    except ValueError as e:
        raise ValueError(_where(key, str(e))) from e
    if len(tasks) < asked:
        raise ValueError(f"data.{key}: {ds.id} returned {len(tasks)} tasks, asked for {asked}")
    return tasks


def dataset_size_problems(spec: Spec, plugins: Plugins) -> list[str]:
    """One line per data split that cannot have the tasks it asks for (``validate``): a declared capacity below its
    size (checked without building a task), or, for a dataset that declares none, a build that fails or returns fewer
    tasks. Splits read from a file, and ids no plugin registered (``check_ids`` reports those), are skipped."""
    problems: list[str] = []
    for key in SPLITS:
        ds: DatasetSpec | None = getattr(spec.data, key)
        if ds is None or ds.id is None or ds.id not in plugins.datasets:
            continue
        build = plugins.datasets.get(ds.id)
        asked = ds.size or DEFAULT_SIZE
        try:
            capacity = declared_capacity(build, ds)
            if capacity is None:
                build_split(ds, key, plugins)
            elif asked > capacity:
                problems.append(_where(key, capacity_line(ds.id, capacity, ds.split, asked, described_args(build, ds))))
        except ValueError as e:
            problems.append(_where(key, str(e)))
    return problems


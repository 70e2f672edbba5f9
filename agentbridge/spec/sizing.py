"""The sizing fields of ``resources`` (:data:`SIZING_FIELDS`): how the trainer fits the model on its GPUs and how often
it checkpoints, in one set of names every backend maps to its own.

Each field is null by default, meaning the backend's own default, so a spec without them compiles to the job it
compiled to before they existed. A set value is written to each backend's own setting (TRL
``per_device_train_batch_size``, veRL ``ppo_micro_batch_size_per_gpu``, slime ``--micro-batch-size``, ...); where an
adapter already had an option of the same meaning (``backend.options``, its *twin*), the field is that option's
default (:func:`sized_options`) and an option that says otherwise is refused (:func:`option_conflicts`); where a
backend has no such setting, its check refuses the spec in one line naming the backends that can
(:func:`sizing_refusals`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbridge.spec.schema import Spec

SIZING_FIELDS = ("micro_batch_size", "gradient_checkpointing", "save_steps", "save_total_limit")


def sizing(spec: Spec) -> dict[str, Any]:
    """The sizing fields the spec sets (``resources.<field>`` not null), by name."""
    return {name: value for name in SIZING_FIELDS if (value := getattr(spec.resources, name)) is not None}


def sized_options(spec: Spec, twins: Mapping[str, str]) -> dict[str, Any]:
    """The spec's sizing fields under the names of their ``backend.options`` twins (``twins``: field -> option), to
    lay over an adapter's option defaults and under the spec's own ``backend.options``."""
    return {twins[name]: value for name, value in sizing(spec).items() if name in twins}


def backend_options(spec: Spec, backend: str, defaults: Mapping[str, Any], twins: Mapping[str, str]) -> dict[str, Any]:
    """``backend``'s options for ``spec``: its ``defaults``, the spec's sizing fields under their twins' names
    (:func:`sized_options`), then the spec's ``backend.options`` when ``backend`` is the spec's backend."""
    own = spec.backend.options if spec.backend.name == backend else {}
    return {**defaults, **sized_options(spec, twins), **own}


def option_conflicts(spec: Spec, backend: str, twins: Mapping[str, str]) -> dict[str, str]:
    """``{"backend.options.<option>": why}`` for each option of ``backend`` (the spec's own backend) that sets a
    sizing field's twin (``twins``: field -> option) to another value than the field."""
    if spec.backend.name != backend:
        return {}
    given = sizing(spec)
    return {f"backend.options.{option}": f"resources.{name} ({given[name]!r}) sets it too, to another value: remove "
                                         "the option or make the two agree"
            for name, option in twins.items()
            if name in given and option in spec.backend.options and spec.backend.options[option] != given[name]}


def sizing_refusals(spec: Spec, why_not: Mapping[str, str]) -> dict[str, str]:
    """``{"resources.<field>": why}`` for each sizing field the spec sets that a backend cannot honour (``why_not``:
    field -> why), in the shape of ``Adapter.recipe_refusals`` (whose check names the backends that can)."""
    return {f"resources.{name}": why_not[name] for name in sizing(spec) if name in why_not}

"""pluggy hook specifications: what a plugin package can implement with ``@hookimpl``.

A plugin is a module (or object) with functions named like the hooks below, decorated with
``agentbridge.hookimpl`` and listed under the ``agentbridge`` entry-point group of its package::

    from agentbridge import hookimpl

    @hookimpl
    def register_tools(register):
        register(my_tool)

Implementations may take any subset of a hook's parameters, by name (pluggy's rule, as in pytest). Each hook says
who calls it and when. The ``register_*`` hooks are called once per process, when the plugin registry is first
built (:func:`agentbridge.plugins.get_plugins`); an exception there is reported as one line naming the plugin and
does not stop the others.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from agentbridge.backends import Backend
    from agentbridge.spec.schema import Spec
    from agentbridge.trajectory import Trajectory

PROJECT = "agentbridge"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_backends(register: Callable[[Backend], None]) -> None:
    """Register training backends: ``register(backend)``; the backend's id is ``backend.name``.

    :param register: adds one object satisfying :class:`agentbridge.backends.Backend`.

    Called when the registry is built; ``agentbridge backends``, ``compile``, ``check``, ``train`` and ``compare``
    look backends up by ``backend.name`` or ``--backend``.
    """


@hookspec
def register_environments(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register environment factories: ``register(id, cls_or_factory)``.

    :param register: adds a factory under an id (``"package/name"``); the driver calls it once per episode with
        the spec's ``environment.args`` as keyword arguments, plus ``tools=`` (the spec's tools) when the spec
        lists any. Checked when registered: a class needs async ``reset(task)``, ``step(action)`` and ``close()``.
    """


@hookspec
def register_tools(register: Callable[[Any], None]) -> None:
    """Register tools: ``register(tool)`` with a function decorated by ``@agentbridge.tool``; id = tool name.

    :param register: adds one tool; the spec's ``tools:`` list names the ones an agent may call. Checked when
        registered: every parameter needs a type hint with a JSON schema.
    """


@hookspec
def register_rewards(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register reward functions: ``register(id, fn)``.

    :param register: adds ``fn(trajectory, task, **args) -> float | dict[str, float]`` under an id; the driver
        calls it at the end of every episode with the spec's ``reward[].args``. A reward that raises scores 0 for
        that episode and is recorded in the episode's error, never failing the batch. Checked when registered: a
        function that cannot take ``(trajectory, task)`` as its first two arguments is left out, with one line in
        ``plugins.errors``.
    """


@hookspec
def register_datasets(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register task generators: ``register(id, fn)``.

    :param register: adds ``fn(split, size, seed, **args) -> list[Task]`` under an id; called for each of the
        spec's ``data.train``, ``data.dev`` and ``data.eval`` when tasks are loaded (compile, rollout, train).
        ``fn`` may declare how many distinct tasks a split can produce: ``fn.capacity(split=..., seed=..., **args)
        -> int | None`` (:mod:`agentbridge.datasets`); a size above it, or fewer tasks returned than asked, is one
        line naming the split. Checked when registered: ``fn`` must take ``split``, ``size`` and ``seed`` by
        keyword.
    """


@hookspec
def register_tool_parsers(register: Callable[[str, Any], None]) -> None:
    """Register tool-call parsers: ``register(name, parser)``, an object with ``parse(text)``.

    :param register: adds a parser the spec selects with ``model.tool_call_format``.
    """


@hookspec
def modify_backend_config(spec: Spec, backend: str, config: dict[str, Any]) -> None:
    """Edit a backend's compiled configuration in place, before it is written to the job directory.

    :param spec: the validated spec being compiled.
    :param backend: the backend's id (``"trl"``, ``"verl"``, ``"openrlhf"``, ...).
    :param config: the backend's own configuration as a mutable dict: TRL's ``GRPOConfig`` keyword arguments,
        veRL's Hydra config, OpenRLHF's flag values (``{"actor.num_nodes": 2, ...}``, without the leading
        ``--``).

    Called by every first-party adapter's ``compile`` (``agentbridge compile``, ``train``, ``compare``), once per job.
    """


@hookspec
def on_episode_end(trajectory: Trajectory) -> None:
    """Observe every finished episode (loggers, dataset writers).

    :param trajectory: the finished episode, its reward and reward components set.

    Called by the driver (:meth:`agentbridge.rollout.agent.Agent.run`) as each episode ends, in every backend's
    rollout, in evaluations and in ``agentbridge rollout``. Must not raise: it runs inside the rollout.
    """


@hookspec
def on_metrics(step: int, metrics: dict[str, float], run: Path) -> None:
    """Export one training step's normalized metrics (TensorBoard, W&B, MLflow, ...).

    :param step: the training step, from 1.
    :param metrics: the step's row of ``metrics.jsonl`` (the normalized names: ``reward/mean``, ``time/step_s``, ...).
    :param run: the run directory.

    Called by the run's metrics logger (:class:`agentbridge.training.logger.RunLogger`) after each training step,
    once the row is written.
    """

"""A training run, as a backend's entry point and its metrics readers use it (``from agentbridge.adapter.training
import ...``):

- the phases around the backend's trainer: :func:`launch_lines`, :func:`trainer_launch_lines`; its metrics:
  :func:`tensorboard_rows`, :func:`feed_metrics`, :func:`trainer_metrics_main`, :func:`tensorboard_metrics`;
- the experiment (``agentbridge.training``): :class:`Experiment`, :func:`load_evals`, :func:`check_rl_steps`,
  :class:`NoTrainingSteps`, :func:`zero_steps_problem`, :class:`RunConsole`, :func:`quiet_libraries`,
  :class:`RunLogger`, :func:`write_report`, :class:`GatheredEval` (held-out evaluation over the trainer's
  processes);
- the experiment trackers: :class:`Trackers`, :data:`TRACKERS_PLUGIN` (the name they are registered under),
  :func:`tracker_environment`, :func:`tracker_env_lines`;
- the run directory: :func:`keep_earlier_run`, :func:`manifest`, :func:`package_version`, :func:`text_hash`.

Each name is imported from the core on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbridge.adapter import _lazy

if TYPE_CHECKING:
    from agentbridge.runs import keep_earlier_run, manifest, package_version, text_hash
    from agentbridge.training.console import RunConsole, quiet_libraries
    from agentbridge.training.experiment import Experiment, load_evals
    from agentbridge.training.guards import NoTrainingSteps, check_rl_steps, zero_steps_problem
    from agentbridge.training.logger import RunLogger
    from agentbridge.training.phases import feed_metrics, launch_lines, tensorboard_rows, trainer_metrics_main
    from agentbridge.training.report import write_report
    from agentbridge.training.sharded_eval import GatheredEval
    from agentbridge.training.trackers import PLUGIN_NAME as TRACKERS_PLUGIN
    from agentbridge.training.trackers import Trackers, tracker_env_lines, tracker_environment

# name -> the core module that defines it ("module:attribute" where the core calls it otherwise)
_CORE = {
    "keep_earlier_run": "agentbridge.runs",
    "manifest": "agentbridge.runs",
    "package_version": "agentbridge.runs",
    "text_hash": "agentbridge.runs",
    "RunConsole": "agentbridge.training.console",
    "quiet_libraries": "agentbridge.training.console",
    "Experiment": "agentbridge.training.experiment",
    "load_evals": "agentbridge.training.experiment",
    "NoTrainingSteps": "agentbridge.training.guards",
    "check_rl_steps": "agentbridge.training.guards",
    "zero_steps_problem": "agentbridge.training.guards",
    "RunLogger": "agentbridge.training.logger",
    "GatheredEval": "agentbridge.training.sharded_eval",
    "feed_metrics": "agentbridge.training.phases",
    "launch_lines": "agentbridge.training.phases",
    "tensorboard_rows": "agentbridge.training.phases",
    "trainer_metrics_main": "agentbridge.training.phases",
    "write_report": "agentbridge.training.report",
    "TRACKERS_PLUGIN": "agentbridge.training.trackers:PLUGIN_NAME",
    "Trackers": "agentbridge.training.trackers",
    "tracker_env_lines": "agentbridge.training.trackers",
    "tracker_environment": "agentbridge.training.trackers",
}

__all__ = [
    "TRACKERS_PLUGIN", "Experiment", "GatheredEval", "NoTrainingSteps", "RunConsole", "RunLogger", "Trackers",
    "check_rl_steps", "feed_metrics", "keep_earlier_run", "launch_lines", "load_evals", "manifest", "package_version",
    "quiet_libraries", "tensorboard_rows", "text_hash", "tracker_env_lines", "tracker_environment",
    "tensorboard_metrics", "trainer_launch_lines", "trainer_metrics_main", "write_report", "zero_steps_problem",
]


def trainer_launch_lines(spec: Any, python: str, header: Iterable[str], run: Iterable[str], trained: Iterable[str], *,
                         module: str, label: str, root: str = 'ROOT="${ROOT:-$JOB}"', setup: Iterable[str] = (),
                         env: Iterable[str] = ()) -> list[str]:
    """``launch.sh``'s lines for a backend whose trainer is a program of its own reading the job from ``$ROOT``:
    the ``header`` comments, ``PYTHON`` (default ``python``), ``ROOT`` (the ``root`` line), the backend's ``setup``
    lines, ``MODEL``, the run directory and the backend's ``env`` lines for it, agentbridge's phases before the
    trainer, the trainer (``run``), its TensorBoard scalars as the run's metrics (``python -m <module>.run_metrics``,
    ``label`` the backend's name), ``trained`` (lines that set ``$TRAINED`` to the trained model), the phases
    after."""
    from agentbridge.adapter.scripts import default_line, model_line, run_dir_lines, trainer_metrics_lines
    from agentbridge.training.phases import launch_lines

    before, after = launch_lines(spec, job="$ROOT", run_dir="$RUN_DIR", checkpoint="$TRAINED")
    return [*header, default_line("PYTHON", python), root, *setup, model_line("MODEL", spec.model.path),
            *run_dir_lines(spec.name), *env, *before, *run, *trainer_metrics_lines(module, label), *trained, *after]


def tensorboard_metrics(source: Path, names: dict[str, str], prefix: str, label: str) -> tuple[
        Callable[[Path, list[str]], list[dict[str, float]]], Callable[..., int]]:
    """A trainer's TensorBoard scalars under ``RUN_DIR/<source>`` as the run format's metrics: ``rows(run_dir,
    problems)``, one row per step (:func:`tensorboard_rows` with ``names``, the others kept under ``prefix/``), and
    ``main(argv)``, the adapter's ``run_metrics`` command line (:func:`trainer_metrics_main`, ``label`` the
    backend's name)."""
    from agentbridge.training.phases import tensorboard_rows, trainer_metrics_main

    def rows(run_dir: Path, problems: list[str]) -> list[dict[str, float]]:
        return tensorboard_rows(Path(run_dir) / source, problems, names, prefix)

    def main(argv: list[str] | None = None) -> int:
        return trainer_metrics_main(argv, rows, label)

    return rows, main


def __getattr__(name: str) -> Any:
    return _lazy.load(_CORE, __name__, name)

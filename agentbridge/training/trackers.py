"""Experiment trackers (``logging:`` in the spec) fed with agentbridge's own metrics through ``on_metrics``.

The backend's own training metrics reach the same trackers the backend's way (TRL ``report_to``, veRL
``trainer.logger``, OpenRLHF's logger flags); this module writes agentbridge's rows — episode, reward, tool, time
and held-out metrics — beside them, under the run directory. Each tracker is an optional extra
(``pip install 'agentbridge[tensorboard]'``); a missing one is one line at ``validate`` (:func:`missing_trackers`).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from agentbridge.hooks import hookimpl
from agentbridge.spec.schema import Spec

MODULES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio"}
PLUGIN_NAME = "agentbridge-trackers"


def missing_trackers(spec: Spec) -> list[str]:
    """One line per tracker the spec turns on whose package is not installed here."""
    return [f"logging.{name}: the {MODULES[name]} package is not installed (pip install 'agentbridge[{name}]')"
            for name in spec.logging.enabled() if importlib.util.find_spec(MODULES[name]) is None]


def tracker_environment(spec: Spec, run_dir: str, backend: str) -> dict[str, str]:
    """Environment variables that place a backend's own tracker files under ``run_dir`` (a path or a shell
    expression such as ``$RUN_DIR``): TensorBoard in ``tensorboard/<backend>``, W&B offline in ``wandb/``, MLflow's
    file store in ``mlruns/``, trackio in ``trackio/``. Variables already set in the environment win."""
    project = spec.logging.project or spec.name
    return {"TENSORBOARD_LOGGING_DIR": f"{run_dir}/tensorboard/{backend}",  # transformers (TRL)
            "TENSORBOARD_DIR": f"{run_dir}/tensorboard/{backend}",  # veRL
            "WANDB_DIR": run_dir, "WANDB_MODE": "offline", "WANDB_PROJECT": project,
            "MLFLOW_TRACKING_URI": f"file://{run_dir}/mlruns" if run_dir.startswith("/") else f"{run_dir}/mlruns",
            "MLFLOW_EXPERIMENT_NAME": project, "TRACKIO_DIR": f"{run_dir}/trackio", "TRACKIO_PROJECT": project}


def tracker_env_lines(spec: Spec, run_dir: str, backend: str) -> list[str]:
    """``export`` lines for a launch script (empty when the spec turns no tracker on)."""
    if not spec.logging.enabled():
        return []
    return ["# where the backend's own trackers write (spec logging:); a variable set before wins",
            *(f'export {k}="${{{k}:-{v}}}"' for k, v in tracker_environment(spec, run_dir, backend).items())]


class Tracker(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoardTracker:
    """Scalars in ``run_dir/tensorboard/agentbridge`` (the backend's own go beside it)."""

    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard" / "agentbridge"))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            if name != "step":
                self.writer.add_scalar(name, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A W&B run in ``run_dir/wandb``, offline unless ``WANDB_MODE`` is set."""

    def __init__(self, run_dir: Path, project: str, name: str, config: dict[str, Any]) -> None:
        import wandb

        self.run = wandb.init(project=project, name=name, dir=str(run_dir), config=config,
                              mode=os.environ.get("WANDB_MODE", "offline"), reinit="create_new")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({k: v for k, v in metrics.items() if k != "step"}, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    """An MLflow run in a file store under ``run_dir/mlruns`` unless ``MLFLOW_TRACKING_URI`` is set."""

    def __init__(self, run_dir: Path, project: str, name: str) -> None:
        import mlflow

        self.client = mlflow.MlflowClient(os.environ.get("MLFLOW_TRACKING_URI") or (run_dir / "mlruns").as_uri())
        experiment = self.client.get_experiment_by_name(project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(project)
        self.run_id = self.client.create_run(experiment_id, run_name=name).info.run_id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            if name != "step":
                self.client.log_metric(self.run_id, name.replace("@", "_at_"), float(value), step=step)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class TrackioTracker:
    """A trackio run stored under ``run_dir/trackio``."""

    def __init__(self, run_dir: Path, project: str, name: str) -> None:
        os.environ.setdefault("TRACKIO_DIR", str(run_dir / "trackio"))
        import trackio

        self.run = trackio.init(project=project, name=name)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({k: v for k, v in metrics.items() if k != "step"}, step=step)

    def close(self) -> None:
        self.run.finish()


class Trackers:
    """The spec's trackers for one run, as a plugin whose ``on_metrics`` writes every row to each of them.

    Register it for the run's duration (``plugins.register(PLUGIN_NAME, trackers)``), close it at the end. A
    tracker that fails to write is reported once through ``say`` and dropped; the run goes on.
    """

    def __init__(self, spec: Spec, run_dir: Path, *, say: Any = print) -> None:
        self.say = say
        project, name = spec.logging.project or spec.name, run_dir.name
        makers: dict[str, Callable[[], Tracker]] = {
            "tensorboard": lambda: TensorBoardTracker(run_dir),
            "wandb": lambda: WandbTracker(run_dir, project, name, spec.model_dump(mode="json")),
            "mlflow": lambda: MlflowTracker(run_dir, project, name),
            "trackio": lambda: TrackioTracker(run_dir, project, name),
        }
        self.trackers: dict[str, Tracker] = {}
        for tracker in spec.logging.enabled():
            try:
                self.trackers[tracker] = makers[tracker]()
            except Exception as e:  # noqa: BLE001 - a tracker must never stop the run
                say(f"logging.{tracker}: not started: {type(e).__name__}: {e}")

    @hookimpl
    def on_metrics(self, step: int, metrics: dict[str, float], run: Path) -> None:
        """Write ``metrics`` of ``step`` to every tracker."""
        for name, tracker in list(self.trackers.items()):
            try:
                tracker.log(step, metrics)
            except Exception as e:  # noqa: BLE001
                self.say(f"logging.{name}: stopped writing: {type(e).__name__}: {e}")
                self.trackers.pop(name)

    def close(self) -> None:
        for tracker in self.trackers.values():
            try:
                tracker.close()
            except Exception:  # noqa: BLE001 - closing a tracker is best effort at the end of a run
                pass

"""The spec's `logging:` block: a tracker whose package is missing is one line at validate, `logging` leaves the
spec hash alone, launch scripts place the backend's tracker files under the run, and a failing tracker never
stops the run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.spec import load_spec, spec_hash
from agentbridge.training import trackers
from agentbridge.training.trackers import Trackers, missing_trackers, tracker_env_lines


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_a_missing_tracker_is_one_line_at_validate() -> None:
    result = CliRunner().invoke(main, ["validate", "examples/calculator.yaml", "--set", "logging.wandb=true"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["error: --set logging.wandb=true: logging.wandb: the wandb "
                                                  "package is not installed (pip install 'agentbridge[wandb]')"]
    assert missing_trackers(load_spec("examples/calculator.yaml")) == []


def test_logging_is_not_part_of_the_spec_hash_and_launch_lines_place_files() -> None:
    plain = load_spec("examples/calculator.yaml")
    logged = load_spec("examples/calculator.yaml", ["logging.tensorboard=true", "logging.project=p"])
    assert spec_hash(plain) == spec_hash(logged) and logged.logging.enabled() == ["tensorboard"]
    assert tracker_env_lines(plain, "$RUN_DIR", "verl") == []
    lines = tracker_env_lines(logged, "$RUN_DIR", "verl")
    assert 'export TENSORBOARD_DIR="${TENSORBOARD_DIR:-$RUN_DIR/tensorboard/verl}"' in lines
    assert 'export WANDB_PROJECT="${WANDB_PROJECT:-p}"' in lines


def test_a_failing_tracker_is_reported_once_and_dropped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class Broken:
        def __init__(self, run_dir: Path) -> None:
            self.calls = 0

        def log(self, step: int, metrics: dict[str, float]) -> None:
            raise OSError("disk full")

        def close(self) -> None:
            pass

    monkeypatch.setattr(trackers, "TensorBoardTracker", Broken)
    said: list[str] = []
    t = Trackers(load_spec("examples/calculator.yaml", ["logging.tensorboard=true"]), tmp_path, say=said.append)
    t.on_metrics(step=1, metrics={"reward/mean": 0.5}, run=tmp_path)
    t.on_metrics(step=2, metrics={"reward/mean": 0.5}, run=tmp_path)
    assert said == ["logging.tensorboard: stopped writing: OSError: disk full"] and t.trackers == {}

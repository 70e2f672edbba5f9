"""OpenRLHF runs write the run format every backend writes: OpenRLHF's TensorBoard scalars (written here by its own
``TensorboardLogger``, with the status keys its PPO trainer logs) become ``metrics.jsonl`` in the normalized names,
and each row reaches the plugins' ``on_metrics`` hook and the spec's trackers."""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path
from typing import Any

import pytest

from agentbridge.hooks import hookimpl
from agentbridge.plugins import get_plugins
from agentbridge.rollout.training import EPISODE_METRICS
from agentbridge.runs import manifest
from agentbridge.spec import load_spec
from agentbridge.trajectory import FINISH_REASONS
from agentbridge_openrlhf.backend import OpenRLHFBackend
from agentbridge_openrlhf.run_metrics import NORMALIZED, SOURCE, TRACKER_DIR, convert, main

CALC = "examples/calculator.yaml"


def step_status(step: int) -> dict[str, Any]:
    """What OpenRLHF 0.11.2's PPOTrainer.fit hands its loggers for one GRPO step: the actor's status (policy loss,
    lr, grad norm, Experience.info incl. the executor's extra_logs, the episode tensor fields), the trainer's
    timing/* and rollout/* stats, and the sample it decoded."""
    driver = {**dict.fromkeys(EPISODE_METRICS, 0.0), "episode/turns": 2.0, "episode/response_tokens": 40.0 + step,
              "tools/calls": 1.5, "time/generate_s": 0.8, "reward/correct": 0.25 * step,
              **{f"finish/{r}": 0.0 for r in FINISH_REASONS}, "finish/done": 0.75, "finish/length": 0.25}
    actor = {"policy_loss": -0.01 * step, "actor_lr": 1e-6, "actor_grad_norm": 0.7, "ppo_clip_ratio": 0.02,
             "ppo_kl": 0.001, "kl": 0.003, "logprobs_diff": 0.0, "reward": 0.25 * step, "return": 0.25 * step,
             "response_clip_ratio": 0.0, "response_length": 55.0, "truncated": 0.25, "total_length": 100.0, **driver}
    trainer = {"timing/make_experience": 1.0, "timing/ppo_train": 3.0, "timing/broadcast": 0.5,
               "rollout/reward_mean": 0.25 * step, "rollout/reward_std": 0.4, "rollout/response_length_mean": 55.0,
               "rollout/truncated_rate": 0.25, "rollout/num_samples": 8.0, "generated_samples": ["2+2=4", 1.0],
               "timing/generation": 5.5}
    status = {**actor, **trainer}
    status["timing/step_total"] = sum(v for k, v in status.items() if k.startswith("timing/"))  # 10.0
    return status


def write_events(run: Path, run_name: str, steps: list[int], *, reward_offset: float = 0.0) -> None:
    """Steps logged by OpenRLHF's own TensorBoard logger, where the job's --logger.tensorboard_dir puts them."""
    from openrlhf.utils.logging_utils import TensorboardLogger

    args = types.SimpleNamespace(logger=types.SimpleNamespace(
        tensorboard_dir=str(run / SOURCE), wandb=types.SimpleNamespace(run_name=run_name)))
    logger = TensorboardLogger(args)
    for step in steps:
        status = step_status(step)
        status["rollout/reward_mean"] += reward_offset
        logger.log_train(step, status)
        if step == 2:
            logger.log_eval(step, {"eval_calculator_pass1": 0.5})
    logger.close()


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    write_events(run, "ppo_0101T10:00", [1, 2, 3])
    write_events(run, "ppo_0101T11:00", [3], reward_offset=1.0)  # a later run of the same step wins
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(run / SOURCE / TRACKER_DIR)) as own:  # agentbridge's tracker: not OpenRLHF's
        own.add_scalar("reward/mean", 99.0, 1)
    (run / "manifest.json").write_text(json.dumps(manifest(kind="run", backend="openrlhf", spec_hash="x", seed=0)))
    return run


def rows_of(run: Path) -> list[dict[str, float]]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_tags_are_ones_openrlhf_logs() -> None:
    """Each mapped key is one OpenRLHF 0.11.2 puts in its status (a string literal in its trainer's sources)."""
    spec = importlib.util.find_spec("openrlhf")
    assert spec is not None and spec.origin is not None
    root = Path(spec.origin).parent / "trainer"
    source = "".join((root / f).read_text() for f in ("ppo_trainer.py", "ray/ppo_actor.py",
                                                      "ppo_utils/experience_maker.py"))
    assert [key for key in NORMALIZED if f'"{key}"' not in source] == []
    assert 'add_scalar(f"train/{k}"' in (root.parent / "utils" / "logging_utils.py").read_text()


def test_openrlhfs_scalars_become_the_runs_metrics_and_are_drawn(run: Path, tmp_path: Path) -> None:
    from agentbridge.compare.report import write_comparison

    written, problems = convert(run)
    assert (written, problems) == (3, [])
    rows = rows_of(run)
    assert [r["step"] for r in rows] == [1, 2, 3]
    first = rows[0]
    assert first["reward/mean"] == pytest.approx(0.25) and first["reward/std"] == pytest.approx(0.4)
    assert first["time/step_s"] == pytest.approx(10.0) and first["time/rollout_s"] == pytest.approx(5.5)
    assert first["throughput/tokens_per_s"] == pytest.approx(100.0 * 8 / 10.0)
    assert first["episode/response_tokens"] == pytest.approx(41.0) and first["episode/turns"] == 2.0
    assert first["finish/length"] == pytest.approx(0.25) and first["reward/correct"] == pytest.approx(0.25)
    assert first["tools/calls"] == pytest.approx(1.5) and first["time/generate_s"] == pytest.approx(0.8)
    assert first["openrlhf/loss"] == pytest.approx(-0.01) and first["openrlhf/kl"] == pytest.approx(0.003)
    assert first["openrlhf/clip_fraction"] == pytest.approx(0.02) and first["openrlhf/grad_norm"] == pytest.approx(0.7)
    assert first["openrlhf/lr"] == pytest.approx(1e-6) and first["openrlhf/ppo_kl"] == pytest.approx(0.001)
    assert first["openrlhf/rollout/response_length_mean"] == 55.0  # kept, under openrlhf/
    assert first["openrlhf/timing/ppo_train"] == 3.0 and "openrlhf/entropy" not in first  # no --actor.entropy_coef
    assert "memory/peak_gb" not in first and not [k for k in first if "generated_samples" in k or "train/" in k]
    assert rows[1]["openrlhf/eval/eval_calculator_pass1"] == 0.5 and "openrlhf/eval/eval_calculator_pass1" not in first
    assert rows[2]["reward/mean"] == pytest.approx(1.75)  # the later run's step 3; never the tracker's 99
    path, report_problems = write_comparison([run], tmp_path / "report")
    assert not [p for p in report_problems if "metrics.jsonl" in p]
    assert (tmp_path / "report" / "reward.png").is_file() and (tmp_path / "report" / "step_time.png").is_file()


def test_each_row_reaches_on_metrics_and_the_specs_trackers(run: Path) -> None:
    seen: list[tuple[int, float, Path]] = []

    @hookimpl
    def on_metrics(step: int, metrics: dict[str, float], run: Path) -> None:
        seen.append((step, metrics["reward/mean"], run))

    plugins = get_plugins()
    plugins.register("test-on-metrics", types.SimpleNamespace(on_metrics=on_metrics))
    try:
        written, problems = convert(run, plugins, load_spec(CALC, ["logging.tensorboard=true"]))
    finally:
        plugins.unregister("test-on-metrics")
    assert written == 3 and problems == []
    assert [(s, round(r, 3), p) for s, r, p in seen] == [(1, 0.25, run), (2, 0.5, run), (3, 1.75, run)]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = EventAccumulator(str(run / SOURCE / TRACKER_DIR))  # the tensorboard tracker: the normalized names
    tracker.Reload()
    assert {1, 2, 3} <= {e.step for e in tracker.Scalars("reward/mean")}
    assert "openrlhf/loss" in tracker.Tags()["scalars"]
    assert convert(run)[0] == 3 and rows_of(run)[0]["reward/mean"] == pytest.approx(0.25)  # its files are not read


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is not None, reason="mlflow is installed here")
def test_a_tracker_that_cannot_start_is_one_line(run: Path) -> None:
    written, problems = convert(run, get_plugins(), load_spec(CALC, ["logging.mlflow=true"]))
    assert written == 3 and len(problems) == 1 and problems[0].startswith("logging.mlflow: not started: ")


@pytest.mark.parametrize("make, line", [
    (lambda run: None, "tensorboard: missing (OpenRLHF's TensorBoard logger did not run)"),
    (lambda run: (run / SOURCE / "ppo_x").mkdir(parents=True), "tensorboard: no TensorBoard event files"),
    (lambda run: ((run / SOURCE / "ppo_x").mkdir(parents=True),
                  (run / SOURCE / "ppo_x" / "events.out.tfevents.1.host").write_bytes(b"\x00garbage")),
     "events.out.tfevents.1.host: no readable TensorBoard events"),
])
def test_bad_or_missing_input_is_one_line(make: Any, line: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    make(run)
    assert main([str(run)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agentbridge: ") and err[0].endswith(line), err
    assert not (run / "metrics.jsonl").exists()
    assert main([]) == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


def test_an_unreadable_spec_is_one_line_and_the_metrics_are_still_written(run: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(run), "--job", str(tmp_path / "no-job")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "spec.yaml: not read, no tracker gets the metrics" in err[0]
    assert err[1] == f"agentbridge: 3 step(s) of OpenRLHF metrics in {run / 'metrics.jsonl'}"


def test_the_job_converts_after_the_trainer_and_feeds_every_tracker(calculator_job: Path, tmp_path: Path) -> None:
    launch = (calculator_job / "launch.sh").read_text()
    assert launch.index("openrlhf.cli.train_ppo_ray") < launch.index(
        '"$PYTHON" -m agentbridge_openrlhf.run_metrics "$OUT" --job "$JOB" || true')
    spec = load_spec(CALC, ["logging.wandb=true", "logging.mlflow=true", "logging.tensorboard=true"])
    assert OpenRLHFBackend().check(spec) == []
    job = OpenRLHFBackend().compile(spec, tmp_path / "logged")
    note = [n for n in job.manifest["notes"] if n.startswith("logging.")]
    assert len(note) == 1 and note[0].startswith("logging.wandb and logging.mlflow: fed after OpenRLHF's trainer")

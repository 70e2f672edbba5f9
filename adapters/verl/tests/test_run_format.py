"""veRL runs write the run format every backend writes: the driver's episodes from inside veRL's agent loop, and
veRL's own step metrics (its file logger) converted to the normalized names that `agentbridge report` draws."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import compile_job

from agentbridge.backends import Job
from agentbridge.compare.report import write_comparison
from agentbridge.runs import manifest
from agentbridge_verl.run_metrics import SOURCE, convert

# the names veRL 0.9.1's trainer logs for a GRPO step (compute_data_metrics, the actor update, timing, perf)
VERL_STEP = {"critic/score/mean": 0.5, "critic/rewards/mean": 0.5, "response_length/mean": 120.0,
             "response_length/clip_ratio": 0.0, "tool_call_counts/mean": 1.5, "timing_s/step": 12.5,
             "timing_s/gen": 8.0, "perf/throughput": 900.0, "perf/total_num_tokens": 90000,
             "perf/max_memory_allocated_gb": 14.2, "actor/ppo_kl": 0.001, "actor/kl_loss": 0.03,
             "actor/pg_loss": -0.01, "actor/pg_clipfrac": 0.02, "actor/entropy": 1.1, "actor/grad_norm": 0.7,
             "actor/lr": 1e-6, "training/global_step": 1}


def test_the_job_turns_on_the_file_logger_and_converts_it(tmp_path: Path) -> None:
    job = compile_job(tmp_path / "job")
    import yaml

    config = yaml.safe_load((job.path / "agentbridge_job.yaml").read_text())
    assert "file" in config["trainer"]["logger"]
    launch = (job.path / "launch.sh").read_text()
    assert 'export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$RUN_DIR/verl_metrics.jsonl}"' in launch
    assert launch.index("verl.trainer.main_ppo") < launch.index("agentbridge_verl.run_metrics \"$RUN_DIR\"")  # after it


def test_verls_metrics_become_the_runs_metrics_and_are_drawn(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.dumps({"step": s, "data": {**VERL_STEP, "critic/score/mean": 0.1 * s}}) for s in (1, 2, 3)]
    (run / SOURCE).write_text("\n".join([*lines, "{broken"]) + "\n")
    (run / "manifest.json").write_text(json.dumps(manifest(kind="run", backend="verl", spec_hash="x", seed=0)))
    written, problems = convert(run)
    assert written == 3 and len(problems) == 1 and problems[0].startswith(f"{run / SOURCE}:4: ")
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[1]["reward/mean"] == pytest.approx(0.2)
    assert rows[0]["time/step_s"] == 12.5 and rows[0]["memory/peak_gb"] == 14.2 and rows[0]["verl/loss"] == -0.01
    assert rows[0]["verl/critic/rewards/mean"] == 0.5  # kept, under verl/
    # the job's tokens per second (veRL's perf/throughput is per GPU), and KL to the reference as other backends log
    assert rows[0]["throughput/tokens_per_s"] == 7200.0 and rows[0]["verl/throughput_per_gpu"] == 900.0
    assert rows[0]["verl/kl"] == 0.03 and rows[0]["verl/ppo_kl"] == 0.001
    path, report_problems = write_comparison([run], tmp_path / "report")
    assert not [p for p in report_problems if "metrics.jsonl" in p]
    assert (tmp_path / "report" / "reward.png").is_file() and (tmp_path / "report" / "step_time.png").is_file()


def test_each_row_reaches_on_metrics_and_a_failing_plugin_is_one_line(tmp_path: Path) -> None:
    import types

    from agentbridge.hooks import hookimpl
    from agentbridge.plugins import get_plugins

    (tmp_path / SOURCE).write_text("".join(json.dumps({"step": s, "data": {**VERL_STEP, "critic/score/mean": 0.1 * s}})
                                           + "\n" for s in (1, 2)))
    seen: list[tuple[int, float, Path]] = []

    @hookimpl
    def on_metrics(step: int, metrics: dict[str, float], run: Path) -> None:
        seen.append((step, round(metrics["reward/mean"], 3), run))
        if step == 2:
            raise OSError("disk full")

    plugins = get_plugins()
    plugins.register("test-on-metrics", types.SimpleNamespace(on_metrics=on_metrics))
    try:
        written, problems = convert(tmp_path, plugins)
    finally:
        plugins.unregister("test-on-metrics")
    assert written == 2 and seen == [(1, 0.1, tmp_path), (2, 0.2, tmp_path)]
    assert problems == ["on_metrics: OSError: disk full"]


def test_the_agent_loop_records_episodes_in_the_run_directory(small_job: Job, tiny_model: tuple[Any, Any],
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from worker_harness import (
        HFServerStandIn,
        calculator_script,
        compose_worker_config,
        generate,
        input_batch,
        record_trajectories,
    )

    from agentbridge.rollout.agent import load_tasks
    from agentbridge.spec import load_spec

    monkeypatch.setenv("AGENTBRIDGE_RUN_DIR", str(tmp_path))
    model, tokenizer = tiny_model
    cfg = compose_worker_config(small_job.path)
    recorder = record_trajectories()
    server = HFServerStandIn(model, tokenizer, calculator_script(load_tasks(load_spec(small_job.path / "spec.yaml"),
                                                                            "train")))
    generate(cfg, server, input_batch(cfg, tokenizer, 1))
    records = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == len(recorder.trajectories) == cfg.actor_rollout_ref.rollout.n
    assert all(r["backend"] == "verl" and r["finish_reason"] in ("done", "max_turns") for r in records)
    assert sorted(r["reward"] for r in records) == sorted(t.reward for t in recorder.trajectories)

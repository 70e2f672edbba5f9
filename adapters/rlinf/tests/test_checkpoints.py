"""The RLinf job saves its trained model and resumes: the compiled save / resume settings, the guard against training
past the last step on a relaunch, the export of the latest checkpoint's full weights as a Hugging Face model, and the
metrics conversion's names."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import compile_job

from agentbridge.spec import load_spec
from agentbridge_rlinf.backend import RlinfBackend
from agentbridge_rlinf.entry import FULL_WEIGHTS, export_hf, latest_checkpoint


def test_the_job_saves_every_interval_and_at_the_last_step_and_resumes(tmp_path: Path) -> None:
    job = compile_job(tmp_path / "job")
    runner = yaml.safe_load((job.path / "rlinf_job.yaml").read_text())["runner"]
    assert runner["save_interval"] == 50 and runner["resume_dir"] == "auto"  # check_progress saves the last step too
    # ReasoningRunner resumes from log_path/checkpoints and saves to output_dir/experiment_name/checkpoints: the same
    assert runner["logger"]["log_path"] == "${runner.output_dir}/${runner.experiment_name}"
    actor = yaml.safe_load((job.path / "rlinf_job.yaml").read_text())["actor"]
    assert actor["fsdp_config"]["save_full_model_weights"] is True
    launch = (job.path / "launch.sh").read_text()
    assert '-m agentbridge_rlinf.entry export "${RUN_DIR}"/' in launch and 'CHECKPOINT="$TRAINED"' in launch
    assert '-m agentbridge_rlinf.run_metrics "$RUN_DIR" --job "$ROOT"' in launch
    assert not any("warm start and held-out evaluation are not run" in n for n in job.manifest["notes"])
    bad = load_spec(job.path / "spec.yaml", ["backend.options.save_interval=-1"])
    assert any("save_interval" in str(p) for p in RlinfBackend().check(bad))


def test_the_latest_checkpoint_is_rlinfs_resume_point(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    for name in ("global_step_50", "global_step_120", "global_step_7", "global_step_x"):
        (tmp_path / "checkpoints" / name).mkdir(parents=True)
    assert latest_checkpoint(tmp_path) == (120, tmp_path / "checkpoints" / "global_step_120")


def test_export_writes_the_full_weights_as_a_hugging_face_model(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from agentbridge.models import resolve_model_path

    model = str(resolve_model_path("builtin:tiny"))
    trained = AutoModelForCausalLM.from_pretrained(model)
    with torch.no_grad():
        next(trained.parameters()).add_(1.0)  # a trained model differs from the start
    weights = tmp_path / "checkpoints" / "global_step_3" / FULL_WEIGHTS
    weights.parent.mkdir(parents=True)
    torch.save({f"_orig_mod.{k}": v for k, v in trained.state_dict().items()}, weights)
    with pytest.raises(FileNotFoundError, match="no global_step_N checkpoint"):
        export_hf(tmp_path / "none", model)
    out = export_hf(tmp_path, model)
    assert out == tmp_path / "checkpoints" / "global_step_3" / "actor" / "huggingface"
    loaded = AutoModelForCausalLM.from_pretrained(out)
    pairs = zip(loaded.parameters(), trained.parameters(), strict=True)
    assert all(torch.equal(a.float(), b.float()) for a, b in pairs)
    assert (out / "tokenizer_config.json").is_file() and export_hf(tmp_path, model) == out  # kept when there


def test_metrics_rows_use_the_normalized_names(tmp_path: Path) -> None:
    from agentbridge.training.phases import step_row
    from agentbridge_rlinf.run_metrics import DRIVER, NORMALIZED, rows

    row = step_row(1, {"rollout/rewards": 0.5, "time/step": 3.0, "episode/turns": 2.0, "time/generate_s": 1.0,
                       "train/actor/policy_loss": -0.1, "rollout/advantages_mean": 0.0}, NORMALIZED, "rlinf", DRIVER)
    assert row == {"step": 1, "reward/mean": 0.5, "time/step_s": 3.0, "episode/turns": 2.0, "time/generate_s": 1.0,
                   "rlinf/loss": -0.1, "rlinf/rollout/advantages_mean": 0.0}
    problems: list[str] = []
    assert rows(tmp_path, problems) == [] and "TensorBoard logger did not run" in problems[0]

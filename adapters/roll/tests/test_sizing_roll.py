"""resources' sizing fields on ROLL: each lands in ROLL's own keys of the compiled config (the training workers'
micro-batch, Megatron's recompute or the FSDP2 HF model's checkpointing, save_steps and max_ckpt_to_keep), is the
default of its ``backend.options`` twin, and is what the memory estimate reads; ROLL's AgenticConfig accepts the job
where ROLL imports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from roll_helpers import EXAMPLE, ROOT, SMALL, compile_job, needs_roll

from agentbridge.adapter import flatten
from agentbridge.memory import job_settings
from agentbridge.spec import load_spec
from agentbridge.spec.sizing import option_conflicts
from agentbridge_roll.backend import RollBackend
from agentbridge_roll.config import SIZING_OPTIONS

SIZED = ["resources.micro_batch_size=2", "resources.gradient_checkpointing=true", "resources.save_steps=7",
         "resources.save_total_limit=3"]
FSDP2 = ["backend.options={training_strategy: fsdp2_train}"]
TRAIN = "actor_train."
KEYS = (TRAIN + "training_args.per_device_train_batch_size",
        TRAIN + "strategy_args.strategy_config.recompute_granularity",
        TRAIN + "model_args.disable_gradient_checkpointing", "save_steps", "max_ckpt_to_keep")


def _config(tmp_path: Path, *sets: str) -> dict[str, Any]:
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, *sets])
    assert RollBackend().check(spec) == [], [str(p) for p in RollBackend().check(spec)]
    return flatten(yaml.safe_load((compile_job(tmp_path / "job", *sets).path / "roll_job.yaml").read_text()))


@pytest.mark.parametrize(("sets", "want", "recompute"), [
    (SIZED, [2, "full", False, 7, 3], True),
    ([*SIZED, *FSDP2], [2, None, False, 7, 3], True),
    (["resources.gradient_checkpointing=false", *FSDP2], [1, None, True, 50, None], False),
    ([], [1, None, False, 50, None], False),  # unset: ROLL's defaults (Megatron without recompute)
    (FSDP2, [1, None, False, 50, None], True),  # ... and FSDP2's HF model checkpointing
])
def test_the_fields_are_rolls_own_keys(sets: list[str], want: list[Any], recompute: bool, tmp_path: Path) -> None:
    config = _config(tmp_path, *sets)
    assert [config.get(k) for k in KEYS] == want
    assert job_settings("roll", config)["recompute"] is recompute


def test_an_option_decides_alone_and_one_that_disagrees_with_its_field_is_refused(tmp_path: Path) -> None:
    assert _config(tmp_path, *SIZED[:2], "backend.options={save_steps: 9}")["save_steps"] == 9
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, *SIZED, "backend.options={save_steps: 9}"])
    assert list(option_conflicts(spec, "roll", SIZING_OPTIONS)) == ["backend.options.save_steps"]
    assert [str(p) for p in RollBackend().check(spec)] == [
        "backend.options.save_steps: resources.save_steps (7) sets it too, to another value: "
        "remove the option or make the two agree"]


@needs_roll
def test_rolls_config_accepts_a_sized_job(tmp_path: Path) -> None:
    report = RollBackend().validate(compile_job(tmp_path / "job", *SIZED))
    assert report.ok, [str(p) for p in report.problems]


def test_a_gpu_megatron_job_uses_the_distributed_optimizer() -> None:
    from agentbridge_roll.config import job_config

    def config(gpus: int, *sets: str) -> dict[str, Any]:
        return flatten(job_config(load_spec("examples/calculator.gpu.yaml", [
            "resources.nodes=1", f"resources.gpus_per_node={gpus}", "backend.name=roll", "backend.options={}",
            *sets])))

    key = "actor_train.strategy_args.strategy_config.use_distributed_optimizer"
    assert config(1)[key] is True and config(8)[key] is True
    assert key not in config(0)  # a CPU job
    assert key not in config(8, "backend.options.training_strategy=fsdp2_train")
    assert config(8, f"backend.overrides.{key}=false")[key] is False
    assert job_settings("roll", config(8))["distributed_optimizer"] is True
    assert config(8)["actor_train.strategy_args.strategy_config.recompute_granularity"] == "full"

"""resources' sizing fields on slime: each is slime's (Megatron's) own flag in the compiled job, the default of its
``backend.options`` twin, and what the memory estimate reads; ``save_total_limit``, which neither slime nor Megatron
has a flag for, is refused in one line naming who can."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from slime_testkit import EXAMPLE, ROOT, SMALL, compile_job

from agentbridge.memory import job_settings
from agentbridge.spec import load_spec
from agentbridge.spec.sizing import option_conflicts
from agentbridge.testing import assert_refusal_names_who_can
from agentbridge_slime.backend import SlimeBackend
from agentbridge_slime.config import SIZING_OPTIONS

SIZED = ["resources.micro_batch_size=2", "resources.gradient_checkpointing=true", "resources.save_steps=7"]
FLAGS = ("micro-batch-size", "recompute-granularity", "recompute-method", "recompute-num-layers", "save-interval")


def _flags(tmp_path: Path, *sets: str) -> dict[str, Any]:
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, *sets])
    assert SlimeBackend().check(spec) == [], [str(p) for p in SlimeBackend().check(spec)]
    return dict(yaml.safe_load((compile_job(tmp_path / "job", *sets).path / "slime_job.yaml").read_text()))


def test_the_fields_are_slimes_own_flags(tmp_path: Path) -> None:
    flags = _flags(tmp_path / "set", *SIZED)
    assert [flags.get(k) for k in FLAGS] == [2, "full", "uniform", 1, 7]
    assert job_settings("slime", flags)["micro_batch"] == 2 and job_settings("slime", flags)["recompute"] is True
    # unset or off: the adapter's options and Megatron's default, no recompute
    for name, sets in (("unset", []), ("off", ["resources.gradient_checkpointing=false"])):
        assert [_flags(tmp_path / name, *sets).get(k) for k in FLAGS] == [1, None, None, None, 50]


def test_an_option_decides_alone_and_one_that_disagrees_with_its_field_is_refused(tmp_path: Path) -> None:
    assert _flags(tmp_path, *SIZED[1:], "backend.options={micro_batch_size: 2}")["micro-batch-size"] == 2
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, *SIZED, "backend.options={micro_batch_size: 1, save_interval: 7}"])
    assert list(option_conflicts(spec, "slime", SIZING_OPTIONS)) == ["backend.options.micro_batch_size"]
    assert [str(p) for p in SlimeBackend().check(spec)] == [
        "backend.options.micro_batch_size: resources.micro_batch_size (2) sets it too, to another value: "
        "remove the option or make the two agree"]


def test_save_total_limit_is_refused_in_one_line_naming_who_can() -> None:
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, "algorithm.name=grpo", "resources.save_total_limit=2"])
    (line,) = [str(p) for p in SlimeBackend().check(spec)]
    assert line.startswith("resources.save_total_limit: slime cannot run grpo with save_total_limit 2 (slime's "
                           "--save writes"), line
    assert_refusal_names_who_can(line, "resources.save_total_limit", spec, "slime")


def test_a_gpu_job_names_the_distributed_optimizer() -> None:
    from agentbridge_slime.config import job_config

    def flags(gpus: int, *sets: str) -> dict[str, Any]:
        return job_config(load_spec("examples/calculator.gpu.yaml", [
            "resources.nodes=1", f"resources.gpus_per_node={gpus}", "backend.name=slime", "backend.options={}", *sets]))

    assert flags(1)["use-distributed-optimizer"] is True and flags(8)["use-distributed-optimizer"] is True
    assert "use-distributed-optimizer" not in flags(0)  # a CPU job
    assert "use-distributed-optimizer" not in flags(8, "backend.overrides.use-distributed-optimizer=false")
    assert job_settings("slime", flags(8))["distributed_optimizer"] is True

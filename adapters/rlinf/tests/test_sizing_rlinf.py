"""resources' sizing fields on RLinf 0.3.0: each lands in RLinf's own keys of the compiled Hydra config (FSDP's or
Megatron's recompute, as the training backend is), is the default of its ``backend.options`` twin, reaches the
memory estimate; ``save_total_limit``, which RLinf has no setting for, is refused in one line naming who can."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from conftest import EXAMPLE, ROOT, SMALL, compile_job, needs_rlinf

from agentbridge.adapter import flatten
from agentbridge.memory import job_settings
from agentbridge.spec import load_spec
from agentbridge.spec.sizing import option_conflicts
from agentbridge.testing import assert_refusal_names_who_can
from agentbridge_rlinf.backend import RlinfBackend
from agentbridge_rlinf.config import SIZING_OPTIONS

SIZED = ["resources.micro_batch_size=2", "resources.gradient_checkpointing=true", "resources.save_steps=7"]
MEGATRON = ["backend.options={training_backend: megatron}"]
KEYS = ("algorithm.training_batch_size_per_gpu", "algorithm.logprob_forward_micro_batch_size",
        "actor.fsdp_config.gradient_checkpointing", "actor.model.recompute_granularity", "runner.save_interval")


def _keys(tmp_path: Path, *sets: str) -> dict[str, Any]:
    keys = flatten(yaml.safe_load((compile_job(tmp_path / "job", *sets).path / "rlinf_job.yaml").read_text()))
    return {k: keys.get(k) for k in KEYS}


def test_the_fields_are_rlinfs_own_keys(tmp_path: Path) -> None:
    assert list(_keys(tmp_path / "fsdp", *SIZED).values()) == [2, 2, True, None, 7]
    assert list(_keys(tmp_path / "megatron", *SIZED, *MEGATRON).values()) == [2, 2, True, "full", 7]
    assert list(_keys(tmp_path / "off", "resources.gradient_checkpointing=false").values()) == [1, 1, False, None, 50]
    assert list(_keys(tmp_path / "unset").values()) == [1, 1, True, None, 50]  # the adapter's defaults


def test_the_memory_estimate_reads_recompute_where_the_training_backend_keeps_it(tmp_path: Path) -> None:
    for name, sets, recompute in (("fsdp", [], True), ("megatron", MEGATRON, False),
                                  ("recompute", [*MEGATRON, "resources.gradient_checkpointing=true"], True)):
        job = compile_job(tmp_path / name, "resources.micro_batch_size=4", *sets)
        settings = job_settings("rlinf", flatten(yaml.safe_load((job.path / "rlinf_job.yaml").read_text())))
        assert (settings["micro_batch"], settings["recompute"]) == (4, recompute), name


def test_an_option_decides_alone_and_one_that_disagrees_with_its_field_is_refused(tmp_path: Path) -> None:
    assert _keys(tmp_path, *SIZED[:2], "backend.options={save_interval: 9}")["runner.save_interval"] == 9
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, *SIZED, "backend.options={save_interval: 9}"])
    assert list(option_conflicts(spec, "rlinf", SIZING_OPTIONS)) == ["backend.options.save_interval"]
    assert [str(p) for p in RlinfBackend().check(spec)] == [
        "backend.options.save_interval: resources.save_steps (7) sets it too, to another value: "
        "remove the option or make the two agree"]


def test_save_total_limit_is_refused_in_one_line_naming_who_can() -> None:
    spec = load_spec(ROOT / EXAMPLE, [*SMALL, "algorithm.name=grpo", "resources.save_total_limit=2"])
    (line,) = [str(p) for p in RlinfBackend().check(spec)]
    assert line.startswith("resources.save_total_limit: rlinf cannot run grpo with save_total_limit 2 (RLinf 0.3.0 "
                           "keeps every checkpoint"), line
    assert_refusal_names_who_can(line, "resources.save_total_limit", spec, "rlinf")


@needs_rlinf
def test_rlinfs_validator_accepts_a_sized_job(tmp_path: Path) -> None:
    report = RlinfBackend().validate(compile_job(tmp_path / "job", *SIZED))
    assert report.ok, [str(p) for p in report.problems]


def test_a_one_gpu_job_offloads_the_actor() -> None:
    from agentbridge_rlinf.config import settings

    def offload(gpus: int) -> bool:
        spec = load_spec("examples/calculator.gpu.yaml", ["resources.nodes=1", f"resources.gpus_per_node={gpus}"])
        return bool(settings(spec)["actor.enable_offload"])

    assert offload(1) is True and offload(8) is False and offload(0) is False

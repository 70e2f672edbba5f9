"""resources' sizing fields on OpenRLHF 0.11.2: each reaches OpenRLHF's own arguments (the compiled launch.sh's argv
through OpenRLHF's parser and post-parse checks), is the default of its ``backend.options`` twin, and reaches the
memory estimate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentbridge.memory import estimate_job
from agentbridge.spec import load_spec
from agentbridge.spec.sizing import option_conflicts
from agentbridge_openrlhf.backend import OpenRLHFBackend
from agentbridge_openrlhf.config import SIZING_OPTIONS
from agentbridge_openrlhf.validate import job_argv, parse_args

CALC = "examples/calculator.yaml"
SMALL = ["backend.name=openrlhf", "algorithm.name=grpo", "algorithm.group_size=4", "algorithm.batch_size=2"]
SIZED = ["resources.micro_batch_size=2", "resources.gradient_checkpointing=true", "resources.save_steps=7",
         "resources.save_total_limit=3"]


def _args(tmp_path: Path, *sets: str) -> tuple[Any, ...]:
    """(micro-batch, gradient checkpointing, save steps, checkpoints kept) of OpenRLHF's parsed arguments."""
    spec = load_spec(CALC, [*SMALL, *sets])
    assert OpenRLHFBackend().check(spec) == [], [str(p) for p in OpenRLHFBackend().check(spec)]
    args = parse_args(job_argv(OpenRLHFBackend().compile(spec, tmp_path / "job").path, model="/m"))
    return (args.train.micro_batch_size, args.actor.gradient_checkpointing_enable, args.ckpt.save_steps,
            args.ckpt.max_num)


def test_the_fields_are_openrlhfs_own_flags(tmp_path: Path) -> None:
    assert _args(tmp_path / "set", *SIZED) == (2, True, 7, 3)
    assert _args(tmp_path / "unset") == (1, False, 50, 2)  # the adapter's options, as before the fields existed


def test_an_option_decides_alone_and_one_that_disagrees_with_its_field_is_refused(tmp_path: Path) -> None:
    assert _args(tmp_path, *SIZED[:1], "backend.options={gradient_checkpointing: true}") == (2, True, 50, 2)
    spec = load_spec(CALC, [*SMALL, *SIZED, "backend.options={gradient_checkpointing: false, save_steps: 7}"])
    assert list(option_conflicts(spec, "openrlhf", SIZING_OPTIONS)) == ["backend.options.gradient_checkpointing"]
    assert [str(p) for p in OpenRLHFBackend().check(spec)] == [
        "backend.options.gradient_checkpointing: resources.gradient_checkpointing (True) sets it too, to another "
        "value: remove the option or make the two agree"]


def test_the_memory_estimate_reads_them(tmp_path: Path) -> None:
    spec = load_spec("examples/calculator.gpu.yaml", ["data.train.size=64", "data.eval.size=8", "data.dev.size=8",
                                                      "resources.micro_batch_size=8"])
    OpenRLHFBackend().compile(spec, tmp_path / "job")
    memory = estimate_job(spec, "openrlhf", tmp_path / "job")
    assert (memory["micro_batch"], memory["recompute"]) == (8, True)

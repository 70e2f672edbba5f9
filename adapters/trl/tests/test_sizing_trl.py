"""resources' sizing fields on TRL: each lands in GRPOConfig under TRL's own name, is the default of its
``backend.options`` twin (an explicit option still decides; one that disagrees is a conflict), and reaches the memory
estimate of the compiled GPU job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentbridge.memory import estimate_job
from agentbridge.spec import load_spec
from agentbridge.spec.sizing import option_conflicts
from agentbridge_trl.backend import TrlBackend
from agentbridge_trl.config import SIZING_OPTIONS, grpo_config_kwargs

SIZED = ["resources.micro_batch_size=2", "resources.gradient_checkpointing=true", "resources.save_steps=7",
         "resources.save_total_limit=3"]
KEYS = ("per_device_train_batch_size", "activation_checkpointing", "save_steps", "save_total_limit")


def _kwargs(small_sets: list[str], *sets: str) -> dict[str, Any]:
    spec = load_spec("examples/calculator.yaml", ["backend.name=trl", *small_sets, *sets])
    assert TrlBackend().check(spec) == [], [str(p) for p in TrlBackend().check(spec)]
    return {k: v for k, v in grpo_config_kwargs(spec, "out").items() if k in KEYS}


def test_the_fields_are_grpo_configs_own_settings(small_sets: list[str]) -> None:
    assert _kwargs(small_sets, *SIZED) == {"per_device_train_batch_size": 2, "activation_checkpointing": True,
                                           "save_steps": 7, "save_total_limit": 3}
    # unset: the adapter's defaults, as before the fields existed (the step's 8 episodes in one micro-batch)
    assert _kwargs(small_sets) == {"per_device_train_batch_size": 8, "activation_checkpointing": False,
                                   "save_steps": 50, "save_total_limit": 2}


def test_an_option_decides_alone_and_one_that_disagrees_with_its_field_is_refused(small_sets: list[str]) -> None:
    kwargs = _kwargs(small_sets, *SIZED[1:], "backend.options={micro_batch_size: 4}")
    assert kwargs["per_device_train_batch_size"] == 4 and kwargs["save_steps"] == 7
    spec = load_spec("examples/calculator.yaml", ["backend.name=trl", *small_sets, *SIZED,
                                                  "backend.options={micro_batch_size: 4, save_steps: 7}"])
    assert list(option_conflicts(spec, "trl", SIZING_OPTIONS)) == ["backend.options.micro_batch_size"]
    assert [str(p) for p in TrlBackend().check(spec)] == [
        "backend.options.micro_batch_size: resources.micro_batch_size (2) sets it too, to another value: "
        "remove the option or make the two agree"]


def test_the_memory_estimate_reads_them(tmp_path: Path) -> None:
    spec = load_spec("examples/calculator.gpu.yaml", ["data.train.size=64", "data.eval.size=8", "data.dev.size=8",
                                                      "resources.micro_batch_size=8",
                                                      "resources.gradient_checkpointing=false"])
    TrlBackend().compile(spec, tmp_path / "job")
    config = json.loads((tmp_path / "job" / "grpo_config.json").read_text())
    assert (config["per_device_train_batch_size"], config["activation_checkpointing"]) == (8, False)
    memory = estimate_job(spec, "trl", tmp_path / "job")
    assert (memory["micro_batch"], memory["recompute"]) == (8, False)

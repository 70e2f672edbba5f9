"""backend.options.micro_batch_size: a device's share of the step in micro-batches whose gradients accumulate into
the one update of the RL step, generated at once; the update equals the whole-batch one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from expert_mix import mix_in_expert

from agentbridge.models import resolve_model_path
from agentbridge.rollout.agent import Agent
from agentbridge.spec import load_spec
from agentbridge_trl.backend import TrlBackend
from agentbridge_trl.config import grpo_config_kwargs
from agentbridge_trl.trainer import build_trainer

CALC = "examples/calculator.yaml"


def test_micro_batches_set_accumulation_and_one_generation_per_step() -> None:
    spec = load_spec(CALC, ["backend.options={micro_batch_size: 4}"])  # 8 prompts x 4 samples on one device
    kwargs = grpo_config_kwargs(spec, "out")
    assert (kwargs["per_device_train_batch_size"], kwargs["gradient_accumulation_steps"],
            kwargs["steps_per_generation"]) == (4, 8, 8)
    whole = grpo_config_kwargs(load_spec(CALC), "out")
    assert (whole["per_device_train_batch_size"], whole["gradient_accumulation_steps"]) == (32, 1)
    gpu = grpo_config_kwargs(load_spec(CALC, ["resources.nodes=2", "resources.gpus_per_node=8",
                                              "algorithm.batch_size=64", "backend.options={micro_batch_size: 4}"]),
                             "out")
    assert (gpu["per_device_train_batch_size"], gpu["gradient_accumulation_steps"]) == (4, 4)  # 256 / 16 GPUs


@pytest.mark.parametrize("micro", [0, 5, "4"])
def test_a_micro_batch_that_does_not_divide_the_share_is_one_line(micro: Any) -> None:
    spec = load_spec(CALC, [f"backend.options={{micro_batch_size: {micro!r}}}"])
    assert [str(p) for p in TrlBackend().check(spec)] == [
        f"backend.options.micro_batch_size: must be a whole number that divides each device's 32 episodes per "
        f"step, got {micro!r}"]


def one_step(spec: Any, out: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], float]:
    """The weights before and after one RL step, and its gradient norm; every other episode is the expert's, so
    rewards vary."""
    from transformers import AutoModelForCausalLM, TrainerCallback

    torch.manual_seed(0)
    agent = Agent.from_spec(spec)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(spec.model.path))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    kwargs = {**grpo_config_kwargs(spec, str(out)), "max_steps": 1, "save_strategy": "no"}
    trainer, rollout = build_trainer(agent, model, kwargs, agent.tasks("train"))
    mix_in_expert(rollout, agent.tokenizer)
    norms: list[float] = []

    class GradNorm(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "grad_norm" in logs:
                norms.append(float(logs["grad_norm"]))

    trainer.add_callback(GradNorm())
    trainer.train()
    return before, {n: p.detach().clone() for n, p in model.named_parameters()}, norms[0]


@pytest.mark.parametrize("algorithm", ["grpo", "dapo"])  # a sequence mean per micro-batch; a token mean overall
def test_the_update_is_the_whole_batch_update(algorithm: str, tmp_path: Path, small_sets: list[str]) -> None:
    """The same episodes (one generation per step either way), the same gradient (its norm: Adam's first step
    would hide a scale), the same update direction (Adam's sign flips only where a gradient is ~0)."""
    sets = [*small_sets, f"algorithm.name={algorithm}", "algorithm.batch_size=2", "algorithm.group_size=4",
            "algorithm.lr=0.01", "algorithm.warmup_steps=0"]
    before, whole, whole_norm = one_step(load_spec(CALC, sets), tmp_path / "whole")
    _, micro, micro_norm = one_step(load_spec(CALC, [*sets, "backend.options={micro_batch_size: 2}"]),
                                    tmp_path / "micro")
    assert whole_norm > 0 and micro_norm == pytest.approx(whole_norm, rel=1e-4)
    step = torch.cat([(whole[n] - before[n]).flatten() for n in whole])
    micro_step = torch.cat([(micro[n] - before[n]).flatten() for n in micro])
    assert float(torch.nn.functional.cosine_similarity(step, micro_step, dim=0)) > 0.999

"""``model.lora`` on TRL: GRPOTrainer(peft_config=...) trains a LoRA adapter on the tiny builtin model (CPU).

The in-process run (``build_trainer``, the job's own trainer) checks that only the adapter moves, and that the
reference log-probs of the KL term are the base model's: recomputed here with a frozen copy of the base, and
different from the adapted policy's once the adapter has moved. The end-to-end run (``agentbridge train``) checks
the saved model: merged into plain transformers weights, with ``model_info.json`` saying so.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from expert_mix import mix_in_expert

from agentbridge.models import load_model
from agentbridge.rollout.agent import Agent
from agentbridge.spec import load_spec
from agentbridge_trl.backend import TrlBackend
from agentbridge_trl.config import grpo_config_kwargs
from agentbridge_trl.trainer import build_trainer

LORA = ["model.lora.rank=4", "model.lora.alpha=16", "model.lora.target_modules=[q_proj,v_proj,down_proj]",
        "algorithm.kl_coef=0.05", "algorithm.warm_start=null", "algorithm.lr=0.05",
        "algorithm.warmup_steps=0"]  # the first step moves the adapter: the second step's policy is not the base


def base_logps(base: Any, inputs: dict[str, Any], temperature: float) -> Any:
    """The completion tokens' log-probs under ``base`` (a plain transformers model), computed from scratch."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    width = inputs["completion_ids"].size(1)
    with torch.no_grad():
        logits = base(input_ids=ids, attention_mask=mask).logits[:, -width - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, inputs["completion_ids"][..., None]).squeeze(-1)


@pytest.fixture(scope="module")
def lora_run(small_sets: list[str], tmp_path_factory: Any) -> dict[str, Any]:
    spec = load_spec("examples/calculator.yaml", [*small_sets, *LORA])
    agent = Agent.from_spec(spec)
    model = load_model(spec.model.path, seed=spec.seed)
    base = copy.deepcopy(model).eval()  # the policy before training: what the reference must be
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer, rollout = build_trainer(agent, model, grpo_config_kwargs(spec, str(tmp_path_factory.mktemp("o"))),
                                     agent.tasks("train"))
    mix_in_expert(rollout, agent.tokenizer)  # varied rewards: the adapter gets a gradient
    seen: list[dict[str, Any]] = []
    original_loss = trainer._compute_loss

    def spy_loss(model: Any, inputs: dict[str, Any]) -> Any:
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        with torch.no_grad():  # the adapted policy's log-probs now, through the trainer's own computation
            policy, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, inputs["completion_ids"]
                                                                      .size(1))
        seen.append({"ref": inputs["ref_per_token_logps"].detach().clone(), "policy": policy.detach().clone(),
                     "base": base_logps(base, inputs, trainer.temperature), "mask": inputs["completion_mask"]
                     * inputs.get("tool_mask", 1)})
        return original_loss(model, inputs)

    trainer._compute_loss = spy_loss  # type: ignore[method-assign]
    trainer.train()
    return {"trainer": trainer, "model": model, "before": before, "seen": seen}


def test_only_the_adapter_trains(lora_run: dict[str, Any]) -> None:
    trainer, before = lora_run["trainer"], lora_run["before"]
    params = dict(trainer.model.named_parameters())
    for name, value in before.items():  # base weights, bit for bit (PEFT names them base_layer.weight)
        wrapped = name.replace(".weight", ".base_layer.weight").replace(".bias", ".base_layer.bias")
        now = next(params[k] for k in (f"base_model.model.{wrapped}", f"base_model.model.{name}", name) if k in params)
        assert torch.equal(now.detach(), value), name
    assert trainer.state.global_step == 2 and trainer.ref_model is None  # the reference is the adapter disabled
    adapter = {n: p for n, p in params.items() if "lora_" in n}
    assert adapter and all(p.requires_grad for p in adapter.values())
    assert any(("lora_B" in n) and p.detach().abs().sum() > 0 for n, p in adapter.items())  # B starts at zero
    assert all(".layers.0.self_attn.q_proj.lora_A" not in n or p.shape[0] == 4 for n, p in adapter.items())


def test_reference_logps_are_the_base_models(lora_run: dict[str, Any]) -> None:
    seen = lora_run["seen"]
    assert len(seen) == 2
    for rec in seen:
        m = rec["mask"].bool()
        assert torch.allclose(rec["ref"][m], rec["base"][m], atol=1e-4), (rec["ref"] - rec["base"])[m].abs().max()
    # once the adapter moved (the second step), the policy is no longer the base: the check above can tell them apart
    last = seen[-1]
    m = last["mask"].bool()
    assert (last["policy"][m] - last["base"][m]).abs().max() > 1e-3


def test_merged_model_is_plain_transformers(lora_run: dict[str, Any], tmp_path: Path) -> None:
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from agentbridge_trl.trainer import merge_lora

    trainer, before = lora_run["trainer"], lora_run["before"]
    probe = torch.arange(3, 40)[None, :]
    with torch.no_grad():
        adapted = trainer.model(input_ids=probe).logits  # the trained policy, adapter on
    merged = merge_lora(trainer.model)
    assert merged is lora_run["model"]  # the job's model object, its layers unwrapped
    merged.save_pretrained(tmp_path / "m")
    with safe_open(str(tmp_path / "m" / "model.safetensors"), "pt") as f:
        assert not any("lora" in k or "base_layer" in k for k in f.keys())  # noqa: SIM118
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    with torch.no_grad():  # the plain model computes what the adapted one did
        assert torch.allclose(loaded(input_ids=probe).logits, adapted, atol=1e-4)
    state = loaded.state_dict()
    assert set(state) == set(load_model("builtin:tiny").state_dict())
    assert not any("lora" in k or "base_layer" in k for k in state)
    assert all(p.requires_grad for p in merged.parameters())  # the SFT-only control trains every weight again
    moved = [n for n in before if not torch.equal(state[n], before[n])]
    assert moved and all(n.endswith(("q_proj.weight", "v_proj.weight", "down_proj.weight")) for n in moved)


def test_compiled_job_carries_lora_and_validates(tmp_path: Path, small_sets: list[str]) -> None:
    spec = load_spec("examples/calculator.yaml", [*small_sets, *LORA])
    backend = TrlBackend()
    assert backend.check(spec) == []
    job = backend.compile(spec, tmp_path / "job")
    job.write_manifest()
    compiled = load_spec(job.path / "spec.yaml")  # what the entry reads
    assert compiled.model.lora == spec.model.lora and compiled.model.lora is not None
    assert compiled.model.lora.scaling_alpha() == 16.0
    assert json.loads((job.path / "grpo_config.json").read_text())["beta"] == 0.05
    report = backend.validate(job)
    assert report.ok, [str(p) for p in report.problems]


def test_train_saves_the_merged_model(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from agentbridge.testing import short_training_run

    run = tmp_path / "run"
    rows = short_training_run("examples/calculator.yaml", run, [*LORA, "algorithm.group_size=4"])
    assert [r["step"] for r in rows] == [1, 2]
    info = json.loads((run / "model" / "model_info.json").read_text())
    assert info["lora"] == {"rank": 4, "alpha": 16.0, "dropout": 0.0,
                            "target_modules": ["q_proj", "v_proj", "down_proj"], "merged": True}
    assert "adapter" in info["trainer_checkpoints"]
    assert json.loads((run / "manifest.json").read_text())["lora"]["merged"] is True
    assert not (run / "model" / "adapter_config.json").exists()
    loaded = AutoModelForCausalLM.from_pretrained(run / "model")
    keys = set(loaded.state_dict())
    assert not any("lora" in k or "base_layer" in k for k in keys)
    assert keys == set(load_model("builtin:tiny").state_dict())
    assert set(json.loads((run / "eval.json").read_text())) >= {"before_training", "after_rl"}

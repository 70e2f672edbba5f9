"""The per-GPU memory estimate (agentbridge.memory): its arithmetic, the manifest's memory_per_gpu and check's
warning past the GPU's size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbridge.memory import GIB, estimate, model_shape, over_budget
from agentbridge.spec import load_spec
from agentbridge.spec.schema import Spec

GPU_SPEC = "examples/calculator.gpu.yaml"
# Qwen2.5-3B's config.json (the fields the estimate reads)
QWEN_3B = {"hidden_size": 2048, "num_hidden_layers": 36, "intermediate_size": 11008, "num_attention_heads": 16,
           "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}


def _spec(*sets: str, nodes: int = 1, gpus: int = 1) -> Spec:
    return load_spec(GPU_SPEC, [f"resources.nodes={nodes}", f"resources.gpus_per_node={gpus}", *sets])


@pytest.fixture()
def fake_3b(tmp_path: Path) -> Path:
    model = tmp_path / "fake-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN_3B))
    return model


def test_parameter_count_from_config_json(fake_3b: Path) -> None:
    shape, source = model_shape(str(fake_3b))
    assert shape is not None and source.endswith("config.json")
    assert 3.0e9 < shape["parameters"] < 3.2e9  # Qwen2.5-3B: 3.09B
    assert (shape["hidden"], shape["layers"], shape["vocab"]) == (2048, 36, 151936)
    tiny, tiny_source = model_shape("builtin:tiny")  # 4 layers, 128 wide, 4096 tokens
    assert tiny is not None and tiny_source.endswith("config.json")
    assert (tiny["hidden"], tiny["layers"]) == (128, 4) and 0 < tiny["parameters"] < 5e6


def test_size_from_the_name_else_no_estimate() -> None:
    shape, source = model_shape("someorg/Fake-70B-Instruct")
    assert shape is not None and shape["parameters"] == 70e9 and "name" in source
    assert model_shape("someorg/Qwen2.5-0.5B")[0]["parameters"] == 0.5e9  # type: ignore[index]
    memory = estimate(_spec("model.path=someorg/no-size-here"), backend="trl")
    assert memory["total_gib"] is None and "parameter count is unknown" in memory["why"]
    assert over_budget(memory) is None


def test_the_arithmetic_unsharded(fake_3b: Path) -> None:
    spec = _spec(f"model.path={fake_3b}", "algorithm.kl_coef=0.001")
    memory = estimate(spec, backend="trl", micro_batch=1)
    params = memory["parameters"]
    gib = memory["gib"]
    assert gib["parameters"] == round(params * 2 / GIB, 2)
    assert gib["gradients"] == round(params * 2 / GIB, 2)
    assert gib["optimizer"] == round(params * 12 / GIB, 2)
    assert gib["reference"] == gib["parameters"]  # kl_coef > 0
    assert gib["inference_engine"] == 0.0
    seq = spec.agent.max_prompt_tokens + spec.agent.max_response_tokens
    assert gib["activations"] == round((seq * 2048 * 34 * 36 + seq * 151936 * 4) / GIB, 2)
    assert memory["total_gib"] == pytest.approx(sum(gib.values()), abs=0.05)
    assert memory["gpu_memory_gib"] == 80.0 and "default" in memory["gpu_memory"]
    assert any("bf16" in a for a in memory["assumptions"]) and len(memory["formula"]) == 7
    recompute = estimate(spec, backend="trl", recompute=True)["gib"]["activations"]
    assert recompute < gib["activations"] / 2
    engine = estimate(spec, backend="verl", engine_fraction=0.5)["gib"]["inference_engine"]
    assert engine == 40.0


def test_sharding_divides_and_offload_removes(fake_3b: Path) -> None:
    spec = _spec(f"model.path={fake_3b}", nodes=1, gpus=8)
    one = estimate(spec, backend="trl")["gib"]
    z1 = estimate(spec, backend="trl", sharding="zero", zero_stage=1)["gib"]
    z2 = estimate(spec, backend="trl", sharding="zero", zero_stage=2)["gib"]
    z3 = estimate(spec, backend="trl", sharding="zero", zero_stage=3)["gib"]
    fsdp = estimate(spec, backend="verl", sharding="fsdp")["gib"]
    assert z1["optimizer"] == pytest.approx(one["optimizer"] / 8, abs=0.01) and z1["gradients"] == one["gradients"]
    assert z2["gradients"] == pytest.approx(one["gradients"] / 8, abs=0.01)
    assert z2["parameters"] == one["parameters"]
    assert z3["parameters"] == pytest.approx(one["parameters"] / 8, abs=0.01)
    assert fsdp == z3
    off = estimate(spec, backend="verl", sharding="fsdp", offload={"params": True, "optimizer": True})["gib"]
    assert off["parameters"] == 0 and off["optimizer"] == 0 and off["gradients"] == fsdp["gradients"]
    mega = estimate(spec, backend="slime", sharding="megatron", tp=2, distributed_optimizer=True)["gib"]
    assert mega["parameters"] == pytest.approx(one["parameters"] / 2, abs=0.01)
    assert mega["optimizer"] == pytest.approx(one["optimizer"] / 8, abs=0.01)


def test_lora_shrinks_gradients_and_optimizer_and_drops_the_reference(fake_3b: Path) -> None:
    full = estimate(_spec(f"model.path={fake_3b}", "algorithm.kl_coef=0.01"), backend="trl")
    lora = estimate(_spec(f"model.path={fake_3b}", "algorithm.kl_coef=0.01", "model.lora.rank=16"), backend="trl")
    assert lora["trainable_parameters"] < full["parameters"] / 50
    assert lora["gib"]["gradients"] < full["gib"]["gradients"] / 50
    assert lora["gib"]["optimizer"] < full["gib"]["optimizer"] / 50
    assert lora["gib"]["reference"] == 0 and full["gib"]["reference"] > 0
    assert lora["gib"]["parameters"] >= full["gib"]["parameters"]  # the base model stays, plus the adapter


@pytest.mark.parametrize("backend", ["trl", "verl"])
def test_compiled_gpu_jobs_hold_the_estimate(backend: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from agentbridge.cli import main

    result = CliRunner().invoke(main, ["compile", GPU_SPEC, "--backend", backend, "-o", str(tmp_path / "job")])
    assert result.exit_code == 0, result.output
    memory = json.loads((tmp_path / "job" / "manifest.json").read_text())["memory_per_gpu"]
    assert memory["total_gib"] > 0 and memory["gpus"] == 16 and memory["parameters"] >= 3e9
    if backend == "trl":  # the example's ZeRO-3 over 16 GPUs, micro-batches of 4 with checkpointing
        assert memory["sharding"].startswith("DeepSpeed ZeRO-3") and memory["micro_batch"] == 4
        assert memory["recompute"] is True
    else:  # FSDP with vLLM colocated at veRL's gpu_memory_utilization
        assert memory["sharding"].startswith("FSDP") and memory["gib"]["inference_engine"] == 40.0


def test_cpu_jobs_have_no_estimate(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from agentbridge.cli import main

    result = CliRunner().invoke(main, ["compile", "examples/calculator.yaml", "--backend", "trl", "-o",
                                       str(tmp_path / "job")])
    assert result.exit_code == 0, result.output
    assert "memory_per_gpu" not in json.loads((tmp_path / "job" / "manifest.json").read_text())


def test_check_warns_when_a_70b_model_does_not_fit_one_gpu(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from agentbridge.cli import main

    job = tmp_path / "job"
    result = CliRunner().invoke(main, ["compile", GPU_SPEC, "--backend", "trl", "-o", str(job),
                                       "--set", "model.path=someorg/Fake-70B-Instruct",
                                       "--set", "resources.nodes=1", "--set", "resources.gpus_per_node=1"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["check", str(job)])
    lines = [line for line in result.output.splitlines() if "GiB per GPU" in line]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"warning: {job}: the estimated ")
    assert "params " in lines[0] and "optimizer " in lines[0] and lines[0].endswith(
        "exceeds 80 GiB: offload, shard or use LoRA")


def _compiled(backend: str, gpus: int, tmp_path: Path, *overrides: str) -> dict:
    """memory_per_gpu of calculator.gpu's job for ``backend`` on one node of ``gpus`` GPUs, the spec's backend set
    to it (so that ``overrides``, ``backend.overrides.KEY=VALUE``, apply)."""
    from click.testing import CliRunner

    from agentbridge.cli import main

    sets = [f"resources.gpus_per_node={gpus}", "resources.nodes=1", f"backend.name={backend}", "backend.options={}",
            *overrides]
    job = tmp_path / f"{backend}-{gpus}-{len(overrides)}"
    result = CliRunner().invoke(main, ["compile", GPU_SPEC, "--backend", backend, "-o", str(job),
                                       *[x for s in sets for x in ("--set", s)]])
    assert result.exit_code == 0, result.output
    return json.loads((job / "manifest.json").read_text())["memory_per_gpu"]


@pytest.mark.parametrize("gpus", [1, 8])
@pytest.mark.parametrize("backend", ["trl", "verl", "openrlhf", "slime", "roll", "rlinf"])
def test_every_backend_fits_a_3b_model_in_80_gib(backend: str, gpus: int, tmp_path: Path) -> None:
    memory = _compiled(backend, gpus, tmp_path)
    assert memory["parameters"] >= 3e9 and memory["gpus"] == gpus
    assert 0 < memory["total_gib"] <= 80.0, memory["gib"]
    assert over_budget(memory) is None


def test_the_memory_settings_each_job_chose_are_read(tmp_path: Path) -> None:
    """Each setting a GPU job makes for its memory is what the estimate reads: turning it off by an override raises
    the estimate (or, where the job swaps the engine and the trainer, its training phase)."""
    verl = _compiled("verl", 1, tmp_path)
    assert verl["offload"] == {"params": True, "optimizer": True, "ref": False}
    assert verl["inputs"]["param_offload"].startswith("actor_rollout_ref.actor.fsdp_config.param_offload: True")
    key = "backend.overrides.actor_rollout_ref.actor.fsdp_config."
    assert _compiled("verl", 1, tmp_path, key + "param_offload=false")["total_gib"] > verl["total_gib"]
    assert _compiled("verl", 1, tmp_path, key + "optimizer_offload=false")["total_gib"] > verl["total_gib"]

    rlinf = _compiled("rlinf", 1, tmp_path)
    assert rlinf["offload"]["optimizer"] is True
    assert _compiled("rlinf", 1, tmp_path, "backend.overrides.actor.enable_offload=false")["total_gib"] > \
        rlinf["total_gib"]

    roll = _compiled("roll", 8, tmp_path)
    assert "distributed optimizer over 8" in roll["sharding"] and roll["swap"] is True
    off = _compiled("roll", 8, tmp_path, "backend.overrides.actor_train.strategy_args.strategy_config."
                                         "use_distributed_optimizer=false")
    assert off["gib"]["optimizer"] > roll["gib"]["optimizer"]
    assert off["phases"]["training"] > roll["phases"]["training"]

    slime = _compiled("slime", 8, tmp_path)  # slime shards its optimizer whatever the flags say: the flag is read
    assert slime["inputs"]["distributed_optimizer"] == "use-distributed-optimizer: True"
    assert "distributed optimizer over 8" in slime["sharding"] and slime["swap"] is True
    assert _compiled("slime", 8, tmp_path, "backend.overrides.no-offload-train=true")["total_gib"] > \
        slime["total_gib"]


def test_a_swapping_job_peaks_at_its_larger_phase(fake_3b: Path) -> None:
    spec = _spec(f"model.path={fake_3b}", nodes=1, gpus=8)
    summed = estimate(spec, backend="roll", sharding="megatron", distributed_optimizer=True, engine_fraction=0.8)
    swapped = estimate(spec, backend="roll", sharding="megatron", distributed_optimizer=True, engine_fraction=0.8,
                       swap=True)
    assert swapped["gib"] == summed["gib"] and swapped["swap"] is True
    training = sum(v for k, v in swapped["gib"].items() if k != "inference_engine")
    assert swapped["phases"]["training"] == pytest.approx(training, abs=0.05)
    assert swapped["total_gib"] == max(swapped["phases"].values()) == 64.0
    assert summed["total_gib"] == pytest.approx(sum(summed["gib"].values()), abs=0.05) and "phases" not in summed
    assert any(line.startswith("total = max(") for line in swapped["formula"])

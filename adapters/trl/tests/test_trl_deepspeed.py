"""A compiled TRL GPU job under DeepSpeed ZeRO-2 and ZeRO-3, run to the end on CPU with the real DeepSpeed.

The job is compiled for GPUs (``resources.gpus_per_node``, ``backend.options.zero_stage``), so its GRPOConfig
carries the DeepSpeed config the GPU run gets; the one change for CPU is ``bf16: false`` (no bf16 autocast
without a GPU). Its entry runs under ``accelerate launch`` with 2 processes (torchrun, gloo), or through its own
``launch.sh`` as one process, on DeepSpeed's CPU accelerator: warm start, RL steps (with the reference model of
a KL term), the evaluation after RL, the SFT-only control and saving. accelerate hands a launcher's processes a
backend on a machine without a GPU only for CPU jobs, so every process loads ``agentbridge_trl.cpu_ranks``
(``sitecustomize``), which gives them gloo; everything else is the job's own code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentbridge.backends import compile_job, get_backend
from agentbridge.spec import load_spec

pytest.importorskip("deepspeed", reason="the DeepSpeed tests need deepspeed (agentbridge-trl's deepspeed extra)")

from test_trl_multirank import free_port  # noqa: E402

TINY = ["backend.name=trl", "algorithm.group_size=4", "data.dev=null", "data.train.size=8", "agent.max_turns=1",
        "algorithm.batch_size=2"]
# ZeRO-3: a short warm start (its weights go to the other rank), 2 GRPO steps with a KL term (TRL's reference model,
# wrapped by DeepSpeed too), the evaluation after RL and the SFT-only control (2 steps, not RL's wall time: the same
# work however loaded the machine is)
WARM = [*TINY, "algorithm.steps=2", "data.eval.size=2", "algorithm.kl_coef=0.001", "algorithm.warm_start.demos=16",
        "algorithm.warm_start.max_steps=2", "algorithm.warm_start.batch_size=8", "algorithm.warm_start.target=null",
        "algorithm.warm_start.control_steps=2"]
# no warm start: 2 GRPO steps and the evaluation after RL
PLAIN = [*TINY, "algorithm.steps=2", "data.eval.size=2", "algorithm.warm_start=null"]
SITE = "import agentbridge_trl.cpu_ranks\nagentbridge_trl.cpu_ranks.install()\n"


def gpu_job(sets: list[str], gpus: int, stage: int, out: Path) -> Path:
    """The calculator compiled for ``gpus`` GPUs under ZeRO ``stage``, with bf16 off for CPU (the only change)."""
    spec = load_spec("examples/calculator.yaml", [*sets, f"resources.gpus_per_node={gpus}",
                                                  f"backend.options={{zero_stage: {stage}}}"])
    job = compile_job(spec, get_backend("trl"), out).path
    config = json.loads((job / "grpo_config.json").read_text())
    assert config["deepspeed"]["zero_optimization"]["stage"] == stage and config["use_cpu"] is False
    config["bf16"] = False
    (job / "grpo_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return job


def cpu_env(tmp: Path, **extra: str) -> dict[str, str]:
    site = tmp / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITE)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TRL_EXPERIMENTAL_SILENCE": "1", **extra}


def weights(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def assert_saved_model_is_whole(run: Path, trained: Path) -> None:
    """The run's model loads with transformers, every weight has the base model's shape (nothing left empty by
    ZeRO-3's shards) and equals the RL-trained weights (the trainer's own checkpoint at the last step)."""
    import torch
    from transformers import AutoModelForCausalLM

    from agentbridge.models import resolve_model_path

    base = AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:tiny")).state_dict()
    loaded = AutoModelForCausalLM.from_pretrained(run / "model").state_dict()
    assert loaded.keys() == base.keys()
    for name, value in loaded.items():
        assert value.numel() > 0 and value.shape == base[name].shape, name
    assert {str(v.dtype) for v in weights(run / "model").values()} == {"torch.float32"}  # the fp32 master weights
    checkpoint = AutoModelForCausalLM.from_pretrained(trained).state_dict()
    for name, value in loaded.items():
        assert torch.equal(value, checkpoint[name].to(torch.float32)), name


def launch_two(job: Path, run: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(free_port()), "-m", "agentbridge_trl.entry", str(job), "--run-dir", str(run),
           "--quiet"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize(("stage", "sets"), [(3, WARM), (2, PLAIN)], ids=["zero3", "zero2"])
def test_gpu_job_runs_to_the_end_under_deepspeed_with_two_processes(tmp_path: Path, stage: int,
                                                                    sets: list[str]) -> None:
    job, run = gpu_job(sets, 2, stage, tmp_path / "job"), tmp_path / "runs" / "calc"
    res = launch_two(job, run, cpu_env(tmp_path))
    assert res.returncode == 0, res.stderr[-4000:]

    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["processes"] == 2  # one world of 2 ranks, not two runs of 1
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    arms = {"before_training", "before_rl", "after_rl", "paired"} | ({"sft_control"} if stage == 3 else set())
    assert set(json.loads((run / "eval.json").read_text())) == arms
    assert_saved_model_is_whole(run, run / "trainer" / "checkpoint-2")
    if stage == 3:
        assert json.loads((run / "warm_start.json").read_text())["control"]["steps"] == 2


def test_one_process_launch_sh_under_deepspeed(tmp_path: Path) -> None:
    """``launch.sh`` of a 1-GPU ZeRO-3 job: its one process is rank 0 of 1, so DeepSpeed starts (no MPI)."""
    job = gpu_job([*TINY, "algorithm.steps=1", "data.eval.size=1", "algorithm.warm_start=null"], 1, 3,
                  tmp_path / "job")
    run = tmp_path / "runs" / "calc"
    env = cpu_env(tmp_path, PYTHON=sys.executable, RUN_DIR=str(run))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    res = subprocess.run(["bash", str(job / "launch.sh"), "--quiet"], capture_output=True, text=True, timeout=600,
                         env=env)
    assert res.returncode == 0, res.stderr[-4000:]
    assert set(json.loads((run / "eval.json").read_text())) == {"before_training", "before_rl", "after_rl", "paired"}
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1
    assert_saved_model_is_whole(run, run / "trainer" / "checkpoint-1")


def test_launch_sh_makes_one_rank_only_for_deepspeed(tmp_path: Path) -> None:
    ddp = compile_job(load_spec("examples/calculator.yaml", [*PLAIN, "resources.gpus_per_node=1"]),
                      get_backend("trl"), tmp_path / "ddp").path
    zero = gpu_job(PLAIN, 1, 2, tmp_path / "zero")
    assert "RANK" not in (ddp / "launch.sh").read_text()

    def ranks(**env: str) -> dict[str, str]:
        script = (zero / "launch.sh").read_text().replace('exec "$PYTHON"', 'echo "$RANK $LOCAL_RANK $WORLD_SIZE '
                                                                              '$MASTER_ADDR $MASTER_PORT" #')
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                             env={"PATH": os.environ["PATH"], "PYTHON": sys.executable, **env}).stdout.split()
        return dict(zip(["RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"], out, strict=True))

    alone = ranks()
    assert alone["RANK"] == "0" and alone["LOCAL_RANK"] == "0" and alone["WORLD_SIZE"] == "1"
    assert alone["MASTER_ADDR"] == "127.0.0.1" and int(alone["MASTER_PORT"]) > 0
    launched = ranks(RANK="3", LOCAL_RANK="1", WORLD_SIZE="8", MASTER_ADDR="10.0.0.1", MASTER_PORT="1234")
    assert launched == {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "MASTER_ADDR": "10.0.0.1",
                        "MASTER_PORT": "1234"}  # a launcher's ranks are kept


def test_shared_prefix_reads_the_model_inside_a_deepspeed_engine() -> None:
    """``plain_head`` on what ``compute_loss`` gets under DeepSpeed, an engine whose ``config`` is DeepSpeed's
    dict: the model's config is read from the engine's module (no AttributeError), and the engine goes through
    TRL's own forward."""
    import deepspeed

    from agentbridge.models import load_model
    from agentbridge_trl.shared_prefix import hf_model, plain_head

    model = load_model("builtin:tiny")
    engine = deepspeed.DeepSpeedEngine.__new__(deepspeed.DeepSpeedEngine)  # its attributes only, no set-up
    object.__setattr__(engine, "__dict__", {"module": model, "config": {"zero_optimization": {"stage": 3}}})
    assert hf_model(engine) is model
    assert plain_head(model) is True and plain_head(engine) is False

"""compile and check: the job directory, its rows, Hydra config, entry and scripts; capability errors; the plugin
stays light (no RLinf, Ray or torch at import)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLE, ROOT, SMALL, compile_job

from agentbridge.adapter import decode_task
from agentbridge.backends import Backend, Job, known_capabilities
from agentbridge.backends import compile_job as pipeline_compile
from agentbridge.plugins import get_plugins
from agentbridge.spec import SpecError, load_spec
from agentbridge_rlinf.backend import RlinfBackend


def test_registered_and_implements_the_protocol() -> None:
    backend = get_plugins().backends.get("rlinf")
    assert isinstance(backend, RlinfBackend) and isinstance(backend, Backend)
    caps = backend.capabilities()
    assert caps.algorithms == ["dapo", "grpo", "reinforce_pp"] and caps.verified_in_ci
    assert not caps.multimodal and not caps.turn_credit and not caps.cpu_training


@pytest.mark.parametrize(("algo", "some", "why"), [
    ("gspo", {"openrlhf", "trl", "verl"}, "no gspo loss"),
    ("rloo", {"openrlhf", "verl"}, "no rloo"),
    ("dr_grpo", {"openrlhf", "trl", "verl"}, "always divides by the group's std"),
    ("ppo", {"openrlhf", "verl"}, "AgentRunner, which runs agent loops, passes ReasoningRunner no critic"),
])
def test_a_missing_algorithm_is_one_line_naming_who_can(algo: str, some: set[str], why: str) -> None:
    known = known_capabilities()  # the installed backends: in RLinf's own environment, RLinf alone
    can = sorted(n for n, c in known.items() if algo in c.algorithms and n != "rlinf")
    assert some & set(known) <= set(can)
    problems = RlinfBackend().check(load_spec(ROOT / EXAMPLE, [*SMALL, f"algorithm.name={algo}"]))
    assert len(problems) == 1 and "\n" not in str(problems[0])
    line = str(problems[0])
    assert line.startswith(f"algorithm.name: rlinf cannot run '{algo}' (it runs dapo, grpo, reinforce_pp)")
    assert (f"backends that can: {', '.join(can)}" if can else "no installed backend can") in line and why in line
    with pytest.raises(SpecError) as e:  # the compile pipeline refuses it before writing anything
        pipeline_compile(load_spec(ROOT / EXAMPLE, [*SMALL, f"algorithm.name={algo}"]), RlinfBackend(),
                         ROOT / "jobs" / "never-written")
    assert [p for p in e.value.problems if p.startswith("algorithm.name")] == [line]
    assert not (ROOT / "jobs" / "never-written").exists()


@pytest.mark.parametrize(("sets", "expected"), [
    ([], []),
    (["backend.options.rollout_backend=vllm"], ["backend.options.rollout_backend: must be one of sglang"]),
    (["backend.options.training_backend=deepspeed"], ["backend.options.training_backend: must be one of fsdp, "
                                                      "megatron, got 'deepspeed'"]),
    (["backend.options.lr_warmup=3"], ["backend.options.lr_warmup: unknown RLinf option"]),
    (["algorithm.name=grpo", "algorithm.group_size=1"], ["algorithm.group_size: grpo computes advantages"]),
    (["backend.options.micro_batch_size=abc"], ["backend.options.micro_batch_size: must be a positive integer"]),
    (["backend.options.logger=tensorboard"], ["backend.options.logger: must be a list of RLinf logger names"]),
    (["backend.options.gpu_memory_utilization=1.5"], ["backend.options.gpu_memory_utilization: must be a number"]),
    (["backend.name=trl", "backend.options.lr_warmup=3"], []),  # another backend's options are not checked here
])
def test_check(sets: list[str], expected: list[str]) -> None:
    problems = [str(p) for p in RlinfBackend().check(load_spec(ROOT / EXAMPLE, [*SMALL, *sets]))]
    assert len(problems) == len(expected)
    assert all(p.startswith(e) for p, e in zip(problems, expected, strict=True)), problems


def test_compile_writes_a_self_contained_job(small_job: Job) -> None:
    for name in ("manifest.json", "spec.yaml", "rlinf_job.yaml", "entry.py", "launch.sh", "submit.sh",
                 "data/train.jsonl", "data/eval.jsonl"):
        assert (small_job.path / name).is_file(), name
    manifest = json.loads((small_job.path / "manifest.json").read_text())
    assert manifest["backend"] == "rlinf" and manifest["versions"]["rlinf_pin"] == "0.3.0"
    assert manifest["versions"]["agentbridge-rlinf"] == "0.1.0"
    assert manifest["tasks"] == {"train": 8, "eval": 4}
    launch = (small_job.path / "launch.sh").read_text()
    assert '"$ROOT/entry.py" --config-path' in launch and "--config-name rlinf_job" in launch
    assert '"agentbridge.spec_path=$ROOT/spec.yaml"' in launch and '"rollout.model.model_path=$MODEL"' in launch
    submit = (small_job.path / "submit.sh").read_text()
    assert "ray job submit" in submit and '--working-dir "$JOB"' in submit and "ROOT=." in submit
    assert "from agentbridge_rlinf.entry import main" in (small_job.path / "entry.py").read_text()


def test_rows_carry_the_task(small_job: Job) -> None:
    rows = [json.loads(line) for line in (small_job.path / "data" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 8
    row = rows[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    task = decode_task([row["agentbridge_task"]], "rlinf")  # RLinf's dataset wraps a string answer in a list
    assert task.prompt == row["prompt"][1]["content"] and task.data["answer"]
    with pytest.raises(ValueError, match="carries no agentbridge task"):
        decode_task(["42"], "rlinf")


def test_hydra_config_maps_the_spec(small_job: Job) -> None:
    config = yaml.safe_load((small_job.path / "rlinf_job.yaml").read_text())
    assert config["runner"]["task_type"] == "reasoning"
    agent = load_spec(small_job.path / "spec.yaml").agent
    assert config["runner"]["seq_length"] == agent.max_prompt_tokens + agent.max_response_tokens
    assert config["data"]["max_prompt_length"] == agent.max_prompt_tokens
    assert config["algorithm"]["group_size"] == 4 and config["data"]["rollout_batch_size"] == 2
    assert config["algorithm"]["adv_type"] == "grpo" and config["algorithm"]["loss_type"] == "actor"
    assert config["algorithm"]["clip_ratio_high"] == 0.28  # the example's dapo
    assert config["algorithm"]["recompute_logprobs"] is False and config["rollout"]["return_logprobs"] is True
    assert config["data"]["answer_key"] == "agentbridge_task" and config["data"]["apply_chat_template"] is True
    assert config["rollout"]["rollout_backend"] == "sglang" and config["agentloop"]["toolcall_parser"] is None
    assert config["reward"]["reward_type"] == "agentbridge"
    spec = load_spec(small_job.path / "spec.yaml")
    assert config["algorithm"]["sampling_params"]["max_new_tokens"] == spec.agent.max_tokens_per_turn


@pytest.mark.parametrize(("algo", "keys"), [
    ("grpo", {"adv_type": "grpo", "loss_type": "actor", "clip_ratio_high": None,
              "loss_agg_func": "seq-mean-token-mean", "kl_beta": 0.05, "kl_penalty_type": "low_var_kl"}),
    ("dapo", {"adv_type": "grpo", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "loss_agg_func": "token-mean"}),
    # REINFORCE++: KL as k1 in the token rewards, none in the loss
    ("reinforce_pp", {"adv_type": "reinpp", "loss_type": "actor", "loss_agg_func": "token-mean", "kl_beta": 0.0,
                      "reinpp_kl_beta": 0.05, "kl_penalty_type": "kl"}),
])
def test_algorithm_keys(tmp_path: Path, algo: str, keys: dict[str, object]) -> None:
    job = compile_job(tmp_path / "job", f"algorithm.name={algo}", "algorithm.kl_coef=0.05")
    config = yaml.safe_load((job.path / "rlinf_job.yaml").read_text())
    assert {k: config["algorithm"][k] for k in keys} == keys
    assert config["critic"]["use_critic_model"] is False


def test_overrides_and_options_apply_only_to_rlinf(tmp_path: Path) -> None:
    job = compile_job(tmp_path / "mine", "backend.options.micro_batch_size=2",
                      "backend.overrides={runner.seq_length: 1024, actor.optim.clip_grad: 0.5}")
    config = yaml.safe_load((job.path / "rlinf_job.yaml").read_text())
    assert config["runner"]["seq_length"] == 1024 and config["actor"]["optim"]["clip_grad"] == 0.5
    assert config["algorithm"]["training_batch_size_per_gpu"] == 2
    other = compile_job(tmp_path / "other", "backend.name=trl", "backend.overrides={runner.seq_length: 1024}")
    seq = yaml.safe_load((other.path / "rlinf_job.yaml").read_text())["runner"]["seq_length"]
    agent = load_spec(other.path / "spec.yaml").agent
    assert seq == agent.max_prompt_tokens + agent.max_response_tokens
    assert any("not applied to the RLinf job" in n for n in other.manifest["notes"])


def test_compile_and_the_plugin_stay_light() -> None:
    code = ("import sys; from agentbridge.plugins import get_plugins; get_plugins().backends.get('rlinf'); "
            "heavy = [m for m in ('rlinf', 'ray', 'torch', 'transformers') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_environment_recipe() -> None:
    from agentbridge import backend_envs

    cpu = backend_envs.recipe("rlinf", cpu=True, plugins=[])
    assert cpu.steps[0] == ["torch==2.13.0"] and cpu.steps[1] == ["--no-deps", "rlinf==0.3.0"]
    assert cpu.steps[2][0] == "torch==2.13.0" and "adapters/rlinf[cpu]" in " ".join(cpu.steps[2])
    with pytest.raises(ValueError) as e:  # the engine extras pin transformers 4.51.1: said in one line, not tried
        backend_envs.recipe("rlinf", cpu=False, plugins=[])
    assert "\n" not in str(e.value) and "transformers==4.51.1" in str(e.value)


def test_the_job_says_what_a_gpu_run_needs(small_job: Job) -> None:
    (note,) = [n for n in small_job.manifest["notes"] if n.startswith("GPU environment")]
    assert "transformers==4.51.1" in note and "# NOTE: GPU environment" in (small_job.path / "launch.sh").read_text()

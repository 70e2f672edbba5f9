"""compile and check: the job directory, its task lines, ROLL config, entry and scripts; capability errors; the plugin
stays light (no ROLL, Ray or torch at import)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from roll_helpers import EXAMPLE, ROOT, SMALL, compile_job

from agentbridge.backends import Backend, Job
from agentbridge.backends import compile_job as pipeline_compile
from agentbridge.plugins import get_plugins
from agentbridge.rollout.agent import read_tasks_jsonl
from agentbridge.spec import SpecError, load_spec
from agentbridge_roll import ROLL_COMMIT
from agentbridge_roll.backend import RollBackend
from agentbridge_roll.data import task_index

ALGOS = ["dapo", "dr_grpo", "grpo", "ppo", "reinforce_pp"]


def test_registered_and_implements_the_protocol() -> None:
    backend = get_plugins().backends.get("roll")
    assert isinstance(backend, RollBackend) and isinstance(backend, Backend)
    caps = backend.capabilities()
    assert caps.algorithms == ALGOS and not caps.verified_in_ci
    assert not caps.multimodal and not caps.turn_credit and not caps.cpu_training
    assert any(f"verified against ROLL's own code at GitHub alibaba/ROLL @ {ROLL_COMMIT[:7]}" in n for n in caps.notes)
    # agentbridge's `backends` table says it: verified against this upstream commit, not in this repository's CI
    assert getattr(caps, "verified_upstream", f"alibaba/ROLL@{ROLL_COMMIT}") == f"alibaba/ROLL@{ROLL_COMMIT}"
    assert len(ROLL_COMMIT) == 40


@pytest.mark.parametrize(("algo", "can", "why"), [
    ("gspo", ("openrlhf", "trl", "verl"), "in its RLVR pipeline only"),
    ("rloo", ("openrlhf", "verl"), "no leave-one-out advantage"),
])
def test_a_missing_algorithm_is_one_line_naming_who_can(algo: str, can: tuple[str, ...], why: str) -> None:
    problems = RollBackend().check(load_spec(ROOT / EXAMPLE, [*SMALL, f"algorithm.name={algo}"]))
    assert len(problems) == 1 and "\n" not in str(problems[0])
    line = str(problems[0])
    assert line.startswith(f"algorithm.name: roll cannot run '{algo}' (it runs {', '.join(ALGOS)})")
    named = line.split("backends that can: ", 1)[1].split(" (", 1)[0].split(", ")
    assert set(can) <= set(named) and "roll" not in named and why in line
    with pytest.raises(SpecError) as e:  # the compile pipeline refuses it before writing anything
        pipeline_compile(load_spec(ROOT / EXAMPLE, [*SMALL, f"algorithm.name={algo}"]), RollBackend(),
                         ROOT / "jobs" / "never-written")
    assert [p for p in e.value.problems if p.startswith("algorithm.name")] == [line]
    assert not (ROOT / "jobs" / "never-written").exists()


@pytest.mark.parametrize(("sets", "expected"), [
    ([], []),
    (["backend.options.rollout_engine=trtllm"], ["backend.options.rollout_engine: must be one of vllm, sglang"]),
    (["backend.options.training_strategy=deepspeed_train"], ["backend.options.training_strategy: must be one of "
                                                             "megatron_train, fsdp2_train, got 'deepspeed_train'"]),
    (["backend.options.lr_warmup=3"], ["backend.options.lr_warmup: unknown ROLL option"]),
    (["algorithm.name=grpo", "algorithm.group_size=1"], ["algorithm.group_size: grpo computes advantages"]),
    (["backend.options.micro_batch_size=abc"], ["backend.options.micro_batch_size: must be a positive integer"]),
    (["backend.options.gpu_memory_utilization=1.5"], ["backend.options.gpu_memory_utilization: must be a number"]),
    (["backend.name=trl", "backend.options.lr_warmup=3"], []),  # another backend's options are not checked here
])
def test_check(sets: list[str], expected: list[str]) -> None:
    problems = [str(p) for p in RollBackend().check(load_spec(ROOT / EXAMPLE, [*SMALL, *sets]))]
    assert len(problems) == len(expected)
    assert all(p.startswith(e) for p, e in zip(problems, expected, strict=True)), problems


def test_compile_writes_a_self_contained_job(small_job: Job) -> None:
    for name in ("manifest.json", "spec.yaml", "roll_job.yaml", "entry.py", "launch.sh", "submit.sh",
                 "data/train.jsonl", "data/eval.jsonl"):
        assert (small_job.path / name).is_file(), name
    manifest = json.loads((small_job.path / "manifest.json").read_text())
    assert manifest["backend"] == "roll" and manifest["versions"]["roll_pin"] == ROLL_COMMIT
    assert manifest["versions"]["agentbridge-roll"] == "0.1.0" and manifest["roll_source"].endswith(ROLL_COMMIT[:7])
    assert manifest["tasks"] == {"train": 8, "eval": 4}
    launch = (small_job.path / "launch.sh").read_text()
    assert '"$ROOT/entry.py" --config-path "$ROOT" --config-name roll_job' in launch
    assert '"custom_envs.agentbridge.env_config.spec_path=$ROOT/spec.yaml"' in launch
    assert '"custom_envs.agentbridge_eval.env_config.data_path=$ROOT/data/eval.jsonl"' in launch
    assert '"pretrain=$MODEL"' in launch and 'PYTHONPATH="$ROLL_HOME' in launch and "ROLL_LOG_DIR" in launch
    submit = (small_job.path / "submit.sh").read_text()
    assert "ray job submit" in submit and '--working-dir "$JOB"' in submit and "ROOT=." in submit
    assert "from agentbridge_roll.entry import main" in (small_job.path / "entry.py").read_text()
    assert any(ROLL_COMMIT[:7] in n for n in manifest["notes"])


def test_task_lines_read_back(small_job: Job) -> None:
    spec = load_spec(small_job.path / "spec.yaml")
    tasks = read_tasks_jsonl(small_job.path / "data" / "train.jsonl")
    from agentbridge.rollout.agent import load_tasks

    assert [t.to_dict() for t in tasks] == [t.to_dict() for t in load_tasks(spec, "train")] and len(tasks) == 8


def test_each_step_gives_its_groups_distinct_tasks_and_a_group_one_task() -> None:
    groups, n = 3, 7
    per_step = [[task_index(e, g, groups, n, seed=5) for g in range(groups)] for e in range(2)]
    assert all(len(set(step)) == groups for step in per_step)
    first_pass = sorted(task_index(e, g, groups, n, seed=5) for e in range(3) for g in range(groups)
                        if e * groups + g < n)
    assert first_pass == list(range(n))  # one pass over the tasks covers each once
    assert [task_index(0, g, groups, n, seed=None) for g in range(groups)] == [0, 1, 2]  # eval: file order
    assert task_index(0, 0, groups, n, seed=5) == task_index(0, 0, groups, n, seed=5)
    with pytest.raises(ValueError, match="no tasks"):
        task_index(0, 0, groups, 0, seed=None)


def test_config_maps_the_spec(small_job: Job) -> None:
    config = yaml.safe_load((small_job.path / "roll_job.yaml").read_text())
    spec = load_spec(small_job.path / "spec.yaml")
    agent = spec.agent
    assert config["sequence_length"] == agent.max_prompt_tokens + agent.max_response_tokens
    assert config["rollout_batch_size"] == 8  # batch_size 2 x group_size 4 trajectories
    env = config["train_env_manager"]
    assert (env["num_env_groups"], env["group_size"], env["tags"]) == (2, 4, ["agentbridge"])
    assert env["llm_proxy"]["proxy_type"] == "policy"
    assert env["group_filter_cls"] == "agentbridge_roll.layout.EqualScoresFilter"  # the example's dapo
    custom = config["custom_envs"]["agentbridge"]
    assert custom["env_manager_cls"] == "agentbridge_roll.rollout.AgentBridgeEnvManager"
    assert custom["max_steps"] == agent.max_turns and custom["max_tokens_per_step"] == agent.max_tokens_per_turn
    assert config["custom_envs"]["agentbridge_eval"]["env_config"]["split"] == "eval"
    assert config["actor_infer"]["generating_args"]["max_new_tokens"] == agent.max_tokens_per_turn
    assert config["actor_infer"]["generating_args"]["temperature"] == agent.sampling.temperature
    assert config["actor_infer"]["strategy_args"]["strategy_name"] == "vllm"
    assert config["actor_train"]["training_args"]["learning_rate"] == spec.algorithm.lr
    assert config["max_steps"] == spec.algorithm.steps and config["eval_steps"] == 0


@pytest.mark.parametrize(("algo", "keys"), [
    ("grpo", {"adv_estimator": "grpo", "loss_agg_mode": "seq-mean-token-mean", "use_kl_loss": True,
              "kl_loss_coef": 0.05, "init_kl_coef": 0.0,
              "reward_normalization": {"grouping": "traj_group_id", "norm_mean_type": "group",
                                       "norm_std_type": "group"}}),
    ("dr_grpo", {"adv_estimator": "grpo", "loss_agg_mode": "seq-mean-token-sum-norm",
                 "reward_normalization": {"grouping": "traj_group_id", "norm_mean_type": "group",
                                          "norm_std_type": None}}),
    ("dapo", {"use_pg_clip_range": True, "pg_clip_low": 0.2, "pg_clip_high": 0.28, "loss_agg_mode": "token-mean"}),
    # REINFORCE++ and PPO: KL as k1 in the token rewards, none in the loss
    ("reinforce_pp", {"adv_estimator": "reinforce", "whiten_advantages": True, "add_token_level_kl": True,
                      "kl_penalty": "kl", "init_kl_coef": 0.05, "use_kl_loss": False}),
    ("ppo", {"adv_estimator": "gae", "lambd": 0.95, "gamma": 1.0, "init_kl_coef": 0.05}),
])
def test_algorithm_keys(tmp_path: Path, algo: str, keys: dict[str, object]) -> None:
    job = compile_job(tmp_path / "job", f"algorithm.name={algo}", "algorithm.kl_coef=0.05")
    config = yaml.safe_load((job.path / "roll_job.yaml").read_text())
    assert {k: config[k] for k in keys} == keys
    assert ("critic" in config) == (algo == "ppo")
    dapo_filter = config["train_env_manager"]["group_filter_cls"] == "agentbridge_roll.layout.EqualScoresFilter"
    assert dapo_filter == (algo == "dapo")


def test_overrides_and_options_apply_only_to_roll(tmp_path: Path) -> None:
    job = compile_job(tmp_path / "mine", "backend.options.rollout_engine=sglang",
                      "backend.overrides={sequence_length: 1024, actor_train: {training_args: {weight_decay: 0.1}}}")
    config = yaml.safe_load((job.path / "roll_job.yaml").read_text())
    assert config["sequence_length"] == 1024 and config["actor_train"]["training_args"]["weight_decay"] == 0.1
    assert config["actor_infer"]["strategy_args"]["strategy_name"] == "sglang"
    other = compile_job(tmp_path / "other", "backend.name=trl", "backend.overrides={sequence_length: 1024}")
    seq = yaml.safe_load((other.path / "roll_job.yaml").read_text())["sequence_length"]
    agent = load_spec(other.path / "spec.yaml").agent
    assert seq == agent.max_prompt_tokens + agent.max_response_tokens
    assert any("not applied to the ROLL job" in n for n in other.manifest["notes"])


def test_compile_and_the_plugin_stay_light() -> None:
    code = ("import sys; from agentbridge.plugins import get_plugins; get_plugins().backends.get('roll'); "
            "heavy = [m for m in ('roll', 'ray', 'torch', 'transformers', 'tensordict') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_validate_without_roll_is_one_line(small_job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ROLL imports nowhere, ``check`` says how to get it in one line instead of failing."""
    monkeypatch.setattr("agentbridge.adapter.validation.backend_python", lambda *a: None)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    report = RollBackend().validate(small_job)
    (line,) = [str(p) for p in report.problems]
    assert not report.ok and "\n" not in line and "agentbridge backends setup roll" in line


def test_documented_differences_reach_the_job(tmp_path: Path) -> None:
    """What ROLL's math does differently from agentbridge's reference (the probe's DIFFERENCES, checked against ROLL
    by test_algorithms_roll.py) is in the compiled job's manifest; grpo has none."""
    ppo = pipeline_compile(load_spec(ROOT / EXAMPLE, [*SMALL, "algorithm.name=ppo"]), RollBackend(), tmp_path / "ppo")
    (line,) = ppo.manifest["algorithm_differences"]
    assert line.startswith("algorithm ppo on roll: advantages differs") and "environment tokens included" in line
    grpo = pipeline_compile(load_spec(ROOT / EXAMPLE, [*SMALL, "algorithm.name=grpo"]), RollBackend(),
                            tmp_path / "grpo")
    assert not grpo.manifest.get("algorithm_differences")


def test_the_job_saves_its_model_and_resumes(tmp_path: Path) -> None:
    """save_steps (and the last step: BasePipeline.do_checkpoint), the actor's HF model in each checkpoint-N, resume
    from the latest (resume_from_checkpoint: true), the tracker's folder, and launch.sh's trained model and metrics."""
    job = compile_job(tmp_path / "job")
    config = yaml.safe_load((job.path / "roll_job.yaml").read_text())
    assert config["save_steps"] == 50 and config["resume_from_checkpoint"] is True
    assert config["checkpoint_config"] == {"type": "file_system", "output_dir": "${output_dir}/checkpoints"}
    assert config["actor_train"]["training_args"]["save_hf_model"] is True
    assert config["tracker_kwargs"] == {"log_dir": "${output_dir}/tensorboard/roll"}
    launch = (job.path / "launch.sh").read_text()
    assert 'mkdir -p "$RUN_DIR/checkpoints"' in launch  # FileSystemUploader.get_latest_ckpt lists it on a fresh run
    assert '"$RUN_DIR"/checkpoints/checkpoint-*' in launch and 'CHECKPOINT="$TRAINED"' in launch
    assert '-m agentbridge_roll.run_metrics "$RUN_DIR" --job "$ROOT"' in launch
    assert not any("warm start and held-out evaluation are not run" in n for n in job.manifest["notes"])
    one = compile_job(tmp_path / "one", "algorithm.steps=1")
    assert any("saves no checkpoint of its first step" in n for n in one.manifest["notes"])
    run = tmp_path / "run"  # the trained model launch.sh picks: the latest checkpoint-N holding a HF model
    for n in (50, 100, 7):
        (run / "checkpoints" / f"checkpoint-{n}").mkdir(parents=True)
        (run / "checkpoints" / f"checkpoint-{n}" / "config.json").write_text("{}")
    (run / "checkpoints" / "checkpoint-150").mkdir()  # no HF model: not picked
    pick = next(line for line in launch.splitlines() if line.startswith("for d in"))
    out = subprocess.run(["bash", "-c", f'set -eu; RUN_DIR="{run}"; TRAINED=""; {pick}; echo "$TRAINED"'],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(run / "checkpoints" / "checkpoint-100")

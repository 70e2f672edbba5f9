"""compile: the job directory, its parquet rows, Hydra config and scripts; compile and the plugin stay light."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml
from conftest import EXAMPLE, SMALL, compile_job

from agentbridge.adapter import TASK_KEY, decode_task
from agentbridge.backends import Job
from agentbridge.spec import load_spec
from agentbridge_verl.backend import VerlBackend


def test_compile_writes_a_self_contained_job(small_job: Job) -> None:
    for name in ("manifest.json", "spec.yaml", "agentbridge_job.yaml", "agent_loop.yaml", "reward.py", "launch.sh",
                 "submit.sh", "data/train.parquet", "data/eval.parquet"):
        assert (small_job.path / name).is_file(), name
    manifest = json.loads((small_job.path / "manifest.json").read_text())
    assert manifest["backend"] == "verl" and manifest["versions"]["verl_pin"] == "0.9.1"
    assert manifest["tasks"] == {"train": 8, "eval": 4}
    # the example asks for an SFT control and 0 GPUs: the job says what it does instead
    assert [n.split(" ")[0] for n in manifest["notes"]] == ["algorithm.warm_start.control", "resources.gpus_per_node"]
    launch = (small_job.path / "launch.sh").read_text()
    assert "# NOTE: algorithm.warm_start.control is not run" in launch
    assert launch.index("agentbridge.training.phases prepare") < launch.index("verl.trainer.main_ppo")
    assert launch.index("verl.trainer.main_ppo") < launch.index("agentbridge.training.phases finish")


def test_parquet_rows_carry_the_task_and_select_agentbridges_loop(small_job: Job) -> None:
    rows = pq.read_table(small_job.path / "data" / "train.parquet").to_pylist()
    assert len(rows) == 8
    row = rows[0]
    assert row["agent_name"] == "agentbridge" and row["data_source"] == "agentbridge/math/calculator"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    task = decode_task(row["extra_info"][TASK_KEY], "verl")
    assert task.prompt == row["prompt"][1]["content"] and task.data["answer"] == row["reward_model"]["ground_truth"]
    assert row["extra_info"]["index"] == 0


def test_hydra_config_extends_ppo_trainer_with_the_mapped_settings(small_job: Job) -> None:
    config = yaml.safe_load((small_job.path / "agentbridge_job.yaml").read_text())
    assert config["hydra"]["searchpath"] == ["pkg://verl.trainer.config"]
    assert config["defaults"] == ["ppo_trainer", "_self_"]
    rollout = config["actor_rollout_ref"]["rollout"]
    assert rollout["n"] == 4 and rollout["agent"]["default_agent_loop"] == "agentbridge"
    assert config["data"]["train_batch_size"] == 2 and config["data"]["max_response_length"] == 256
    assert config["algorithm"]["adv_estimator"] == "grpo"  # grpo and dapo (the example's) both use it
    loops = yaml.safe_load((small_job.path / "agent_loop.yaml").read_text())
    assert loops == [{"name": "agentbridge", "_target_": "agentbridge_verl.rollout.AgentBridgeAgentLoop"}]


def test_epochs_never_end_the_run_before_its_steps(tmp_path: Path) -> None:
    """veRL stops at total_epochs (30 by default) or the steps, whichever comes first: 64 rows in batches of 32
    are 2 steps an epoch, so 200 steps need 100 epochs."""
    job = compile_job(tmp_path / "job", "data.train.size=64", "algorithm.batch_size=32", "algorithm.steps=200")
    trainer = yaml.safe_load((job.path / "agentbridge_job.yaml").read_text())["trainer"]
    assert trainer["total_training_steps"] == 200 and trainer["total_epochs"] * (64 // 32) >= 200


def test_launch_and_submit_scripts(tmp_path: Path) -> None:
    job = compile_job(tmp_path / "job", "resources.nodes=2", "resources.gpus_per_node=8")
    launch = (job.path / "launch.sh").read_text()
    assert "-m verl.trainer.main_ppo --config-path \"$JOB\" --config-name agentbridge_job" in launch
    assert '"reward.custom_reward_function.path=$ROOT/reward.py"' in launch
    assert '"actor_rollout_ref.rollout.agent.agent_loop_config_path=$ROOT/agent_loop.yaml"' in launch
    submit = (job.path / "submit.sh").read_text()
    assert "ray job submit" in submit and '--working-dir "$JOB"' in submit and "py_executable" in submit
    assert 'NNODES="${NNODES:-2}"' in submit and 'GPUS_PER_NODE="${GPUS_PER_NODE:-8}"' in submit
    assert 'trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$GPUS_PER_NODE"' in submit
    res = subprocess.run(["bash", "-n", str(job.path / "submit.sh")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_overrides_land_in_the_config_verbatim(tmp_path: Path) -> None:
    job = compile_job(tmp_path / "job", "backend.overrides.actor_rollout_ref.rollout.gpu_memory_utilization=0.8")
    config = yaml.safe_load((job.path / "agentbridge_job.yaml").read_text())
    assert config["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] == 0.8


def test_another_backends_options_and_overrides_are_not_applied(tmp_path: Path) -> None:
    sets = ["backend.name=trl", "backend.options.eval_size=4", "backend.overrides.trainer.nnodes=7"]
    assert VerlBackend().check(load_spec(EXAMPLE, [*SMALL, *sets])) == []
    job = compile_job(tmp_path / "job", *sets)
    assert job.manifest["notes"][0] == ("backend.options and backend.overrides are for backend trl (backend.name): "
                                        "not applied to the veRL job")
    config = yaml.safe_load((job.path / "agentbridge_job.yaml").read_text())
    assert config["trainer"]["nnodes"] == 1
    # the same options on a veRL spec are checked
    lines = [str(p) for p in VerlBackend().check(load_spec(EXAMPLE, [*SMALL, "backend.options.eval_size=4"]))]
    assert lines == [lines[0]] and lines[0].startswith("backend.options.eval_size: unknown veRL option")


def test_agent_workers_divide_a_steps_episodes(tmp_path: Path) -> None:
    """veRL's AgentLoopManager gives each worker an equal chunk of a step's episodes (else it asserts)."""
    job = compile_job(tmp_path / "job", "algorithm.batch_size=3", "algorithm.group_size=2")
    config = yaml.safe_load((job.path / "agentbridge_job.yaml").read_text())
    assert config["actor_rollout_ref"]["rollout"]["agent"]["num_workers"] == 6
    assert job.manifest["notes"][0] == ("backend.options.agent_workers: 6 agent-loop workers, not 8: veRL splits a "
                                        "step's 6 episodes into equal chunks, one per worker")
    assert [n for n in compile_job(tmp_path / "small").manifest["notes"] if "agent_workers" in n] == []


def test_check_reports_one_line_per_problem() -> None:
    spec = load_spec(EXAMPLE, [*SMALL, "algorithm.name=grpo", "algorithm.group_size=1", "backend.options.turbo=true",
                               "backend.options.rollout_engine=hf"])
    lines = [str(p) for p in VerlBackend().check(spec)]
    assert len(lines) == 3, lines
    assert any(line.startswith("backend.options.turbo: unknown veRL option") for line in lines)
    assert any(line.startswith("backend.options.rollout_engine: must be one of vllm, sglang, trtllm") for line in lines)
    assert any(line.startswith("algorithm.group_size: grpo computes advantages within a group") for line in lines)


def test_plugin_and_compile_import_no_verl_or_torch(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from agentbridge.plugins import get_plugins\n"
        "from agentbridge.spec import load_spec\n"
        "backend = get_plugins().backends.get('verl')\n"
        f"backend.compile(load_spec({EXAMPLE!r}, {SMALL!r}), Path({str(tmp_path / 'job')!r}))\n"
        "heavy = sorted(m for m in ('verl', 'torch', 'transformers', 'ray', 'hydra') if m in sys.modules)\n"
        "print(','.join(heavy) or 'light')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "light"


def test_launch_command_composes_in_main_ppo(small_job: Job) -> None:
    """launch.sh's exact command line, stopped by Hydra's --cfg job after veRL's main_ppo composed it."""
    res = subprocess.run(["bash", str(small_job.path / "launch.sh"), "--cfg", "job"], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHON": sys.executable, "AGENTBRIDGE_PHASES": "off"})
    assert res.returncode == 0, res.stderr[-2000:]
    cfg = yaml.safe_load(res.stdout)
    assert cfg["algorithm"]["adv_estimator"] == "grpo"
    assert cfg["data"]["train_files"] == f"{small_job.path}/data/train.parquet"
    assert cfg["actor_rollout_ref"]["rollout"]["agent"]["agent_loop_config_path"] == f"{small_job.path}/agent_loop.yaml"
    assert cfg["reward"]["custom_reward_function"]["path"] == f"{small_job.path}/reward.py"
    assert Path(cfg["actor_rollout_ref"]["model"]["path"], "config.json").is_file()
    # the run format's variables, for the runtime env main_ppo gives ray.init (its workers on a cluster see them)
    env_vars = cfg["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    run_dir = Path(env_vars["AGENTBRIDGE_RUN_DIR"])
    assert run_dir.is_absolute() and env_vars["VERL_FILE_LOGGER_PATH"] == f"{run_dir}/verl_metrics.jsonl"

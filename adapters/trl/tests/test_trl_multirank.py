"""A TRL job under ``accelerate launch`` with several CPU processes (gloo): the run directory is set up once, the
warm start runs on the main process only, RL and the held-out evaluations on every rank (a shard of the tasks each),
and each step's row covers the episodes of every rank.

accelerate 1.16 starts several CPU processes only through torchrun (``--multi_gpu``; ``--cpu`` alone runs one
process unless mpirun is used); the job's ``use_cpu`` makes every process join a gloo group.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from agentbridge.backends import compile_job, get_backend
from agentbridge.spec import load_spec

FAST = ["algorithm.group_size=4", "data.dev=null", "data.train.size=8", "agent.max_turns=1"]
# 2 ranks: a short warm start (its weights go to the other rank), 2 GRPO steps, the SFT-only control (2 steps)
TWO = [*FAST, "algorithm.steps=2", "algorithm.batch_size=2", "data.eval.size=2", "algorithm.warm_start.demos=16",
       "algorithm.warm_start.max_steps=2", "algorithm.warm_start.batch_size=8", "algorithm.warm_start.target=null",
       "algorithm.warm_start.control_steps=2"]
# 4 ranks racing on the run directory (each rank is a process importing torch, transformers and TRL: four race as
# eight do, at half the cost): one GRPO step of one prompt per rank, no warm start
RACING = [*FAST, "algorithm.steps=1", "algorithm.batch_size=1", "data.eval.size=1", "algorithm.warm_start=null"]

# the real entry, with the calls that write the run directory recorded with the rank that made them
SPY = '''
import json, os, sys
from pathlib import Path
import agentbridge.runs, agentbridge.training.experiment, agentbridge.training.logger
import agentbridge.training.sharded_eval

def spy(module, name):
    real = getattr(module, name)
    def wrapped(*args, **kwargs):
        call = {"rank": int(os.environ["RANK"]), "call": name}
        if name == "evaluate":  # a shard of the held-out evaluation: how many tasks
            call["tasks"] = len(args[2])
        with Path(os.environ["SPY_LOG"]).open("a") as f:
            f.write(json.dumps(call) + "\\n")
        return real(*args, **kwargs)
    setattr(module, name, wrapped)

spy(agentbridge.runs, "keep_earlier_run")
spy(agentbridge.training.experiment, "write_evals")
spy(agentbridge.training.logger, "append_jsonl")
spy(agentbridge.training.sharded_eval, "evaluate")
from agentbridge_trl.entry import main
sys.exit(main())
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(processes: int, script: list[str], job: Path, run: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``accelerate launch`` of ``script`` (``-m module`` or a file) over ``processes`` CPU processes."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(free_port()), *script, str(job), "--run-dir", str(run), "--quiet"]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", **env}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=full_env)


def compiled(sets: list[str], out: Path) -> Path:
    return compile_job(load_spec("examples/calculator.yaml", sets), get_backend("trl"), out).path


def earlier_run(run: Path) -> None:
    run.mkdir(parents=True)
    (run / "manifest.json").write_text('{"kind": "run", "earlier": true}\n')


def kept_copies(run: Path) -> list[Path]:
    return sorted(run.parent.glob(f"{run.name}@*"))


def episodes_by_step(run: Path) -> dict[int, list[dict[str, object]]]:
    out: dict[int, list[dict[str, object]]] = {}
    for line in (run / "episodes.jsonl").read_text().splitlines():
        row = json.loads(line)
        out.setdefault(row["step"], []).append(row)
    return out


def test_two_ranks_write_the_run_once_and_log_every_ranks_episodes(tmp_path: Path) -> None:
    job, run, log = compiled(TWO, tmp_path / "job"), tmp_path / "runs" / "calc", tmp_path / "spy.jsonl"
    earlier_run(run)
    (tmp_path / "spy.py").write_text(SPY)
    res = launch(2, [str(tmp_path / "spy.py")], job, run, SPY_LOG=str(log))
    assert res.returncode == 0, res.stderr[-3000:]

    calls = [json.loads(x) for x in log.read_text().splitlines()]
    # the held-out evaluations before the warm start, after it and after RL: a task on each rank (the rank's shard)
    # each time, the only calls the other rank made
    shards = [c for c in calls if c["call"] == "evaluate"]
    assert sorted((c["rank"], c["tasks"]) for c in shards) == [(0, 1)] * 3 + [(1, 1)] * 3
    calls = [c for c in calls if c["call"] != "evaluate"]
    assert {c["rank"] for c in calls} == {0}  # only the main process wrote to the run directory
    counts = Counter(c["call"] for c in calls)
    assert counts["keep_earlier_run"] == 1 and counts["write_evals"] >= 4 and counts["append_jsonl"] > 0

    [kept] = kept_copies(run)  # the earlier run is kept once, untouched
    assert json.loads((kept / "manifest.json").read_text()) == {"kind": "run", "earlier": True}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["kind"] == "run" and manifest["processes"] == 2

    per_rank = json.loads((job / "grpo_config.json").read_text())["per_device_train_batch_size"]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]  # one row a step, not one per rank
    episodes = episodes_by_step(run)
    assert sorted(episodes) == [1, 2]
    for row in rows:
        step = episodes[int(row["step"])]
        assert len(step) == 2 * per_rank  # both ranks' episodes
        assert len({e["task_id"] for e in step}) == 2 * per_rank // 4  # each rank's own prompts, 4 samples each
        assert row["reward/mean"] == pytest.approx(sum(float(e["reward"]) for e in step) / len(step))  # type: ignore[arg-type]

    evals = json.loads((run / "eval.json").read_text())
    assert set(evals) == {"before_training", "before_rl", "after_rl", "sft_control", "paired"}
    assert len((run / "eval_scores.jsonl").read_text().splitlines()) == 2
    assert (run / "warm_start.json").is_file() and (run / "model" / "config.json").is_file()
    assert not (run / "rl_start.pt").exists()  # the shared warm-start weights are removed once loaded


def test_four_ranks_racing_on_the_run_directory(tmp_path: Path) -> None:
    job, run = compiled(RACING, tmp_path / "job"), tmp_path / "runs" / "calc"
    earlier_run(run)
    res = launch(4, ["-m", "agentbridge_trl.entry"], job, run)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Error" not in res.stderr, res.stderr[-3000:]
    [kept] = kept_copies(run)
    assert json.loads((kept / "manifest.json").read_text()) == {"kind": "run", "earlier": True}
    assert json.loads((run / "manifest.json").read_text())["processes"] == 4
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1]
    assert len(episodes_by_step(run)[1]) == 4 * 4
    assert set(json.loads((run / "eval.json").read_text())) == {"before_training", "before_rl", "after_rl", "paired"}


def test_check_refuses_vllm_server_mode_with_several_training_processes() -> None:
    backend = get_backend("trl")
    server = "backend.options={use_vllm: true, vllm_mode: server}"

    def problems(*sets: str) -> list[str]:
        spec = load_spec("examples/calculator.yaml", ["backend.name=trl", *sets])
        return [str(p) for p in backend.check(spec) if p.where == "backend.options.vllm_mode"]

    assert problems(server, "resources.gpus_per_node=2") == []  # one GPU trains, one serves
    [line] = problems(server, "resources.gpus_per_node=8")
    assert "server mode works with one training process, not 7" in line and "colocate" in line
    external = "backend.options={use_vllm: true, vllm_mode: server, vllm_server_base_url: 'http://h:8000'}"
    assert len(problems(external, "resources.gpus_per_node=2")) == 1  # both GPUs train
    assert problems("backend.options={use_vllm: true, vllm_mode: colocate}", "resources.gpus_per_node=8") == []


def test_submit_needs_the_main_process_ip_on_several_nodes(tmp_path: Path) -> None:
    job = compiled(["algorithm.steps=1"], tmp_path / "job")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "accelerate").write_text('#!/usr/bin/env bash\necho "accelerate $*"\n')
    (bin_dir / "accelerate").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAIN_PROCESS_IP", "NUM_MACHINES", "RUN_DIR")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"

    def submit(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(job / "submit.sh")], capture_output=True, text=True, timeout=60,
                              env={**env, **extra})

    res = submit(NUM_MACHINES="2")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: MAIN_PROCESS_IP: set it to node 0's address on every node of this 2-node job"]
    res = submit(NUM_MACHINES="2", MAIN_PROCESS_IP="10.0.0.1", RUN_DIR="/shared/runs/calc")
    assert res.returncode == 0 and "--main_process_ip 10.0.0.1" in res.stdout
    assert '--run-dir /shared/runs/calc' in res.stdout
    res = submit()  # one node: the local address, the run directory under the working directory
    assert res.returncode == 0 and "--main_process_ip 127.0.0.1" in res.stdout


def test_submit_needs_an_absolute_run_dir_on_several_nodes(tmp_path: Path) -> None:
    """Ranks on every node write checkpoints (each its ZeRO shards) into RUN_DIR: a relative or unset one would
    be each node's own directory, so a job over several nodes refuses it."""
    job = compiled(["algorithm.steps=1"], tmp_path / "job")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "accelerate").write_text('#!/usr/bin/env bash\necho "accelerate $*"\n')
    (bin_dir / "accelerate").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAIN_PROCESS_IP", "NUM_MACHINES", "RUN_DIR")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"

    def submit(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(job / "submit.sh")], capture_output=True, text=True, timeout=60,
                              env={**env, "NUM_MACHINES": "2", "MAIN_PROCESS_IP": "10.0.0.1", **extra})

    for run_dir in (None, "runs/calc"):
        res = submit(**({"RUN_DIR": run_dir} if run_dir else {}))
        assert res.returncode == 2 and res.stdout == ""
        assert res.stderr.strip().splitlines() == [
            "error: RUN_DIR: set it to an absolute directory on storage every node of this 2-node job shares "
            f"(now: '{run_dir or ''}')"]
    res = submit(RUN_DIR="/shared/runs/calc")
    assert res.returncode == 0 and "--run-dir /shared/runs/calc" in res.stdout
    res = subprocess.run(["bash", str(job / "submit.sh")], capture_output=True, text=True, timeout=60,
                         env={**env, "RUN_DIR": "runs/calc"})  # one node: a relative run directory is fine
    assert res.returncode == 0 and "--run-dir runs/calc" in res.stdout

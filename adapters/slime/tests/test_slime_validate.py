"""validate: slime's own argument parsing and ``slime_validate_args`` on compiled jobs (needs slime: a checkout on
PYTHONPATH)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from slime_testkit import ROOT, compile_job, needs_slime

from agentbridge.backends import Job
from agentbridge_slime.backend import SlimeBackend

pytestmark = needs_slime


def test_a_compiled_job_passes_slimes_validator(small_job: Job) -> None:
    report = SlimeBackend().validate(small_job)
    assert report.ok, report.problems
    skipped = report.details.get("skipped", [])
    assert any("megatron_validate_args" in s for s in skipped) and any("THUDM/slime@624b824" in s for s in skipped)


@pytest.mark.parametrize("algo", ["grpo", "dr_grpo", "gspo", "reinforce_pp", "ppo"])
def test_every_algorithm_passes_and_slime_reads_it(tmp_path: Path, algo: str) -> None:
    from agentbridge.models import resolve_model_path
    from agentbridge_slime.validate import parse_job

    job = compile_job(tmp_path / "job", f"algorithm.name={algo}", "algorithm.kl_coef=0.05")
    assert SlimeBackend().validate(job).ok
    args = parse_job(job.path.resolve(), str(resolve_model_path("builtin:tiny")))
    estimator = {"reinforce_pp": "reinforce_plus_plus", "dr_grpo": "grpo"}.get(algo, algo)
    assert args.advantage_estimator == estimator and args.agentbridge_spec == "spec.yaml"
    assert args.use_critic == (algo == "ppo") and args.grpo_std_normalization == (algo != "dr_grpo")
    assert (args.kl_coef, args.use_kl_loss) == ((0.05, False) if algo in ("reinforce_pp", "ppo") else (0.0, True))
    assert args.rollout_max_context_len == args.rollout_max_prompt_len + args.rollout_max_response_len


@pytest.mark.parametrize(("sets", "start", "contains"), [
    (["backend.overrides={advantage-estimator: rloo}"], "slime_job.yaml: slime's argument parser rejects it: ",
     "invalid choice: 'rloo'"),
    (["algorithm.name=reinforce_pp", "backend.overrides={normalize-advantages: false}"],
     "slime_job.yaml: slime's slime_validate_args rejects it: ", "require advantage normalization"),
    (["backend.overrides={rollout-max-prompt-len: 900}"], "slime_job.yaml: slime's slime_validate_args rejects it: ",
     "must be smaller than args.rollout_max_context_len"),
    (["backend.overrides={rollout-temperature: 0}"], "slime_job.yaml: slime's slime_validate_args rejects it: ",
     "--rollout-temperature must be > 0"),
])
def test_slime_rejects_what_its_validators_reject(tmp_path: Path, sets: list[str], start: str, contains: str) -> None:
    (line,) = [str(p) for p in SlimeBackend().validate(compile_job(tmp_path / "job", *sets)).problems]
    assert line.startswith(start) and contains in line and "\n" not in line


def test_the_generate_function_must_find_the_spec(tmp_path: Path) -> None:
    job = compile_job(tmp_path / "job")
    (job.path / "agentbridge.yaml").write_text("agentbridge_spec: elsewhere.yaml\n")
    (line,) = [str(p) for p in SlimeBackend().validate(job).problems]
    assert line.startswith("agentbridge.yaml: slime's args point the generate function at") and "elsewhere" in line


def test_the_validator_runs_as_a_command_with_the_json_protocol(small_job: Job) -> None:
    out = subprocess.run([sys.executable, "-m", "agentbridge_slime.validate", str(small_job.path), "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    verdict = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and verdict["problems"] == [] and verdict["skipped"]


@pytest.mark.parametrize(("algo", "advantage", "aggregation", "clip"), [
    ("grpo", "r - group mean, / group std", "seq-mean-token-mean", "(0.2, 0.2) on token ratios"),
    ("dr_grpo", "r - group mean, no std", "seq-mean-token-sum-norm", "(0.2, 0.2) on token ratios"),
    ("dapo", "r - group mean, / group std", "token-mean", "(0.2, 0.28) on token ratios"),
    ("gspo", "r - group mean, / group std", "seq-mean-token-mean", "(0.0003, 0.0004) on sequence ratios"),
])
def test_semantics_read_from_slimes_args(tmp_path: Path, algo: str, advantage: str, aggregation: str,
                                         clip: str) -> None:
    """What the job will do, for `agentbridge compare`'s table, in the words the other backends use."""
    from agentbridge.compare.semantics import shared

    report = SlimeBackend().validate(compile_job(tmp_path / "job", f"algorithm.name={algo}"))
    semantics = report.details["semantics"]
    assert (shared(semantics["advantage"]), shared(semantics["loss aggregation"])) == (advantage, aggregation)
    assert shared(semantics["clip"]) == clip and semantics["KL"] == "none"
    assert shared(semantics["group filtering"]) == ("groups with equal rewards dropped" if algo == "dapo" else "none")


def test_slime_loads_the_model_saves_and_resumes(tmp_path: Path) -> None:
    """slime's own slime_validate_args on the job's --load / --ref-load / --save flags: a fresh run loads the model
    (HF weights, no optimizer state), a relaunch the save directory's Megatron checkpoint (optimizer and all)."""
    from agentbridge.models import resolve_model_path
    from agentbridge_slime.validate import parse_job

    model, run = str(resolve_model_path("builtin:tiny")), tmp_path / "run"
    job = compile_job(tmp_path / "job", "algorithm.kl_coef=0.05")
    fresh = parse_job(job.path.resolve(), model, str(run))
    assert (fresh.load, fresh.ref_load, fresh.save) == (model, model, f"{run}/checkpoints")
    assert fresh.save_interval == 50 and fresh.save_hf == f"{run}/hf/rollout_{{rollout_id}}"
    assert fresh.no_load_optim and fresh.finetune and fresh.start_rollout_id == 0
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("9")
    resumed = parse_job(job.path.resolve(), model, str(run))
    assert resumed.load == f"{run}/checkpoints" and not resumed.no_load_optim and resumed.start_rollout_id is None

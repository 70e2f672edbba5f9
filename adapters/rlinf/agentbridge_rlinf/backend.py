"""The RLinf backend: capabilities, spec checks, compile to a job directory, validate, launch, conformance."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from agentbridge import adapter_kit as kit
from agentbridge.backends import Capabilities, Job, Problem, Report, backend_python
from agentbridge.spec import Spec, dump_spec
from agentbridge_rlinf import RLINF_PIN, __version__
from agentbridge_rlinf.config import (
    ALGORITHMS,
    CONFIG_NAME,
    ENTRY_FILE,
    ENV_CONFLICT,
    GROUPED,
    NOTES,
    OPTIONS,
    ROLLOUT_BACKENDS,
    TRAINING_BACKENDS,
    WHY_NOT,
    gpus_per_node,
    job_config,
    option_problems,
    options,
    path_overrides,
)
from agentbridge_rlinf.data import write_jsonl

ENTRY = '''"""RLinf entry of this job: RLinf's worker groups with agentbridge's agent-loop worker (no config key of
RLinf selects the agent-loop class, so the job ships its own Hydra main)."""

from agentbridge_rlinf.entry import main

if __name__ == "__main__":
    main()
'''


class RlinfBackend:
    """Compiles a spec into an RLinf 0.3.0 reasoning job whose agent-loop worker runs agentbridge's driver."""

    name = "rlinf"
    module = "rlinf"  # what must import for this backend to run here
    algorithm_probe = "agentbridge_rlinf.algorithm_probe"  # the training-math conformance
    # what the rollout conformance records of RLinf's default job do not hold (None), and why; any other None fails
    rollout_not_held = {"token_rewards": "RLinf's actor batch keeps one reward per sequence, no per-token rewards"}

    def capabilities(self) -> Capabilities:
        return Capabilities(
            algorithms=sorted(ALGORITHMS), multimodal=False, tool_images=False, max_turns=None, async_rollout=True,
            turn_credit=False,
            scale_out="Ray cluster: ray job submit (cluster.num_nodes x GPUs), SGLang rollout workers",
            notes=[*NOTES, f"training needs GPUs (RLinf {RLINF_PIN}: FSDP or Megatron actors, SGLang); the agent "
                   "loop and validation run on CPU",
                   "images: not wired (RLinf's agent loop passes no images to its engine)"])

    def check(self, spec: Spec) -> list[Problem]:
        """What in ``spec`` RLinf cannot run, one line each (needs no RLinf installed)."""
        problems = [*kit.algorithm_check(self, spec, WHY_NOT), *kit.unknown_options(self, spec, OPTIONS, "RLinf"),
                    *option_problems(spec)]
        problems += kit.recipe_problems(spec, self.name)
        opts = options(spec)
        if opts["rollout_backend"] not in ROLLOUT_BACKENDS:
            problems.append(Problem("backend.options.rollout_backend",
                                    f"must be one of {', '.join(ROLLOUT_BACKENDS)}, got {opts['rollout_backend']!r} "
                                    f"(RLinf {RLINF_PIN}'s agent loop reaches only SGLang over its channels)"))
        if opts["training_backend"] not in TRAINING_BACKENDS:
            problems.append(Problem("backend.options.training_backend",
                                    f"must be one of {', '.join(TRAINING_BACKENDS)}, got {opts['training_backend']!r}"))
        if spec.algorithm.name in GROUPED and spec.algorithm.group_size < 2:
            problems.append(Problem("algorithm.group_size", f"{spec.algorithm.name} computes advantages within a "
                                    "group: it needs at least 2 samples per prompt"))
        return problems

    def compile(self, spec: Spec, out: Path) -> Job:
        """Write the job's files (spec, JSON-lines data, Hydra config, entry, scripts); the Job's manifest is
        filled."""
        from agentbridge.plugins import get_plugins
        from agentbridge.rollout.agent import load_tasks

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        train, evals = load_tasks(spec, "train"), load_tasks(spec, "eval")
        write_jsonl(out / "data" / "train.jsonl", train, spec)
        if evals:
            write_jsonl(out / "data" / "eval.jsonl", evals, spec)
        (out / "spec.yaml").write_text(dump_spec(spec))
        config = job_config(spec)
        get_plugins().hook.modify_backend_config(spec=spec, backend=self.name, config=config)
        header = f"# RLinf {RLINF_PIN} reasoning-task config for this job; paths come from launch.sh\n"
        (out / f"{CONFIG_NAME}.yaml").write_text(header + yaml.safe_dump(config, sort_keys=False))
        (out / ENTRY_FILE).write_text(ENTRY)
        notes = [n for n in (kit.foreign_note(self, spec, "RLinf"), *compile_notes(spec)) if n]
        kit.write_script(out / "launch.sh", _launch_lines(spec, has_eval=bool(evals)), notes)
        kit.write_script(out / "submit.sh", _submit_lines(spec))
        return kit.new_job(self, spec, out, version=__version__, pin=RLINF_PIN,
                           tasks={"train": len(train), "eval": len(evals)},
                           gpus={"num_nodes": spec.resources.nodes, "gpus_per_node": gpus_per_node(spec)},
                           notes=notes)

    def validate(self, job: Job) -> Report:
        """RLinf's own checks on the job (``validate_reasoning_cfg``), in the RLinf environment."""
        return kit.run_validator(job, self, "agentbridge_rlinf.validate")

    def launch(self, job: Job, runner: Any = None, run_dir: Path | None = None,
               extra_args: list[str] | None = None) -> Path:
        """Run ``launch.sh`` (RLinf's workers on this machine's Ray; it needs GPUs); returns the run directory."""
        return kit.launch_job(job, runner, run_dir, self, label="RLinf", extra_args=extra_args or ())

    def conformance(self, kind: str, workdir: Path) -> list[Any]:
        """The golden episodes of ``kind`` through RLinf's own agent-loop worker, read back from its actor batch."""
        from agentbridge_rlinf.conformance import golden_records

        return golden_records(kind, workdir)


def compile_notes(spec: Spec) -> list[str]:
    """What the RLinf job does differently from the spec (kept in the manifest and at the top of launch.sh)."""
    notes = [ENV_CONFLICT]
    if spec.algorithm.name == "dapo":
        notes.append("algorithm.name dapo: RLinf's grpo advantage with clip 0.2/0.28 and token-mean; dynamic "
                     "sampling and overlong shaping are not switched on")
    if spec.algorithm.warm_start is not None or spec.data.eval is not None:
        notes.append("algorithm.warm_start / data.eval: the RLinf job runs RLinf's trainer alone; agentbridge's "
                     "warm start and held-out evaluation are not run around it")
    if spec.algorithm.credit == "turn":
        notes.append("algorithm.credit: turn: RLinf trains on one reward per episode (RolloutResult.rewards), so "
                     "each episode's per-turn rewards are summed into it")
    if spec.resources.gpus_per_node == 0:
        notes.append("resources.gpus_per_node is 0, but RLinf's actor and SGLang need GPUs: compiled for 1 GPU per "
                     "node")
    return notes


def rlinf_python() -> str:
    """The RLinf environment's interpreter (see ``agentbridge.backends.backend_python``), else this one."""
    return backend_python("rlinf", "rlinf") or sys.executable


def _launch_lines(spec: Spec, *, has_eval: bool) -> list[str]:
    paths = " \\\n  ".join(f'"{o}"' for o in path_overrides("$ROOT", "$MODEL", has_eval=has_eval))
    return [
        "# Run RLinf's reasoning trainer with agentbridge's agent-loop worker on this machine (it needs GPUs).",
        "# ROOT: where the job's files are read from (. under a Ray job's working_dir, see submit.sh).",
        kit.default_line("PYTHON", rlinf_python()),
        'ROOT="${ROOT:-$JOB}"',
        kit.model_line("MODEL", spec.model.path),
        kit.default_line("RUN_DIR", f"runs/{spec.name}"),
        'mkdir -p "$RUN_DIR" && RUN_DIR="$(cd "$RUN_DIR" && pwd)"',
        'export AGENTBRIDGE_RUN_DIR="$RUN_DIR"',
        f"\"$PYTHON\" \"$ROOT/{ENTRY_FILE}\" --config-path \"$(cd \"$ROOT\" && pwd)\" --config-name {CONFIG_NAME} \\",
        f"  {paths} \\",
        '  runner.output_dir="$RUN_DIR" "$@"',
    ]


def _submit_lines(spec: Spec) -> list[str]:
    nodes, gpus = spec.resources.nodes, gpus_per_node(spec)
    return [
        "# Submit to a running Ray cluster (ray start --head; ray start --address=... on the other nodes).",
        "# The job directory is the Ray working_dir, so every node reads data, spec and config from its own copy.",
        f"# PYTHON is the RLinf environment (rlinf=={RLINF_PIN}, agentbridge, agentbridge-rlinf and the spec's "
        "plugins)",
        "# at the same path on every node: RLinf's workers import agentbridge's agent loop there.",
        kit.default_line("PYTHON", rlinf_python()),
        "# RUN_DIR: checkpoints and logs, written by ranks on every node: an absolute path on storage all nodes share",
        "case \"${RUN_DIR:-}\" in /*) ;; *) echo \"submit.sh: set RUN_DIR to an absolute directory on storage every "
        "node shares (now: '${RUN_DIR:-}')\" >&2; exit 2 ;; esac",
        "RAY_ADDRESS=\"${RAY_ADDRESS:-http://127.0.0.1:8265}\"",
        f"NNODES=\"${{NNODES:-{nodes}}}\"",
        f"# {gpus} GPU(s) per node: RLinf places actor and rollout on all of them (cluster.component_placement)",
        "exec ray job submit --address \"$RAY_ADDRESS\" --working-dir \"$JOB\" \\",
        "  -- env ROOT=. PYTHON=\"$PYTHON\" RUN_DIR=\"$RUN_DIR\" bash launch.sh cluster.num_nodes=\"$NNODES\" \"$@\"",
    ]

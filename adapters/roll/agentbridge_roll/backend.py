"""The ROLL backend: capabilities, spec checks, compile to a job directory, validate, launch, conformance."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import yaml

from agentbridge import adapter_kit as kit
from agentbridge.backends import Capabilities, Job, Problem, Report, backend_python
from agentbridge.spec import Spec, dump_spec
from agentbridge_roll import ROLL_COMMIT, ROLL_REPO, ROLL_SOURCE, __version__, keep_roll_logs_out_of_cwd
from agentbridge_roll.config import (
    ALGORITHMS,
    CONFIG_NAME,
    ENTRY_FILE,
    GROUPED,
    NOTES,
    OPTIONS,
    WHY_NOT,
    gpus_per_node,
    job_config,
    option_problems,
    path_overrides,
)
from agentbridge_roll.data import write_jsonl

ENTRY = '''"""ROLL entry of this job: ROLL's agentic pipeline, composed from this directory's config (the job's env
manager is agentbridge's, named in custom_envs)."""

from agentbridge_roll.entry import main

if __name__ == "__main__":
    main()
'''
# how this adapter was verified: ROLL is source only, so CI here cannot run its code
VERIFIED = (f"against ROLL's own code at {ROLL_SOURCE} (source only, not on the package index): config, env "
            "manager and rollout queue on CPU; see adapters/roll/README.md")
# Capabilities.verified_upstream (an agentbridge without the field is told in the notes only)
UPSTREAM: dict[str, Any] = ({"verified_upstream": f"{ROLL_REPO}@{ROLL_COMMIT}"}
            if "verified_upstream" in {f.name for f in dataclasses.fields(Capabilities)} else {})


class RollBackend:
    """Compiles a spec into a ROLL agentic-pipeline job whose env manager runs agentbridge's driver."""

    name = "roll"
    module = "roll"  # what must import for this backend to run here (a ROLL checkout on PYTHONPATH)
    algorithm_probe = "agentbridge_roll.algorithm_probe"  # the training-math conformance

    def capabilities(self) -> Capabilities:
        return Capabilities(
            algorithms=sorted(ALGORITHMS), multimodal=False, tool_images=False, max_turns=None, async_rollout=True,
            turn_credit=False,
            scale_out="Ray cluster: ray job submit (ROLL's workers on device_mapping GPUs; env managers in threads)",
            notes=[*NOTES, f"verified {VERIFIED}",
                   "training needs GPUs (ROLL: Megatron or FSDP2 actor, vLLM or SGLang); the env manager, rollout "
                   "queue and validation run on CPU",
                   "images: not wired (agentbridge's ROLL env manager is text only)"], **UPSTREAM)

    def check(self, spec: Spec) -> list[Problem]:
        """What in ``spec`` ROLL cannot run, one line each (needs no ROLL installed)."""
        problems = [*kit.algorithm_check(self, spec, WHY_NOT), *kit.unknown_options(self, spec, OPTIONS, "ROLL"),
                    *option_problems(spec)]
        problems += kit.recipe_problems(spec, self.name)
        if spec.algorithm.name in GROUPED and spec.algorithm.group_size < 2:
            problems.append(Problem("algorithm.group_size", f"{spec.algorithm.name} computes advantages within a "
                                    "group: it needs at least 2 samples per prompt"))
        return problems

    def compile(self, spec: Spec, out: Path) -> Job:
        """Write the job's files (spec, task lines, Hydra config, entry, scripts); the Job's manifest is filled."""
        from agentbridge.plugins import get_plugins
        from agentbridge.rollout.agent import load_tasks

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        train, evals = load_tasks(spec, "train"), load_tasks(spec, "eval")
        write_jsonl(out / "data" / "train.jsonl", train)
        if evals:
            write_jsonl(out / "data" / "eval.jsonl", evals)
        (out / "spec.yaml").write_text(dump_spec(spec))
        config = job_config(spec, has_eval=bool(evals))
        get_plugins().hook.modify_backend_config(spec=spec, backend=self.name, config=config)
        header = f"# ROLL agentic-pipeline config for this job ({ROLL_SOURCE}); paths come from launch.sh\n"
        (out / f"{CONFIG_NAME}.yaml").write_text(header + yaml.safe_dump(config, sort_keys=False))
        (out / ENTRY_FILE).write_text(ENTRY)
        notes = [n for n in (kit.foreign_note(self, spec, "ROLL"), *compile_notes(spec)) if n]
        kit.write_script(out / "launch.sh", _launch_lines(spec, has_eval=bool(evals)), notes)
        kit.write_script(out / "submit.sh", _submit_lines(spec))
        return kit.new_job(self, spec, out, version=__version__, pin=ROLL_COMMIT,
                           tasks={"train": len(train), "eval": len(evals)},
                           gpus={"num_nodes": spec.resources.nodes, "gpus_per_node": gpus_per_node(spec)},
                           roll_source=ROLL_SOURCE, notes=notes)

    def validate(self, job: Job) -> Report:
        """ROLL's own checks on the job (``AgenticConfig`` built by ``dacite.from_dict``), in the ROLL environment."""
        return kit.run_validator(job, self, "agentbridge_roll.validate")

    def launch(self, job: Job, runner: Any = None, run_dir: Path | None = None,
               extra_args: list[str] | None = None) -> Path:
        """Run ``launch.sh`` (ROLL's pipeline on this machine's Ray; it needs GPUs); returns the run directory."""
        return kit.launch_job(job, runner, run_dir, self, label="ROLL", extra_args=extra_args or ())

    def conformance(self, kind: str, workdir: Path) -> list[Any]:
        """The golden episodes of ``kind`` through ROLL's own env-manager path, read back from its rollout batch."""
        keep_roll_logs_out_of_cwd()
        from agentbridge_roll.conformance import golden_records

        return golden_records(kind, workdir)


def compile_notes(spec: Spec) -> list[str]:
    """What the ROLL job does differently from the spec (kept in the manifest and at the top of launch.sh)."""
    notes = [f"ROLL is not on the package index: the job runs in an environment built from a ROLL checkout "
             f"(verified against {ROLL_SOURCE}); set ROLL_HOME to that checkout"]
    if spec.algorithm.name == "dapo":
        notes.append("algorithm.name dapo: clip 0.2/0.28 and token-mean; dynamic sampling by agentbridge's group "
                     "filter (groups whose episodes all score the same are resampled); no overlong shaping")
    if spec.algorithm.name == "dr_grpo":
        notes.append("algorithm.name dr_grpo: ROLL divides the summed token losses by the padded sequence width "
                     "(sequence_length - 1), a constant, not by max_response_tokens")
    if spec.algorithm.warm_start is not None or spec.data.eval is not None:
        notes.append("algorithm.warm_start / data.eval: the ROLL job runs ROLL's trainer alone; agentbridge's "
                     "warm start and held-out evaluation are not run around it")
    if spec.algorithm.credit == "turn":
        notes.append("algorithm.credit: turn: ROLL's agentic pipeline sums each trajectory's scores into one "
                     "reward, so each episode's per-turn rewards are summed into it")
    if spec.resources.gpus_per_node == 0:
        notes.append("resources.gpus_per_node is 0, but ROLL's actor and engine need GPUs: compiled for 1 GPU per "
                     "node")
    return notes


def roll_python() -> str:
    """The ROLL environment's interpreter (see ``agentbridge.backends.backend_python``), else this one."""
    return backend_python("roll", "roll") or sys.executable


def _launch_lines(spec: Spec, *, has_eval: bool) -> list[str]:
    paths = " \\\n  ".join(f'"{o}"' for o in path_overrides("$ROOT", "$MODEL", has_eval=has_eval))
    return [
        "# Run ROLL's agentic pipeline with agentbridge's env manager on this machine (it needs GPUs).",
        "# ROOT: where the job's files are read from (. under a Ray job's working_dir, see submit.sh).",
        "# ROLL_HOME: a checkout of ROLL (source only); put on PYTHONPATH when set.",
        kit.default_line("PYTHON", roll_python()),
        'ROOT="$(cd "${ROOT:-$JOB}" && pwd)"',
        'if [ -n "${ROLL_HOME:-}" ]; then export PYTHONPATH="$ROLL_HOME${PYTHONPATH:+:$PYTHONPATH}"; fi',
        kit.model_line("MODEL", spec.model.path),
        kit.default_line("RUN_DIR", f"runs/{spec.name}"),
        'mkdir -p "$RUN_DIR" && RUN_DIR="$(cd "$RUN_DIR" && pwd)"',
        'export AGENTBRIDGE_RUN_DIR="$RUN_DIR" ROLL_LOG_DIR="${ROLL_LOG_DIR:-$RUN_DIR/logs}"',
        f"\"$PYTHON\" \"$ROOT/{ENTRY_FILE}\" --config-path \"$ROOT\" --config-name {CONFIG_NAME} \\",
        f"  {paths} \\",
        '  output_dir="$RUN_DIR" "$@"',
    ]


def _submit_lines(spec: Spec) -> list[str]:
    nodes, gpus = spec.resources.nodes, gpus_per_node(spec)
    return [
        "# Submit to a running Ray cluster (ray start --head; ray start --address=... on the other nodes).",
        "# The job directory is the Ray working_dir, so every node reads data, spec and config from its own copy.",
        f"# PYTHON is the ROLL environment (a ROLL checkout at {ROLL_SOURCE} with its requirements, agentbridge, "
        "agentbridge-roll and the spec's plugins)",
        "# at the same path on every node, and ROLL_HOME the ROLL checkout there: ROLL's env workers import "
        "agentbridge's env manager.",
        kit.default_line("PYTHON", roll_python()),
        "# RUN_DIR: checkpoints and logs, written by ranks on every node: an absolute path on storage all nodes share",
        "case \"${RUN_DIR:-}\" in /*) ;; *) echo \"submit.sh: set RUN_DIR to an absolute directory on storage every "
        "node shares (now: '${RUN_DIR:-}')\" >&2; exit 2 ;; esac",
        "RAY_ADDRESS=\"${RAY_ADDRESS:-http://127.0.0.1:8265}\"",
        f"# {nodes} node(s) x {gpus} GPU(s): device_mapping spans all of them (num_gpus_per_node={gpus})",
        "exec ray job submit --address \"$RAY_ADDRESS\" --working-dir \"$JOB\" \\",
        "  -- env ROOT=. PYTHON=\"$PYTHON\" RUN_DIR=\"$RUN_DIR\" ROLL_HOME=\"${ROLL_HOME:-}\" bash launch.sh \"$@\"",
    ]

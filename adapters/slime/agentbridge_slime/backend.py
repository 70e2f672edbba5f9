"""The slime backend: capabilities, spec checks, compile to a job directory, validate, launch, conformance."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from agentbridge import adapter_kit as kit
from agentbridge.backends import Capabilities, Job, Problem, Report, backend_python
from agentbridge.spec import Spec, dump_spec
from agentbridge_slime import SLIME_COMMIT, SLIME_PIN, SLIME_REPO, __version__
from agentbridge_slime.config import (
    ALGORITHMS,
    CONFIG_NAME,
    CUSTOM_CONFIG,
    GROUPED,
    NOTES,
    OPTIONS,
    WHY_NOT,
    gpus_per_node,
    job_config,
    option_problems,
    options,
)
from agentbridge_slime.data import write_jsonl


class SlimeBackend:
    """Compiles a spec into a slime job (``train.py``'s flags) whose generate function is agentbridge's driver."""

    name = "slime"
    module = "slime"  # what must import for this backend to run here (a checkout on PYTHONPATH: not on PyPI)
    # what the rollout conformance records of slime's default job do not hold (None), and why; any other None fails
    rollout_not_held = {"token_rewards": "slime's training data keeps one reward per sample, no per-token rewards"}

    def capabilities(self) -> Capabilities:
        return Capabilities(
            algorithms=sorted(ALGORITHMS), multimodal=False, tool_images=False, max_turns=None, async_rollout=True,
            turn_credit=False, scale_out="Ray cluster: ray job submit (Megatron actors, SGLang engines behind "
                                         "slime's router)",
            verified_upstream=f"{SLIME_REPO}@{SLIME_COMMIT}",
            notes=[*NOTES, "training needs GPUs and Megatron-LM; the generate function, rollout path and "
                   "validation run on CPU", "images: not wired (the generate function sends SGLang token ids only)",
                   f"not on the package index: verified against {SLIME_PIN} (adapters/slime/README.md)"])

    def check(self, spec: Spec) -> list[Problem]:
        """What in ``spec`` slime cannot run, one line each (needs no slime installed)."""
        problems = [*kit.algorithm_check(self, spec, WHY_NOT), *kit.unknown_options(self, spec, OPTIONS, "slime"),
                    *option_problems(spec)]
        problems += kit.recipe_problems(spec, self.name)
        if spec.algorithm.name in GROUPED and spec.algorithm.group_size < 2:
            problems.append(Problem("algorithm.group_size", f"{spec.algorithm.name} computes advantages within a "
                                    "group: it needs at least 2 samples per prompt"))
        if spec.agent.sampling.top_p != 1.0:
            problems.append(Problem("agent.sampling.top_p", "must be 1.0 on slime: below 1 slime trains on the "
                                    "engine's top-p nucleus ids (rollout_top_p_token_ids), which agentbridge's driver "
                                    "does not keep"))
        if spec.agent.sampling.temperature <= 0:
            problems.append(Problem("agent.sampling.temperature", "must be > 0 on slime (its --rollout-temperature "
                                    "check: greedy decoding is no RL policy)"))
        return problems

    def compile(self, spec: Spec, out: Path) -> Job:
        """Write the job's files (spec, JSON-lines data, flags, slime's custom config, scripts); the Job's manifest
        is filled."""
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
        header = (f"# slime ({SLIME_PIN}) train.py flags of this job, without '--'; true: a bare switch. launch.sh "
                  "passes them\n# (python -m agentbridge_slime.args); ${ROOT}, ${MODEL}, ${RUN_DIR}, ${LOAD} and "
                  "${REF_LOAD} are filled in there.\n")
        (out / CONFIG_NAME).write_text(header + yaml.safe_dump(config, sort_keys=False))
        (out / CUSTOM_CONFIG).write_text("# slime's --custom-config-path: slime sets these keys on its args; the "
                                         "generate function reads the spec from here\nagentbridge_spec: spec.yaml\n")
        notes = [n for n in (kit.foreign_note(self, spec, "slime"), *compile_notes(spec)) if n]
        kit.write_script(out / "launch.sh", _launch_lines(spec), notes)
        kit.write_script(out / "submit.sh", _submit_lines(spec))
        return kit.new_job(self, spec, out, version=__version__,
                           tasks={"train": len(train), "eval": len(evals)},
                           gpus={"num_nodes": spec.resources.nodes, "gpus_per_node": gpus_per_node(spec)},
                           upstream=f"{SLIME_REPO}@{SLIME_COMMIT}", notes=notes)

    def validate(self, job: Job) -> Report:
        """slime's own argument parsing and ``slime_validate_args`` on the job, where slime imports (here, or the
        interpreter ``AGENTBRIDGE_SLIME_PYTHON`` names, with a slime checkout on its ``PYTHONPATH``)."""
        if backend_python(self.name, self.module) is None:
            return Report(ok=False, problems=[Problem(self.name, (
                f"slime does not import here and no slime environment was found; slime is not on the package "
                f"index: set AGENTBRIDGE_SLIME_PYTHON to a python with agentbridge-slime[cpu] and a checkout of "
                f"{SLIME_PIN} on PYTHONPATH (adapters/slime/README.md)"))])
        return kit.run_validator(job, self, "agentbridge_slime.validate")

    def launch(self, job: Job, runner: Any = None, run_dir: Path | None = None,
               extra_args: list[str] | None = None) -> Path:
        """Run ``launch.sh`` (slime's train.py on this machine's Ray; it needs GPUs); returns the run directory."""
        return kit.launch_job(job, runner, run_dir, self, label="slime", extra_args=extra_args or ())

    def conformance(self, kind: str, workdir: Path) -> list[Any]:
        """The golden episodes of ``kind`` through slime's own rollout path, read back from its training data."""
        from agentbridge_slime.conformance import golden_records

        return golden_records(kind, workdir)


def compile_notes(spec: Spec) -> list[str]:
    """What the slime job does differently from the spec (kept in the manifest and at the top of launch.sh)."""
    notes = []
    if spec.algorithm.name == "dapo":
        notes.append("algorithm.name dapo: clip 0.2/0.28, token-level loss and slime's dynamic-sampling filter; no "
                     "overlong shaping")
    if spec.algorithm.warm_start is not None or spec.data.eval is not None:
        notes.append("algorithm.warm_start / data.eval: the slime job runs slime's trainer alone; agentbridge's warm "
                     "start and held-out evaluation are not run around it")
    if spec.algorithm.credit == "turn":
        notes.append("algorithm.credit: turn: slime trains on one reward per sample (Sample.reward), so each "
                     "episode's per-turn rewards are summed into it")
    if spec.resources.gpus_per_node == 0:
        notes.append("resources.gpus_per_node is 0, but slime's Megatron actor and SGLang need GPUs: compiled for 1 "
                     "GPU per node")
    if options(spec)["model_script"] is None:
        notes.append("backend.options.model_script is not set: Megatron needs the model's architecture flags; set "
                     "it to one of slime's scripts/models/*.sh (e.g. qwen2.5-3B), or MODEL_ARGS_FILE to such a file")
    return notes


def slime_python() -> str:
    """The slime environment's interpreter (see ``agentbridge.backends.backend_python``), else this one."""
    return backend_python("slime", "slime") or sys.executable


def _launch_lines(spec: Spec) -> list[str]:
    script = options(spec)["model_script"]
    models = {"@SLIME_DIR@": "SLIME_DIR"}
    default = kit.shell_quote(f"@SLIME_DIR@/scripts/models/{script}.sh", models) if script else "''"
    return [
        "# Run slime's train.py with agentbridge's generate function on this machine (it needs GPUs and Megatron-LM).",
        f"# SLIME_DIR: a checkout of {SLIME_REPO} (this adapter was verified against {SLIME_COMMIT[:7]});",
        "# MEGATRON_DIR: the Megatron-LM checkout slime's docker/ pins. ROOT: where the job's files are read from.",
        kit.default_line("PYTHON", slime_python()),
        'ROOT="${ROOT:-$JOB}"',
        f"SLIME_DIR=\"${{SLIME_DIR:?set SLIME_DIR to a checkout of {SLIME_REPO}}}\"",
        kit.model_line("MODEL", spec.model.path),
        kit.default_line("RUN_DIR", f"runs/{spec.name}"),
        'mkdir -p "$RUN_DIR" && RUN_DIR="$(cd "$RUN_DIR" && pwd)"',
        'export AGENTBRIDGE_RUN_DIR="$RUN_DIR"',
        'export PYTHONPATH="$SLIME_DIR${MEGATRON_DIR:+:$MEGATRON_DIR}${PYTHONPATH:+:$PYTHONPATH}"',
        "# MODEL_ARGS: Megatron's architecture flags for the model, from one of slime's scripts/models/*.sh",
        f'if [ -z "${{MODEL_ARGS_FILE:-}}" ]; then MODEL_ARGS_FILE={default}; fi',
        "MODEL_ARGS=()",
        'if [ -n "$MODEL_ARGS_FILE" ]; then source "$MODEL_ARGS_FILE"; fi',
        "# LOAD / REF_LOAD: default the model (slime loads Hugging Face weights of the model types it supports)",
        'mapfile -d "" ARGS < <("$PYTHON" -m agentbridge_slime.args "$ROOT" --model "$MODEL" --run-dir "$RUN_DIR" \\',
        '  --load "${LOAD:-}" --ref-load "${REF_LOAD:-}")',
        '[ "${#ARGS[@]}" -gt 0 ] || { echo "launch.sh: agentbridge_slime.args gave no arguments" >&2; exit 1; }',
        '"$PYTHON" "$SLIME_DIR/train.py" "${MODEL_ARGS[@]}" "${ARGS[@]}" "$@"',
    ]


def _submit_lines(spec: Spec) -> list[str]:
    nodes, gpus = spec.resources.nodes, gpus_per_node(spec)
    return [
        "# Submit to a running Ray cluster (ray start --head; ray start --address=... on the other nodes).",
        "# The job directory is the Ray working_dir, so every node reads data, spec and flags from its own copy.",
        f"# PYTHON is the slime environment (agentbridge, agentbridge-slime, the spec's plugins; {SLIME_REPO} at "
        "SLIME_DIR and Megatron-LM at MEGATRON_DIR)",
        "# at the same paths on every node: slime's rollout manager imports agentbridge's generate function there.",
        kit.default_line("PYTHON", slime_python()),
        f"SLIME_DIR=\"${{SLIME_DIR:?set SLIME_DIR to the checkout of {SLIME_REPO} on the nodes}}\"",
        "# RUN_DIR: checkpoints and logs, written by ranks on every node: an absolute path on storage all nodes share",
        "case \"${RUN_DIR:-}\" in /*) ;; *) echo \"submit.sh: set RUN_DIR to an absolute directory on storage every "
        "node shares (now: '${RUN_DIR:-}')\" >&2; exit 2 ;; esac",
        "RAY_ADDRESS=\"${RAY_ADDRESS:-http://127.0.0.1:8265}\"",
        f"# {nodes} node(s) x {gpus} GPU(s): --actor-num-nodes / --actor-num-gpus-per-node in slime_job.yaml",
        'ENV_JSON="{\\"env_vars\\": {\\"PYTHONPATH\\": \\"$SLIME_DIR${MEGATRON_DIR:+:$MEGATRON_DIR}\\", '
        '\\"CUDA_DEVICE_MAX_CONNECTIONS\\": \\"1\\"}}"',
        "exec ray job submit --address \"$RAY_ADDRESS\" --working-dir \"$JOB\" --runtime-env-json \"$ENV_JSON\" \\",
        "  -- env ROOT=. PYTHON=\"$PYTHON\" RUN_DIR=\"$RUN_DIR\" SLIME_DIR=\"$SLIME_DIR\" "
        "MEGATRON_DIR=\"${MEGATRON_DIR:-}\" bash launch.sh \"$@\"",
    ]

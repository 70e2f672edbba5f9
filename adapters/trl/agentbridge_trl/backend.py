"""The TRL backend: capabilities, spec checks, compile to a job directory, validate, launch."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from agentbridge import adapter_kit as kit
from agentbridge.backends import Capabilities, Job, Problem, Report
from agentbridge.runs import write_jsonl
from agentbridge.spec import Spec, dump_spec
from agentbridge_trl import __version__
from agentbridge_trl.config import (
    ALGORITHMS,
    OPTIONS,
    WHY_NOT,
    ZERO_STAGES,
    applies,
    grpo_config_kwargs,
    world_size,
)
from agentbridge_trl.config import options as trl_options

TRL_PIN = "1.16.0"


class TrlBackend:
    """Compiles a spec into a TRL GRPO job whose rollouts run agentbridge's driver (``rollout_func``)."""

    name = "trl"
    module = "trl"  # what must import for this backend to run here
    algorithm_probe = "agentbridge_trl.algorithm_probe"  # the training-math conformance
    step_probe = "agentbridge_trl.step_probe"
    # what the rollout conformance records of TRL's default job do not hold (None), and why; any other None fails
    rollout_not_held = {"token_rewards": "GRPOTrainer keeps one reward per episode, no per-token rewards"}

    def conformance(self, kind: str, workdir: Path) -> list[Any]:
        """The golden episodes of ``kind`` through TRL's rollout path (``agentbridge.conformance``)."""
        from agentbridge_trl.conformance import golden_records

        return golden_records(kind, workdir)

    def capabilities(self) -> Capabilities:
        return Capabilities(
            algorithms=sorted(ALGORITHMS), multimodal=True, tool_images=True, max_turns=None,
            async_rollout=False, cpu_training=True,
            scale_out="accelerate launch (multi-GPU / multi-node), vLLM colocate or server",
            notes=[f"{algo}: {why}" for algo, why in WHY_NOT.items()]
                  + ["images: a vision-language model (e.g. builtin:tiny-vl) trains with AgentVLMGRPOTrainer, a "
                     "GRPOTrainer subclass that puts the driver's prompt and tool-result images in the forward "
                     "pass (TRL 1.16's rollout_func alone cannot); same ids, masks and rewards as text agents",
                     "images: checked on CPU with model.generate (Qwen2-VL); vLLM generation with images goes "
                     "through TRL's vLLM client and is not exercised on CPU"])

    def check(self, spec: Spec) -> list[Problem]:
        """What in ``spec`` TRL cannot run, one line each (needs no TRL installed)."""
        problems = [*kit.algorithm_check(self, spec, WHY_NOT), *kit.unknown_options(self, spec, OPTIONS, "TRL")]
        problems += kit.recipe_problems(spec, self.name)
        own = spec.backend.options if applies(spec) else {}
        mode = own.get("vllm_mode", "colocate")
        if mode not in ("colocate", "server"):
            problems.append(Problem("backend.options.vllm_mode", f"must be colocate or server, got {mode!r}"))
        if own.get("use_vllm") and spec.resources.gpus_per_node == 0:
            problems.append(Problem("backend.options.use_vllm", "vLLM needs GPUs; set resources.gpus_per_node"))
        trainers = _training_processes(spec)
        if own.get("use_vllm") and mode == "server" and trainers > 1:
            problems.append(Problem("backend.options.vllm_mode", f"server mode works with one training process, "
                                    f"not {trainers}: every generate call of TRL's server client is a collective "
                                    "over all ranks, and each rank's episodes make their own calls; use colocate"))
        for key, least in (("save_steps", 0), ("save_total_limit", 1)):
            value = own.get(key, OPTIONS[key])
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                problems.append(Problem(f"backend.options.{key}", f"must be a whole number >= {least}, got {value!r}"))
        stage = own.get("zero_stage")
        if stage is not None and (stage not in ZERO_STAGES or isinstance(stage, bool)):
            problems.append(Problem("backend.options.zero_stage", f"must be one of {', '.join(map(str, ZERO_STAGES))} "
                                    f"(DeepSpeed ZeRO) or null (DDP), got {stage!r}"))
        elif stage is not None and spec.resources.gpus_per_node == 0:
            problems.append(Problem("backend.options.zero_stage", "DeepSpeed needs GPUs; set resources.gpus_per_node "
                                    "or leave zero_stage unset on CPU"))
        if spec.algorithm.group_size < 2:
            problems.append(Problem("algorithm.group_size", "GRPO-family advantages need at least 2 samples per "
                                    "prompt"))
        completions = spec.algorithm.batch_size * spec.algorithm.group_size
        if completions % world_size(spec):
            problems.append(Problem("algorithm.batch_size", f"batch_size x group_size ({completions}) must divide "
                                    f"evenly over {world_size(spec)} GPUs"))
        micro = own.get("micro_batch_size")
        per_device = max(1, completions // world_size(spec))
        if micro is not None and (not isinstance(micro, int) or isinstance(micro, bool) or micro < 1
                                  or per_device % micro):
            problems.append(Problem("backend.options.micro_batch_size", f"must be a whole number that divides each "
                                    f"device's {per_device} episodes per step, got {micro!r}"))
        return problems

    def compile(self, spec: Spec, out: Path) -> Job:
        """Write the job's files (spec, data, GRPOConfig, launch.sh, submit.sh); the Job's manifest is filled."""
        from agentbridge.plugins import get_plugins
        from agentbridge.rollout.agent import load_tasks

        out = Path(out)
        (out / "data").mkdir(parents=True, exist_ok=True)
        train, evals = load_tasks(spec, "train"), load_tasks(spec, "eval")
        write_jsonl(out / "data" / "train.jsonl", (t.to_dict() for t in train))
        write_jsonl(out / "data" / "eval.jsonl", (t.to_dict() for t in evals))
        (out / "spec.yaml").write_text(dump_spec(spec))
        kwargs = grpo_config_kwargs(spec, output_dir="${RUN_DIR}/trainer")
        get_plugins().hook.modify_backend_config(spec=spec, backend=self.name, config=kwargs)
        (out / "grpo_config.json").write_text(json.dumps(kwargs, indent=2) + "\n")
        entry = '-m agentbridge_trl.entry "$JOB" --run-dir "$RUN_DIR"'
        kit.write_script(out / "launch.sh", [
            "# Run this job on this machine (CPU or one GPU).",
            kit.default_line("PYTHON", sys.executable),
            kit.default_line("RUN_DIR", f"runs/{spec.name}"),
            f'exec "$PYTHON" {entry} "$@"',
        ])
        kit.write_script(out / "submit.sh", _submit_lines(spec, entry))
        note = kit.foreign_note(self, spec, "TRL")
        return kit.new_job(self, spec, out, version=__version__, pin=TRL_PIN,
                           tasks={"train": len(train), "eval": len(evals)}, notes=[note] if note else [])

    def validate(self, job: Job) -> Report:
        """Build TRL's GRPOConfig, the tokenizer, the agent and check the chat template; one line per problem."""
        return kit.run_validator(job, self, "agentbridge_trl.validate")

    def resume_point(self, run_dir: Path, spec: Spec) -> Path:
        """The checkpoint ``agentbridge train --resume`` continues ``run_dir`` from (its newest); ValueError with one
        line when there is none, or the run was trained with another spec."""
        from agentbridge.spec import spec_hash
        from agentbridge_trl.resume import resume_point

        return resume_point(Path(run_dir), spec_hash(spec))

    def launch(self, job: Job, runner: Any = None, run_dir: Path | None = None,
               extra_args: list[str] | None = None) -> Path:
        """Run ``launch.sh`` with ``runner``'s interpreter (else TRL's environment's); returns the run directory."""
        return kit.launch_job(job, runner, run_dir, self, label="TRL", extra_args=extra_args or ())


def _training_processes(spec: Spec) -> int:
    """How many training processes ``submit.sh`` starts: every GPU, less node 0's last one when it serves vLLM."""
    options = trl_options(spec)
    serves = options["use_vllm"] and options["vllm_mode"] == "server" and not options["vllm_server_base_url"]
    gpus = max(1, spec.resources.gpus_per_node)
    return spec.resources.nodes * (gpus - 1 if serves and gpus > 1 else gpus)


def _submit_lines(spec: Spec, entry: str) -> list[str]:
    """``accelerate launch`` over ``resources``; vLLM in colocate mode, or a server started on the last GPU."""
    nodes, gpus = spec.resources.nodes, max(1, spec.resources.gpus_per_node)
    options = trl_options(spec)
    lines = [
        "# Multi-GPU / multi-node: run on every node with MACHINE_RANK and MAIN_PROCESS_IP set.",
        f"NUM_MACHINES=${{NUM_MACHINES:-{nodes}}}",
        f"GPUS_PER_NODE=${{GPUS_PER_NODE:-{gpus}}}",
        "MACHINE_RANK=${MACHINE_RANK:-0}",
        'if [ "$NUM_MACHINES" -gt 1 ] && [ -z "${MAIN_PROCESS_IP:-}" ]; then',
        '  echo "error: MAIN_PROCESS_IP: set it to node 0\'s address on every node of this $NUM_MACHINES-node job" >&2',
        "  exit 2",
        "fi",
        "MAIN_PROCESS_IP=${MAIN_PROCESS_IP:-127.0.0.1}",
        "TRAIN_GPUS=$GPUS_PER_NODE",
        kit.default_line("RUN_DIR", f"runs/{spec.name}"),
    ]
    if options["use_vllm"] and options["vllm_mode"] == "server" and not options["vllm_server_base_url"]:
        lines += [
            "# vLLM server mode: the last GPU of node 0 serves generation, the others train.",
            "TRAIN_GPUS=$((GPUS_PER_NODE - 1))",
            'if [ "$MACHINE_RANK" = 0 ]; then',
            "  MODEL=$(\"${PYTHON:-python}\" -c 'import sys,yaml; from agentbridge.models import resolve_model_path; "
            "print(resolve_model_path(yaml.safe_load(open(sys.argv[1]))[\"model\"][\"path\"]))' \"$JOB/spec.yaml\")",
            "  CUDA_VISIBLE_DEVICES=$TRAIN_GPUS VLLM_SERVER_DEV_MODE=1 vllm serve \"$MODEL\" "
            "--weight-transfer-config '{\"backend\": \"nccl\"}' --logprobs-mode processed_logprobs "
            "--max-logprobs -1 &",
            "  trap 'kill %1' EXIT",
            "fi",
        ]
    lines += [
        "exec accelerate launch --num_machines \"$NUM_MACHINES\" --machine_rank \"$MACHINE_RANK\" \\",
        "  --main_process_ip \"$MAIN_PROCESS_IP\" --num_processes $((NUM_MACHINES * TRAIN_GPUS)) \\",
        f"  --mixed_precision bf16 {entry} \"$@\"",
    ]
    return lines


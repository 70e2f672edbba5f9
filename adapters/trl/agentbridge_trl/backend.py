"""The TRL backend: capabilities, spec checks, compile to a job directory, validate, launch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentbridge import adapter as kit
from agentbridge.adapter import Problem, write_jsonl
from agentbridge.spec import Spec
from agentbridge_trl import __version__
from agentbridge_trl.config import (
    ALGORITHMS,
    IS_DEFAULTS,
    OPTIONS,
    RECIPE_WHY_NOT,
    SIZING_OPTIONS,
    WHY_NOT,
    ZERO_STAGES,
    applies,
    batch_shape,
    grpo_config_kwargs,
    world_size,
)
from agentbridge_trl.config import options as trl_options
from agentbridge_trl.launch_lines import launch_lines, submit_lines

TRL_PIN = "1.16.0"
ENTRY = '-m agentbridge_trl.entry "$JOB" --run-dir "$RUN_DIR"'  # launch.sh's and submit.sh's interpreter arguments


class TrlBackend(kit.Adapter):
    """Compiles a spec into a TRL GRPO job whose rollouts run agentbridge's driver (``rollout_func``)."""

    name, label, module, version, pin = "trl", "TRL", "trl", __version__, TRL_PIN
    algorithms, why_not, grouped, known_options = ALGORITHMS, WHY_NOT, frozenset(ALGORITHMS), OPTIONS
    validator, conformance_module = "agentbridge_trl.validate", "agentbridge_trl.conformance"
    algorithm_probe = "agentbridge_trl.algorithm_probe"  # the training-math conformance
    step_probe = "agentbridge_trl.step_probe"
    # what the rollout conformance records of TRL's default job do not hold (None), and why; any other None fails
    rollout_not_held = {"token_rewards": "GRPOTrainer keeps one reward per episode, no per-token rewards"}
    config_file = "grpo_config.json"
    recipe_why_not = RECIPE_WHY_NOT  # k1/k2, KL in the reward, one-step-off and async rollouts (config.py)
    sizing_options = SIZING_OPTIONS
    lora_why_not = None  # model.lora: TRL's GRPOTrainer(peft_config=...) trains the adapter (agentbridge_trl.trainer)
    # DeepSpeed (the GPU profiles' ZeRO-3) builds its ops against the installed torch: after, without build isolation
    environment = kit.EnvironmentRecipe(adapter="agentbridge-trl", gpu=(f"trl[vllm]=={TRL_PIN}",),
                                        gpu_post=(("--no-build-isolation", "deepspeed==0.19.6"),))

    capability_fields = dict(
        multimodal=True, tool_images=True, cpu_training=True, verified_in_ci=True,
        scale_out="accelerate launch (multi-GPU / multi-node), vLLM colocate or server",
        notes=[f"{algo}: {why}" for algo, why in WHY_NOT.items()]
        + ["images: a vision-language model (e.g. builtin:tiny-vl) trains with AgentVLMGRPOTrainer, a "
           "GRPOTrainer subclass that puts the driver's prompt and tool-result images in the forward "
           "pass (TRL 1.16's rollout_func alone cannot); same ids, masks and rewards as text agents",
           "images: checked on CPU with model.generate (Qwen2-VL); vLLM generation with images goes "
           "through TRL's vLLM client and is not exercised on CPU"])

    def spec_problems(self, spec: Spec) -> list[Problem]:
        problems = []
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
        elif spec.algorithm.mini_batches is not None:
            shape = batch_shape(spec, micro)
            if per_device % spec.algorithm.mini_batches or shape["steps_per_generation"] % spec.algorithm.mini_batches:
                problems.append(Problem("algorithm.mini_batches", f"{spec.algorithm.mini_batches} mini-batches do not "
                                        f"split each device's {per_device} episodes into whole micro-batches "
                                        f"({shape['per_device_train_batch_size']} each)"))
        return problems

    def write_data(self, draft: kit.Draft) -> None:
        write_jsonl(draft.out / "data" / "train.jsonl", (t.to_dict() for t in draft.train))
        write_jsonl(draft.out / "data" / "eval.jsonl", (t.to_dict() for t in draft.evals))

    def job_config(self, draft: kit.Draft) -> dict[str, Any]:
        """``GRPOConfig``'s arguments (``grpo_config.json``)."""
        return grpo_config_kwargs(draft.spec, output_dir="${RUN_DIR}/trainer")

    def write_config(self, draft: kit.Draft) -> None:
        (draft.out / self.config_file).write_text(json.dumps(draft.config, indent=2) + "\n")

    def launch_lines(self, draft: kit.Draft) -> list[str]:
        return launch_lines(draft.spec, ENTRY, draft.config)

    def submit_lines(self, draft: kit.Draft) -> list[str]:
        return submit_lines(draft.spec, ENTRY)

    def compile_notes(self, draft: kit.Draft) -> list[str]:
        notes = [] if draft.spec.model.lora is None else [
            "model.lora: the warm start and the SFT-only control train every weight; GRPO then trains a new LoRA "
            "adapter on the warm-started base, which is also the KL reference (TRL disables the adapter for it). "
            "After RL the adapter is merged: RUN_DIR/model is a plain transformers model (model_info.json says "
            "so), and RUN_DIR/trainer checkpoints hold the adapter only"]
        return notes + is_correction_notes(draft.spec, draft.config)

    def resume_point(self, run_dir: Path, spec: Spec) -> Path:
        """The checkpoint ``agentbridge train --resume`` continues ``run_dir`` from (its newest); ValueError with one
        line when there is none, or the run was trained with another spec."""
        from agentbridge.spec import spec_hash
        from agentbridge_trl.resume import resume_point

        return resume_point(Path(run_dir), spec_hash(spec))


def is_correction_notes(spec: Spec, config: dict[str, Any]) -> list[str]:
    """What the job's importance-sampling correction does that ``algorithm.is_correction`` does not say: TRL computes
    it only when it generates with vLLM (grpo_trainer.py ``_generate_and_score_completions``: ``if self.use_vllm
    and self.vllm_importance_sampling_correction``)."""
    settings = {**IS_DEFAULTS, **{k: v for k, v in config.items() if k in IS_DEFAULTS}}
    if not settings["vllm_importance_sampling_correction"] or config.get("use_vllm"):
        return []
    return [f"algorithm.is_correction: written as GRPOConfig vllm_importance_sampling_mode "
            f"{settings['vllm_importance_sampling_mode']}, vllm_importance_sampling_clip_max "
            f"{settings['vllm_importance_sampling_clip_max']}, but TRL computes the importance-sampling ratio "
            "only when it generates with vLLM; this job generates with the training model (backend.options."
            "use_vllm false), so no correction is applied"]


def _training_processes(spec: Spec) -> int:
    """How many training processes ``submit.sh`` starts: every GPU, less node 0's last one when it serves vLLM."""
    options = trl_options(spec)
    serves = options["use_vllm"] and options["vllm_mode"] == "server" and not options["vllm_server_base_url"]
    gpus = max(1, spec.resources.gpus_per_node)
    return spec.resources.nodes * (gpus - 1 if serves and gpus > 1 else gpus)

"""The RLinf backend: capabilities, spec checks, compile to a job directory, validate, launch, conformance."""

from __future__ import annotations

from typing import Any

from agentbridge import adapter as kit
from agentbridge.adapter.scripts import RAY_ROOT, hydra_entry_lines, ray_submit_script, worker_env
from agentbridge.adapter.training import trainer_launch_lines
from agentbridge_rlinf import RLINF_PIN, __version__
from agentbridge_rlinf.config import (
    ALGORITHMS,
    CONFIG_NAME,
    ENTRY_FILE,
    ENV_CONFLICT,
    GROUPED,
    IS_WHY,
    NOTES,
    ROLLOUT_WHY,
    SIZING_OPTIONS,
    SIZING_WHY_NOT,
    WHY_NOT,
    RlinfOptions,
    gpus_per_node,
    job_config,
    kl_refusals,
    path_overrides,
)
from agentbridge_rlinf.data import task_row


class RlinfBackend(kit.Adapter):
    """Compiles a spec into an RLinf 0.3.0 reasoning job whose agent-loop worker runs agentbridge's driver."""

    name, label, module, version, pin = "rlinf", "RLinf", "rlinf", __version__, RLINF_PIN
    algorithms, why_not, grouped, options_model = ALGORITHMS, WHY_NOT, frozenset(GROUPED), RlinfOptions
    recipe_why_not = {"loss_agg": {"seq_mean_token_sum_norm": "RLinf 0.3.0's loss_agg_func has no constant "
                                                               "normaliser"},
                      "scale_advantages": {v: "RLinf 0.3.0's grpo advantage always divides by the group's std"
                                           for v in ("batch", "none")},
                      "is_correction": {k: IS_WHY for k in ("token_mask", "sequence_truncate", "sequence_mask")},
                      "rollout": {k: ROLLOUT_WHY for k in ("one_step_off", "async", "async+partial")}}
    sizing_options, sizing_why_not = SIZING_OPTIONS, SIZING_WHY_NOT
    epochs_why_not = "RLinf 0.3.0's reasoning actor updates once per rollout (update_epoch is the embodied actor's)"
    lora_why_not = ("RLinf 0.3.0's reasoning actor loads a plain model; its LoRA reaches only the embodied actor "
                    "(rlinf.models.get_model)")
    validator, conformance_module = "agentbridge_rlinf.validate", "agentbridge_rlinf.conformance"
    algorithm_probe = "agentbridge_rlinf.algorithm_probe"  # the training-math conformance
    # what the rollout conformance records of RLinf's default job do not hold (None), and why; any other None fails
    rollout_not_held = {"token_rewards": "RLinf's actor batch keeps one reward per sequence, no per-token rewards"}
    config_file = f"{CONFIG_NAME}.yaml"
    control_note = gpu_trainer = True
    config_header = f"# RLinf {RLINF_PIN} reasoning-task config for this job; paths come from launch.sh\n"
    entry = (ENTRY_FILE, "RLinf entry of this job: RLinf's worker groups with agentbridge's agent-loop worker (no "
             "config key of\nRLinf selects the agent-loop class, so the job ships its own Hydra main).",
             "agentbridge_rlinf.entry")

    # the KL settings RLinf cannot honour: they depend on the algorithm, the placement and the training backend
    config_refusals = staticmethod(kl_refusals)
    gpus_per_node = staticmethod(gpus_per_node)  # recorded in the manifest

    # RLinf's declared dependencies drag in triton (liger_kernel), gsutil, nvitop, swanlab and more: on CPU it goes in
    # without them and the adapter's `cpu` extra brings what its validator and agent loop import
    environment = kit.EnvironmentRecipe(
        adapter="agentbridge-rlinf", cpu_extra="cpu", cpu_pre=(("--no-deps", f"rlinf=={RLINF_PIN}"),),
        gpu=(f"rlinf[agentic-sglang]=={RLINF_PIN}",),
        gpu_conflict=f"RLinf {RLINF_PIN}'s engine extras (agentic-sglang, agentic-vllm) pin transformers==4.51.1 and "
                     "agentbridge[hf] needs transformers>=5.5.3: no one environment holds both")
    capability_fields = {
        "verified_in_ci": True, "async_rollout": True,
        "scale_out": "Ray cluster: ray job submit (cluster.num_nodes x GPUs), SGLang rollout workers",
        "notes": [*NOTES, f"training needs GPUs (RLinf {RLINF_PIN}: FSDP or Megatron actors, SGLang); the agent loop "
                  "and validation run on CPU", "images: not wired (RLinf's agent loop passes no images to its engine)"]}

    task_row = staticmethod(task_row)  # data/train.jsonl and data/eval.jsonl rows

    def job_config(self, draft: kit.Draft) -> dict[str, Any]:
        return job_config(draft.spec)

    def compile_notes(self, draft: kit.Draft) -> list[str]:
        """What the RLinf job does differently from the spec (kept in the manifest and at the top of launch.sh)."""
        spec = draft.spec
        notes = [ENV_CONFLICT]
        if spec.algorithm.name == "dapo":
            notes.append("algorithm.name dapo: RLinf's grpo advantage with clip 0.2/0.28 and token-mean; dynamic "
                         "sampling and overlong shaping are not switched on")
        return notes

    def launch_lines(self, draft: kit.Draft) -> list[str]:
        spec = draft.spec
        # RLinf's log_path (runner.output_dir/<experiment_name>): its checkpoints and TensorBoard scalars
        log_dir = kit.shell_quote(f"@RUN_DIR@/{spec.name}", {"@RUN_DIR@": "RUN_DIR"})
        return trainer_launch_lines(spec, self.python(), [
            "# Run RLinf's reasoning trainer with agentbridge's agent-loop worker on this machine (it needs GPUs).",
            RAY_ROOT,
        ], [
            "# checkpoints: $RUN_DIR/<experiment_name>/checkpoints/global_step_N, every runner.save_interval steps and "
            "at",
            "# the last; a relaunch resumes from the latest (runner.resume_dir: auto)",
            *hydra_entry_lines(ENTRY_FILE, '"$(cd "$ROOT" && pwd)"', CONFIG_NAME,
                               path_overrides("$ROOT", "$MODEL", has_eval=draft.has_eval), "runner.output_dir"),
        ], [
            "# the trained model: the latest checkpoint's full weights as a Hugging Face model (actor/huggingface)",
            f'TRAINED="$({{ "$PYTHON" -m agentbridge_rlinf.entry export {log_dir} --model "$MODEL" || true; }} '
            '| tail -n 1)"',
        ], module="agentbridge_rlinf", label="RLinf")

    def submit_lines(self, draft: kit.Draft) -> list[str]:
        environment = (f"the RLinf environment (rlinf=={RLINF_PIN}, agentbridge, agentbridge-rlinf and the spec's "
                       "plugins): RLinf's workers import agentbridge's agent loop there")
        return ray_submit_script(self.python(), environment, [
            f"NNODES=\"${{NNODES:-{draft.spec.resources.nodes}}}\"",
            f"# {gpus_per_node(draft.spec)} GPU(s) per node: RLinf places actor and rollout on all of them "
            "(cluster.component_placement)",
        ], worker_env(), 'bash launch.sh cluster.num_nodes="$NNODES" "$@"',
            carries="(AGENTBRIDGE_RUN_DIR=$RUN_DIR) to every worker, the agent loop recording episodes among them",
            ray_init="RLinf's own ray.init sets no env_vars (at most py_modules, RLINF_CODE_WORKING_DIR)")



"""The ROLL backend: capabilities, spec checks, compile to a job directory, validate, launch, conformance."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from agentbridge import Task
from agentbridge import adapter as kit
from agentbridge.adapter import Capabilities
from agentbridge.adapter.scripts import (
    RAY_ROOT,
    hydra_entry_lines,
    latest_checkpoint_lines,
    ray_submit_script,
    worker_env,
)
from agentbridge.adapter.training import trainer_launch_lines
from agentbridge.spec import Spec
from agentbridge.spec.recipe import kl_setting
from agentbridge_roll import ROLL_COMMIT, ROLL_REPO, ROLL_SOURCE, __version__, keep_roll_logs_out_of_cwd
from agentbridge_roll.config import (
    ALGORITHMS,
    CONFIG_NAME,
    ENTRY_FILE,
    GROUPED,
    NOTES,
    ROLLOUT_PARTIAL_WHY,
    SIZING_OPTIONS,
    TOKEN_KL,
    WHY_NOT,
    RollOptions,
    async_generation_ratio,
    gpus_per_node,
    infer_gpus,
    job_config,
    path_overrides,
    recipe_refusals,
    train_gpus,
)

# how this adapter was verified: ROLL is source only, so CI here cannot run its code
VERIFIED = (f"against ROLL's own code at {ROLL_SOURCE} (source only, not on the package index): config, env "
            "manager and rollout queue on CPU; see adapters/roll/README.md")
# Capabilities.verified_upstream (an agentbridge without the field is told in the notes only)
UPSTREAM: dict[str, Any] = ({"verified_upstream": f"{ROLL_REPO}@{ROLL_COMMIT}"}
            if "verified_upstream" in {f.name for f in dataclasses.fields(Capabilities)} else {})


class RollBackend(kit.Adapter):
    """Compiles a spec into a ROLL agentic-pipeline job whose env manager runs agentbridge's driver."""

    name, label, version, pin = "roll", "ROLL", __version__, ROLL_COMMIT
    module = "roll"  # what must import for this backend to run here (a ROLL checkout on PYTHONPATH)
    algorithms, why_not, grouped, options_model = ALGORITHMS, WHY_NOT, frozenset(GROUPED), RollOptions
    recipe_why_not = {"loss_agg": {"seq_mean_token_sum_norm": "ROLL's seq-mean-token-sum-norm divides by the "
                                   "padded sequence width (prompt included), not agent.max_response_tokens"},
                      "rollout": {"async+partial": ROLLOUT_PARTIAL_WHY}}
    lora_why_not = None
    sizing_options = SIZING_OPTIONS
    validator, conformance_module = "agentbridge_roll.validate", "agentbridge_roll.conformance"
    algorithm_probe = "agentbridge_roll.algorithm_probe"  # the training-math conformance
    config_file = f"{CONFIG_NAME}.yaml"
    control_note = gpu_trainer = True
    config_header = f"# ROLL agentic-pipeline config for this job ({ROLL_SOURCE}); paths come from launch.sh\n"
    entry = (ENTRY_FILE, "ROLL entry of this job: ROLL's agentic pipeline, composed from this directory's config "
             "(the job's env\nmanager is agentbridge's, named in custom_envs).", "agentbridge_roll.entry")

    # the KL and rollout settings ROLL cannot honour: they depend on the KL's placement and the job's GPUs
    config_refusals = staticmethod(recipe_refusals)
    gpus_per_node = staticmethod(gpus_per_node)  # recorded in the manifest

    # ROLL is source only (PyPI `roll` is another project): no recipe installs it
    environment = kit.EnvironmentRecipe.from_checkout("ROLL", "agentbridge-roll", ROLL_REPO, ROLL_COMMIT,
                                                      also=" (and TransferQueue==0.1.6 --no-deps)")
    capability_fields = {
        "async_rollout": True,
        "scale_out": "Ray cluster: ray job submit (ROLL's workers on device_mapping GPUs; env managers in threads)",
        "notes": [*NOTES, f"verified {VERIFIED}", "training needs GPUs (ROLL: Megatron or FSDP2 actor, vLLM or "
                  "SGLang); the env manager, rollout queue and validation run on CPU",
                  "images: not wired (agentbridge's ROLL env manager is text only)"], **UPSTREAM}

    def task_row(self, task: Task, spec: Spec) -> dict[str, Any]:
        """The task as the JSON line the env manager reads back (read_tasks_jsonl)."""
        return task.to_dict()

    def job_config(self, draft: kit.Draft) -> dict[str, Any]:
        return job_config(draft.spec, has_eval=draft.has_eval)

    def manifest_extra(self, draft: kit.Draft) -> dict[str, Any]:
        return {"roll_source": ROLL_SOURCE}

    def conformance(self, kind: str, workdir: Path) -> list[Any]:
        """The golden episodes of ``kind`` through ROLL's own env-manager path, read back from its rollout batch."""
        keep_roll_logs_out_of_cwd()
        return super().conformance(kind, workdir)

    def compile_notes(self, draft: kit.Draft) -> list[str]:
        """What the ROLL job does differently from the spec (kept in the manifest and at the top of launch.sh)."""
        spec = draft.spec
        notes = [f"ROLL is not on the package index: the job runs in an environment built from a ROLL checkout "
                 f"(verified against {ROLL_SOURCE}); set ROLL_HOME to that checkout"]
        if spec.algorithm.name == "dapo":
            notes.append("algorithm.name dapo: clip 0.2/0.28 and token-mean; dynamic sampling by agentbridge's group "
                         "filter (groups whose episodes all score the same are resampled); no overlong shaping")
        if spec.algorithm.name == "dr_grpo":
            notes.append("algorithm.name dr_grpo: ROLL divides the summed token losses by the padded sequence width "
                         "(sequence_length - 1), a constant, not by max_response_tokens")
        algo = spec.algorithm
        if algo.kl_coef > 0 and algo.name not in TOKEN_KL and kl_setting(algo)[1] == "reward":
            notes.append(f"algorithm.kl_in reward on {algo.name}: ROLL subtracts the KL from each token's reward after "
                         "normalising the rewards in their group, and the advantage is each token's return (the "
                         "normalised reward minus the KL from that token on), not the group-normalised reward minus "
                         "the sequence's KL")
        if algo.is_correction is not None and algo.is_correction.mode == "mask":
            notes.append("algorithm.is_correction mask: ROLL's ratio filter takes a token (or sequence) whose weight "
                         "passes the cap out of response_mask, so it leaves the loss's token means (and, where ROLL "
                         "recomputes the old log-probs, the count of sequences) instead of adding 0 to them")
        ratio = async_generation_ratio(spec)
        if ratio:
            train, infer = train_gpus(spec), infer_gpus(spec)
            notes.append(f"algorithm.rollout {spec.algorithm.rollout.mode}: ROLL's async pipeline, "  # type: ignore[union-attr]
                         f"async_generation_ratio {ratio} (episode groups generated up to {ratio} step(s) ahead of "
                         f"training, older ones dropped; a step may also train on episodes of the current policy "
                         f"when generation falls behind); actor_infer on GPUs {infer.start}-{infer.stop - 1}, the "
                         f"training workers on GPUs {train.start}-{train.stop - 1}")
        if spec.algorithm.steps == 1:
            notes.append("algorithm.steps 1: ROLL saves no checkpoint of its first step (BasePipeline.do_checkpoint "
                         "saves at global_step > 0 only), so after_rl is not evaluated")
        return notes

    def launch_lines(self, draft: kit.Draft) -> list[str]:
        return trainer_launch_lines(draft.spec, self.python(), [
            "# Run ROLL's agentic pipeline with agentbridge's env manager on this machine (it needs GPUs).",
            RAY_ROOT,
            "# ROLL_HOME: a checkout of ROLL (source only); put on PYTHONPATH when set.",
        ], [
            "# checkpoints: $RUN_DIR/checkpoints/checkpoint-N every save_steps and at the last step; a relaunch "
            "resumes",
            "# from the latest (resume_from_checkpoint: true; FileSystemUploader.get_latest_ckpt lists the folder)",
            'mkdir -p "$RUN_DIR/checkpoints"',
            *hydra_entry_lines(ENTRY_FILE, '"$ROOT"', CONFIG_NAME,
                               path_overrides("$ROOT", "$MODEL", has_eval=draft.has_eval), "output_dir"),
        ], [
            "# the trained model: the latest checkpoint-N, the actor's Hugging Face model at its top (save_hf_model)",
            *latest_checkpoint_lines("TRAINED", '"$RUN_DIR"/checkpoints/checkpoint-*', "-"),
        ], module="agentbridge_roll", label="ROLL", root='ROOT="$(cd "${ROOT:-$JOB}" && pwd)"',
            setup=['if [ -n "${ROLL_HOME:-}" ]; then export PYTHONPATH="$ROLL_HOME${PYTHONPATH:+:$PYTHONPATH}"; fi'],
            env=['export ROLL_LOG_DIR="${ROLL_LOG_DIR:-$RUN_DIR/logs}"',
                 "# a hub id is fetched from the Hugging Face hub (ROLL's download_model defaults to ModelScope)",
                 'export MODEL_DOWNLOAD_TYPE="${MODEL_DOWNLOAD_TYPE:-HUGGINGFACE_HUB}"'])

    def submit_lines(self, draft: kit.Draft) -> list[str]:
        gpus = gpus_per_node(draft.spec)
        environment = (f"the ROLL environment (a ROLL checkout at {ROLL_SOURCE} with its requirements, agentbridge, "
                       "agentbridge-roll and the spec's plugins), and ROLL_HOME the ROLL checkout there: ROLL's env "
                       "workers import agentbridge's env manager")
        return ray_submit_script(self.python(), environment, [
            f"# {draft.spec.resources.nodes} node(s) x {gpus} GPU(s): device_mapping spans all of them "
            f"(num_gpus_per_node={gpus})",
        ], worker_env(), 'ROLL_HOME="${ROLL_HOME:-}" bash launch.sh "$@"',
            carries="(AGENTBRIDGE_RUN_DIR=$RUN_DIR) to every worker, the env managers recording episodes among them",
            ray_init="No key of ROLL's own ray.init (the platform's env vars: RAY_*, VLLM_*, NCCL_*, ...) is among "
                     "them (Ray refuses a Job that sets one)")



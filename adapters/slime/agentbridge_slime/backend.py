"""The slime backend: capabilities, spec checks, compile to a job directory, validate, launch, conformance."""

from __future__ import annotations

from typing import Any

import yaml

from agentbridge import adapter as kit
from agentbridge.adapter import Job, Problem, Report, backend_python
from agentbridge.adapter.scripts import (
    latest_checkpoint_lines,
    ray_submit_script,
    worker_env,
)
from agentbridge.adapter.training import trainer_launch_lines
from agentbridge.spec import Spec
from agentbridge_slime import SLIME_COMMIT, SLIME_PIN, SLIME_REPO, __version__
from agentbridge_slime.config import (
    ALGORITHMS,
    ASYNC_WHY,
    CONFIG_NAME,
    CUSTOM_CONFIG,
    GROUPED,
    NOTES,
    SIZING_OPTIONS,
    SIZING_WHY_NOT,
    WHY_NOT,
    SlimeOptions,
    custom_config,
    entry,
    gpus_per_node,
    job_config,
    one_step_off,
    options,
    recipe_refusals,
)
from agentbridge_slime.data import task_row


class SlimeBackend(kit.Adapter):
    """Compiles a spec into a slime job (``train.py``'s flags) whose generate function is agentbridge's driver."""

    name, label, version = "slime", "slime", __version__
    module = "slime"  # what must import for this backend to run here (a checkout on PYTHONPATH: not on PyPI)
    algorithms, why_not, grouped, options_model = ALGORITHMS, WHY_NOT, frozenset(GROUPED), SlimeOptions
    recipe_why_not = {"loss_agg": {"seq_mean_token_sum": "slime has no pg-loss reducer summing each sample's "
                                                         "tokens"},
                      "scale_advantages": {"batch": "slime's grpo advantage divides by the group's std or by nothing "
                                           "(--disable-grpo-std-normalization); --normalize-advantages whitens "
                                           "afterwards, which is not the same"},
                      "rollout": {"async": ASYNC_WHY, "async+partial": ASYNC_WHY}}
    sizing_options, sizing_why_not = SIZING_OPTIONS, SIZING_WHY_NOT
    epochs_why_not = "slime trains each rollout once: it has no epochs flag"
    lora_why_not = "slime trains every parameter with Megatron: it has no LoRA"
    validator, conformance_module = "agentbridge_slime.validate", "agentbridge_slime.conformance"
    # what the rollout conformance records of slime's default job do not hold (None), and why; any other None fails
    rollout_not_held = {"token_rewards": "slime's training data keeps one reward per sample, no per-token rewards"}
    config_file = CONFIG_NAME
    control_note = gpu_trainer = True
    config_header = (f"# slime ({SLIME_PIN}) train.py flags of this job, without '--'; true: a bare switch. "
                     "launch.sh passes them\n# (python -m agentbridge_slime.args); ${ROOT}, ${MODEL}, ${RUN_DIR}, "
                     "${LOAD} and ${REF_LOAD} are filled in there.\n")

    # the KL and rollout settings slime cannot honour: they depend on the algorithm and the job's GPUs
    config_refusals = staticmethod(recipe_refusals)
    gpus_per_node = staticmethod(gpus_per_node)  # recorded in the manifest

    # slime is source only (PyPI `slime` is another project): no recipe installs it
    environment = kit.EnvironmentRecipe.from_checkout("slime", "agentbridge-slime", SLIME_REPO, SLIME_COMMIT)
    capability_fields = {
        "async_rollout": True, "scale_out": "Ray cluster: ray job submit (Megatron actors, SGLang engines behind "
                                            "slime's router)", "verified_upstream": f"{SLIME_REPO}@{SLIME_COMMIT}",
        "notes": [*NOTES, "training needs GPUs and Megatron-LM; the generate function, rollout path and validation "
                  "run on CPU", "images: not wired (the generate function sends SGLang token ids only)",
                  f"not on the package index: verified against {SLIME_PIN} (adapters/slime/README.md)"]}

    def spec_problems(self, spec: Spec) -> list[Problem]:
        problems = []
        if one_step_off(spec) and spec.backend.name == self.name and spec.backend.options.get("colocate") is True:
            problems.append(Problem("backend.options.colocate", "must be false with algorithm.rollout one_step_off: "
                                    "slime's train_async.py asserts not args.colocate"))
        if spec.agent.sampling.top_p != 1.0:
            problems.append(Problem("agent.sampling.top_p", "must be 1.0 on slime: below 1 slime trains on the "
                                    "engine's top-p nucleus ids (rollout_top_p_token_ids), which agentbridge's driver "
                                    "does not keep"))
        if spec.agent.sampling.temperature <= 0:
            problems.append(Problem("agent.sampling.temperature", "must be > 0 on slime (its --rollout-temperature "
                                    "check: greedy decoding is no RL policy)"))
        return problems

    task_row = staticmethod(task_row)  # data/train.jsonl and data/eval.jsonl rows

    def job_config(self, draft: kit.Draft) -> dict[str, Any]:
        return job_config(draft.spec)

    def write_files(self, draft: kit.Draft) -> None:
        out = draft.out
        (out / CUSTOM_CONFIG).write_text("# slime's --custom-config-path: slime sets these keys on its args; the "
                                         "generate function reads the spec from here\n"
                                         + yaml.safe_dump(custom_config(draft.spec), sort_keys=False))

    def manifest_extra(self, draft: kit.Draft) -> dict[str, Any]:
        return {"upstream": f"{SLIME_REPO}@{SLIME_COMMIT}"}

    def validate(self, job: Job) -> Report:
        """slime's own argument parsing and ``slime_validate_args`` on the job, where slime imports (here, or the
        interpreter ``AGENTBRIDGE_SLIME_PYTHON`` names, with a slime checkout on its ``PYTHONPATH``)."""
        if backend_python(self.name, self.module) is None:
            return Report(ok=False, problems=[Problem(self.name, (
                f"slime does not import here and no slime environment was found; slime is not on the package "
                f"index: set AGENTBRIDGE_SLIME_PYTHON to a python with agentbridge-slime[cpu] and a checkout of "
                f"{SLIME_PIN} on PYTHONPATH (adapters/slime/README.md)"))])
        return super().validate(job)

    def compile_notes(self, draft: kit.Draft) -> list[str]:
        """What the slime job does differently from the spec (kept in the manifest and at the top of launch.sh)."""
        spec = draft.spec
        notes = []
        if spec.algorithm.name == "dapo":
            notes.append("algorithm.name dapo: clip 0.2/0.28, token-level loss and slime's dynamic-sampling filter; no "
                         "overlong shaping")
        if one_step_off(spec):
            flags = draft.config
            notes.append(f"algorithm.rollout one_step_off: slime's train_async.py (rollout n+1 is generated with the "
                         f"weights of step n-1 while step n trains), not colocated: the actor on "
                         f"{flags.get('actor-num-nodes')} x {flags.get('actor-num-gpus-per-node')} GPU(s), SGLang "
                         f"on {flags.get('rollout-num-gpus')}")
        if options(spec)["model_script"] is None:
            notes.append("backend.options.model_script is not set: Megatron needs the model's architecture flags; "
                         "set it to one of slime's scripts/models/*.sh (e.g. qwen2.5-3B), or MODEL_ARGS_FILE to such a "
                         "file")
        return notes

    def launch_lines(self, draft: kit.Draft) -> list[str]:
        spec = draft.spec
        script = options(spec)["model_script"]
        models = {"@SLIME_DIR@": "SLIME_DIR"}
        default = kit.shell_quote(f"@SLIME_DIR@/scripts/models/{script}.sh", models) if script else "''"
        download = "import sys; from huggingface_hub import snapshot_download as d; print(d(sys.argv[1]))"
        return trainer_launch_lines(spec, self.python(), [
            "# Run slime's train.py with agentbridge's generate function on this machine (it needs GPUs and "
            "Megatron-LM).",
            f"# SLIME_DIR: a checkout of {SLIME_REPO} (this adapter was verified against {SLIME_COMMIT[:7]});",
            "# MEGATRON_DIR: the Megatron-LM checkout slime's docker/ pins. ROOT: where the job's files are read from.",
        ], [
            "# --hf-checkpoint is a local directory: slime copies its config and tokenizer into every --save-hf model",
            f'if [ ! -d "$MODEL" ]; then MODEL="$("$PYTHON" -c {kit.shell_quote(download)} "$MODEL")"; fi',
            'export PYTHONPATH="$SLIME_DIR${MEGATRON_DIR:+:$MEGATRON_DIR}${PYTHONPATH:+:$PYTHONPATH}"',
            "# MODEL_ARGS: Megatron's architecture flags for the model, from one of slime's scripts/models/*.sh",
            f'if [ -z "${{MODEL_ARGS_FILE:-}}" ]; then MODEL_ARGS_FILE={default}; fi',
            "MODEL_ARGS=()",
            'if [ -n "$MODEL_ARGS_FILE" ]; then source "$MODEL_ARGS_FILE"; fi',
            "# LOAD: $RUN_DIR/checkpoints when it holds a Megatron checkpoint (a relaunch resumes there), else the "
            "model's",
            "# HF weights; REF_LOAD: the model (python -m agentbridge_slime.args says how; LOAD / REF_LOAD set win)",
            'mapfile -d "" ARGS < <("$PYTHON" -m agentbridge_slime.args "$ROOT" --model "$MODEL" \\',
            '  --run-dir "$RUN_DIR" --load "${LOAD:-}" --ref-load "${REF_LOAD:-}")',
            '[ "${#ARGS[@]}" -gt 0 ] || { echo "launch.sh: agentbridge_slime.args gave no arguments" >&2; exit 1; }',
            f'"$PYTHON" "$SLIME_DIR/{entry(spec)}" "${{MODEL_ARGS[@]}}" "${{ARGS[@]}}" "$@"',
        ], [
            "# the trained model: the latest --save-hf model ($RUN_DIR/hf/rollout_N, N the last rollout saved)",
            *latest_checkpoint_lines("TRAINED", '"$RUN_DIR"/hf/rollout_*', "_"),
        ], module="agentbridge_slime", label="slime",
            setup=[f"SLIME_DIR=\"${{SLIME_DIR:?set SLIME_DIR to a checkout of {SLIME_REPO}}}\""],
            env=["# slime's step metrics (--use-tensorboard), read back into metrics.jsonl after the trainer",
                 'export TENSORBOARD_DIR="${TENSORBOARD_DIR:-$RUN_DIR/tensorboard/slime}"'])

    def submit_lines(self, draft: kit.Draft) -> list[str]:
        environment = (f"the slime environment (agentbridge, agentbridge-slime, the spec's plugins; {SLIME_REPO} at "
                       "SLIME_DIR and Megatron-LM at MEGATRON_DIR): slime's rollout manager imports agentbridge's "
                       "generate function there")
        return ray_submit_script(self.python(), environment, [
            f"SLIME_DIR=\"${{SLIME_DIR:?set SLIME_DIR to the checkout of {SLIME_REPO} on the nodes}}\"",
            f"# {draft.spec.resources.nodes} node(s) x {gpus_per_node(draft.spec)} GPU(s): --actor-num-nodes / "
            "--actor-num-gpus-per-node in slime_job.yaml",
            "# what slime's own launcher gives its job (slime/utils/external_utils/command_utils.py): NCCL's NVLink",
            "# SHARP when this node's GPUs have NVLink, no proxy for the local addresses, Ray without uvloop",
            "NVLINKS=$( (nvidia-smi topo -m 2>/dev/null || true) | { grep -o 'NV[0-9][0-9]*' || true; } | wc -l)",
            'if [ "$NVLINKS" -gt 0 ]; then HAS_NVLINK=1; else HAS_NVLINK=0; fi',
        ], {"PYTHONPATH": "$SLIME_DIR${MEGATRON_DIR:+:$MEGATRON_DIR}", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
            "NCCL_NVLS_ENABLE": "$HAS_NVLINK", "RAY_USE_UVLOOP": "0",
            "no_proxy": "localhost,127.0.0.1${no_proxy:+,$no_proxy}",
            "TENSORBOARD_DIR": "$RUN_DIR/tensorboard/slime", **worker_env()},
            'SLIME_DIR="$SLIME_DIR" MEGATRON_DIR="${MEGATRON_DIR:-}" bash launch.sh "$@"',
            carries="to every worker (slime's TensorBoard writers, the generate function's episodes)",
            ray_init="slime calls no ray.init of its own, so no key here collides with one")



"""The veRL backend: capabilities, spec checks, compile to a job directory, validate, launch."""

from __future__ import annotations

from typing import Any

import yaml

from agentbridge import adapter as kit
from agentbridge.adapter import Problem
from agentbridge.adapter.scripts import override_words, ray_submit_script
from agentbridge.adapter.training import launch_lines, tracker_env_lines, tracker_environment
from agentbridge.spec import Spec
from agentbridge_verl import VERL_PIN, __version__
from agentbridge_verl.algorithms import ALGORITHMS, GROUPED, NOTES
from agentbridge_verl.config import (
    AGENT_LOOP_FILE,
    CONFIG_NAME,
    OPTIONS,
    REWARD_FILE,
    REWARD_MODEL_ENGINE,
    ROLLOUT_ENGINES,
    SIZING_OPTIONS,
    agent_loop_entries,
    agent_workers,
    job_config,
    n_gpus_per_node,
    options,
    path_overrides,
    ray_worker_env_overrides,
    run_format_env,
    served_reward_model,
)
from agentbridge_verl.data import write_parquet


def _v1_trainer(spec: Spec) -> bool:
    """Whether the job runs veRL's V1 trainer (its default) after ``backend.overrides``."""
    overrides = spec.backend.overrides
    trainer = overrides.get("trainer")
    value = overrides.get("trainer.use_v1", trainer.get("use_v1", True) if isinstance(trainer, dict) else True)
    return bool(value)


class VerlBackend(kit.Adapter):
    """Compiles a spec into a veRL 0.9.1 PPO-trainer job whose agent loop runs agentbridge's driver."""

    name, label, module, version, pin = "verl", "veRL", "verl", __version__, VERL_PIN
    algorithms, grouped, known_options = ALGORITHMS, frozenset(GROUPED), dict.fromkeys(OPTIONS)
    recipe_why_not = {
        "scale_advantages": {"batch": "veRL 0.9.1's grpo advantage divides by the group's std or by nothing "
                                      "(norm_adv_by_std_in_grpo); it has no batch std"},
        "rollout": {
            "one_step_off": "veRL 0.9.1 runs one-step-off-policy training only from its experimental recipe entry "
                            "(verl.experimental.one_step_off_policy.main_ppo), not main_ppo's V1 trainer the job runs",
            "async": "veRL 0.9.1's async V1 trainer (trainer.v1.trainer_mode colocate_async) always resumes a "
                     "generation a weight update cuts, with the new weights: set rollout.partial true"},
    }
    lora_why_not = None
    sizing_options = SIZING_OPTIONS
    validator, conformance_module = "agentbridge_verl.validate", "agentbridge_verl.conformance"
    algorithm_probe = "agentbridge_verl.algorithm_probe"  # the training-math conformance
    step_probe = "agentbridge_verl.step_probe"
    config_file = f"{CONFIG_NAME}.yaml"
    control_note = gpu_trainer = True
    config_header = f"# veRL {VERL_PIN} trainer config for this job (extends ppo_trainer); paths come from launch.sh\n"

    # veRL pins an older transformers than agentbridge[hf]: agentbridge goes in without its extra. veRL builds its
    # FSDP actor with flash_attention_2 but lists flash-attn only under its `fsdp` extra; it compiles against the
    # installed torch, so it goes in after, without build isolation
    environment = kit.EnvironmentRecipe(adapter="agentbridge-verl", core_extra=None, gpu=(f"verl[vllm]=={VERL_PIN}",),
                                        gpu_post=(("--no-build-isolation", "flash-attn==2.8.3"),))
    capability_fields = dict(
        multimodal=True, tool_images=True, async_rollout=True, turn_credit=True, serves_reward_models=True,
        verified_in_ci=True,
        scale_out="Ray cluster: ray job submit (trainer.nnodes x n_gpus_per_node), vLLM/SGLang rollout servers, "
                  "vLLM reward-model servers on a GPU pool of their own",
        notes=[*NOTES, "images: Qwen2-VL / Qwen2.5-VL / Qwen3-VL processors only (veRL binds no others)",
               f"training needs GPUs (veRL {VERL_PIN} has no CPU trainer); the agent loop and validation run on CPU"])

    def recipe_refusals(self, spec: Spec) -> dict[str, str]:
        refusals = super().recipe_refusals(spec)
        if spec.model.lora is not None and spec.model.lora.dropout > 0:
            refusals["model.lora"] = "veRL 0.9.1's FSDP LoRA has no dropout key (peft's 0 applies): set dropout 0"
        return refusals

    def spec_problems(self, spec: Spec) -> list[Problem]:
        problems = []
        engine = options(spec)["rollout_engine"]
        if engine not in ROLLOUT_ENGINES:
            problems.append(Problem("backend.options.rollout_engine",
                                    f"must be one of {', '.join(ROLLOUT_ENGINES)}, got {engine!r}"))
        problems += _reward_model_problems(spec)
        if spec.algorithm.credit == "turn" and not _v1_trainer(spec):
            problems.append(Problem("algorithm.credit", "turn credit reaches veRL through its V1 trainer's "
                                    "per-token rm_scores; backend.overrides turns the V1 trainer off "
                                    "(trainer.use_v1), whose legacy trainer keeps one reward per episode"))
        rollout = spec.algorithm.rollout
        if rollout is not None and rollout.mode != "sync" and not _v1_trainer(spec):
            problems.append(Problem("algorithm.rollout", f"rollout mode {rollout.mode} is veRL's V1 trainer's "
                                    "trainer.v1.trainer_mode; backend.overrides turns the V1 trainer off "
                                    "(trainer.use_v1), whose legacy trainer is synchronous"))
        return problems

    def write_data(self, draft: kit.Draft) -> None:
        spec = draft.spec
        for split, tasks in (("train", draft.train), ("eval", draft.evals)):
            if tasks:
                write_parquet(draft.out / "data" / f"{split}.parquet", tasks, split, spec)

    def job_config(self, draft: kit.Draft) -> dict[str, Any]:
        return job_config(draft.spec)

    def write_files(self, draft: kit.Draft) -> None:
        out = draft.out
        (out / AGENT_LOOP_FILE).write_text(yaml.safe_dump(agent_loop_entries(), sort_keys=False))
        (out / REWARD_FILE).write_text(
            '"""veRL reward entry: the driver scored each episode inside agentbridge\'s agent loop."""\n\n'
            "from agentbridge_verl.reward import compute_score  # noqa: F401\n")

    def manifest_extra(self, draft: kit.Draft) -> dict[str, Any]:
        spec = draft.spec
        return {"gpus": {"nnodes": spec.resources.nodes, "n_gpus_per_node": n_gpus_per_node(spec)}}

    def compile_notes(self, draft: kit.Draft) -> list[str]:
        """What the veRL job does differently from the spec (kept in the manifest and at the top of launch.sh), besides
        leaving out another backend's options."""
        spec = draft.spec
        notes = []
        workers, wanted = agent_workers(spec), int(options(spec)["agent_workers"])
        if workers != wanted:
            episodes = spec.algorithm.batch_size * spec.algorithm.group_size
            notes.append(f"backend.options.agent_workers: {workers} agent-loop workers, not {wanted}: veRL splits a "
                         f"step's {episodes} episodes into equal chunks, one per worker")
        if served_reward_model(spec) is not None:
            opts = options(spec)
            notes.append(f"core/reward_model serve: backend: veRL serves it with {REWARD_MODEL_ENGINE} on a GPU pool "
                         f"of its own, {opts['reward_model_nodes']} node(s) x "
                         f"{opts['reward_model_gpus_per_node']} GPU(s) beside the trainer's "
                         "(backend.options.reward_model_*), and the agent loop scores through veRL's reward router")
        return notes

    def launch_lines(self, draft: kit.Draft) -> list[str]:
        spec, has_eval = draft.spec, draft.has_eval
        paths = override_words(path_overrides(spec, "$ROOT", "$MODEL", has_eval=has_eval, reward_model="$RM_MODEL"))
        step = '$(cat "$RUN_DIR/checkpoints/latest_checkpointed_iteration.txt" 2>/dev/null || echo none)'
        before, after = launch_lines(spec, job="$ROOT", run_dir="$RUN_DIR",
                                     checkpoint=f"$RUN_DIR/checkpoints/global_step_{step}/actor/huggingface")
        trackers = tuple(tracker_environment(spec, "$RUN_DIR", "verl")) if spec.logging.enabled() else ()
        workers = [f'  "{o}" \\' for o in ray_worker_env_overrides(run_format_env("$RUN_DIR", trackers))]
        return [
            "# Run veRL's PPO trainer with agentbridge's agent loop on this machine (veRL's trainer needs GPUs).",
            "# ROOT: where the job's files are read from (. under a Ray job's working_dir, see submit.sh).",
            kit.default_line("PYTHON", self.python()),
            'ROOT="${ROOT:-$JOB}"',
            *_model_lines(spec),
            kit.default_line("RUN_DIR", f"runs/{spec.name}"),
            "# the run format every backend writes: veRL's step metrics (file logger) and the driver's episodes",
            "# absolute: every rank resolves the checkpoint directory in its own working directory otherwise",
            'mkdir -p "$RUN_DIR" && RUN_DIR="$(cd "$RUN_DIR" && pwd)"',
            'export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$RUN_DIR/verl_metrics.jsonl}"',
            'export AGENTBRIDGE_RUN_DIR="$RUN_DIR"',
            "# first: the Ray cluster the job uses ($RAY_ADDRESS) must have the nodes it asks for (veRL waits forever)",
            '"$PYTHON" -m agentbridge_verl.cluster "$JOB" "$@"',
            *tracker_env_lines(spec, "$RUN_DIR", "verl"),
            *before,
            "# the run format's variables reach the TaskRunner and every worker through the runtime env main_ppo",
            "# gives ray.init: on a Ray cluster already running (submit.sh, $RAY_ADDRESS) they inherit nothing from",
            "# this shell",
            f"\"$PYTHON\" -m verl.trainer.main_ppo --config-path \"$JOB\" --config-name {CONFIG_NAME} \\",
            f"  {paths} \\",
            *workers,
            '  trainer.default_local_dir="$RUN_DIR/checkpoints" "$@"',
            'if [ -f "$VERL_FILE_LOGGER_PATH" ]; then "$PYTHON" -m agentbridge_verl.run_metrics "$RUN_DIR" || true',
            'else echo "agentbridge: no veRL metrics at $VERL_FILE_LOGGER_PATH; metrics.jsonl is not written" >&2',
            "fi",
            *after,
        ]

    def submit_lines(self, draft: kit.Draft) -> list[str]:
        spec = draft.spec
        nodes, gpus = spec.resources.nodes, n_gpus_per_node(spec)
        environment = (f"the veRL environment (verl=={VERL_PIN}, agentbridge, agentbridge-verl and the spec's "
                       "plugins): Ray runs all workers with it, so agentbridge imports everywhere. It is main_ppo's "
                       "ray_kwargs.ray_init.runtime_env.py_executable, not the Job's: Ray refuses a Job runtime env "
                       "that shares a key with the one main_ppo passes to ray.init (py_executable is always among "
                       "them)")
        before = ["# the job's entrypoint runs launch.sh on the node Ray picks: agentbridge's phases "
                  "(AGENTBRIDGE_PHASES)", "# around the trainer, whose ray.init hands the run format's variables "
                  "(AGENTBRIDGE_RUN_DIR=$RUN_DIR, ...)", "# to every worker"]
        return ray_submit_script(
            self.python(), environment, [f"NNODES=\"${{NNODES:-{nodes}}}\"",
                                         f"GPUS_PER_NODE=\"${{GPUS_PER_NODE:-{gpus}}}\""],
            {"AGENTBRIDGE_JOB": '$(basename "$JOB")'}, "\\",
            "  AGENTBRIDGE_PHASES=\"${AGENTBRIDGE_PHASES:-on}\" bash launch.sh \\",
            "  trainer.nnodes=\"$NNODES\" trainer.n_gpus_per_node=\"$GPUS_PER_NODE\" \\",
            "  \"ray_kwargs.ray_init.runtime_env.py_executable=$PYTHON\" \"$@\"", before_submit=before)


REWARD_MODEL_OPTIONS = {"reward_model_nodes": int, "reward_model_gpus_per_node": int,
                        "reward_model_tensor_parallel_size": int, "reward_model_gpu_memory_utilization": float}

def _reward_model_problems(spec: Spec) -> list[Problem]:
    """The served reward model's options: counts of at least 1, a memory share in (0, 1], a pool that holds one
    server at least (veRL's ``RewardModelManager`` asserts it when the trainer starts)."""
    try:
        if served_reward_model(spec) is None:
            return []
    except ValueError:  # bad reward args: the spec checks say so, with where
        return []
    opts, problems = options(spec), []
    for key, kind in REWARD_MODEL_OPTIONS.items():
        value = opts[key]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
            0 < value <= 1 if kind is float else isinstance(value, int) and value >= 1)
        if not ok:
            want = "a number in (0, 1]" if kind is float else "an integer >= 1"
            problems.append(Problem(f"backend.options.{key}", f"must be {want}, got {value!r}"))
    if problems:
        return problems
    pool = opts["reward_model_nodes"] * opts["reward_model_gpus_per_node"]
    if pool < opts["reward_model_tensor_parallel_size"]:
        problems.append(Problem("backend.options.reward_model_tensor_parallel_size", f"one reward-model server "
                                f"needs {opts['reward_model_tensor_parallel_size']} GPUs, its pool has {pool} "
                                "(reward_model_nodes x reward_model_gpus_per_node)"))
    return problems


def _model_lines(spec: Spec) -> list[str]:
    """``MODEL`` (and ``RM_MODEL``, a served reward model): a builtin is built (cached) by agentbridge; anything
    else goes to veRL verbatim."""
    served = served_reward_model(spec)
    models = [("MODEL", spec.model.path), *([("RM_MODEL", served.path)] if served is not None else [])]
    return [kit.model_line(var, path) for var, path in models]



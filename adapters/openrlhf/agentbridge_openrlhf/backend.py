"""The OpenRLHF backend: capabilities, spec checks, compile to a job directory, validate, launch."""

from __future__ import annotations

import difflib
import json
import shlex
from pathlib import Path
from typing import Any

from agentbridge import adapter as kit
from agentbridge.adapter import Job, JobError, Problem, write_jsonl
from agentbridge.adapter.models import is_vlm
from agentbridge.adapter.rollout import prompt_messages
from agentbridge.adapter.scripts import runtime_env_json_lines, worker_env
from agentbridge.adapter.training import launch_lines
from agentbridge.spec import Spec
from agentbridge_openrlhf import __version__
from agentbridge_openrlhf.config import (
    AGENT_FILE,
    ALGORITHMS,
    GROUP_ESTIMATORS,
    NOTES,
    OPENRLHF_PIN,
    OPTIONS,
    OWNED,
    ROLLOUT_OPTIONS,
    SIZING_OPTIONS,
    WHY_NOT,
    applies,
    describe_demand,
    estimator,
    flag_getter,
    flag_values,
    gpu_demand,
    openrlhf_flags,
    options,
    overrides,
    to_argv,
    world_size,
)
from agentbridge_openrlhf.reward_server import DEFAULT_PORT, SERVER_MODULE, served, server_argv

AGENT_SOURCE = '''"""OpenRLHF agent file for spec {name!r}, written by agentbridge-openrlhf {version}.

OpenRLHF {pin} loads it through --train.agent_func_path and calls AgentExecutor() once per vLLM engine actor;
each execute() runs one agentbridge episode (spec.yaml beside this file) with that engine as the policy.
"""

from pathlib import Path

from agentbridge_openrlhf.rollout import AgentbridgeExecutor


class AgentExecutor(AgentbridgeExecutor):
    def __init__(self) -> None:
        super().__init__(Path(__file__).resolve().with_name("spec.yaml"))
'''


def is_multimodal(spec: Spec, rows: list[dict[str, Any]]) -> bool:
    """Whether the job feeds images (dataset images, a VLM builtin, or a declared image budget)."""
    return (any(r.get("images") for r in rows) or is_vlm(spec.model.path)
            or int(options(spec)["max_images_per_prompt"]) > 0)


def dataset_row(spec: Spec, task: Any) -> dict[str, Any]:
    """One OpenRLHF prompt row: chat messages (for OpenRLHF's logs), the task as a JSON-string label.

    A task's first screenshots (``task.data["images"]``: paths, URLs or base64/data-URI strings) go to the
    dataset's image key, where OpenRLHF loads them and hands them to the executor; the label keeps the rest of the
    task (the executor puts the references back), and the user message gets one ``<image>`` tag per image, which
    OpenRLHF renders as the model's image placeholder.
    """
    data = dict(task.data) if isinstance(task.data, dict) else {}
    images = data.pop("images", None) or []
    label = {**task.to_dict(), "data": data}
    messages = prompt_messages(spec.agent.system_prompt, "<image>" * len(images) + task.prompt)
    row: dict[str, Any] = {"prompt": messages, "label": json.dumps(label, ensure_ascii=False),
                           "datasource": spec.name}
    if images:
        row["images"] = list(images)
    return row


LOSS_AGG_MODES = "OpenRLHF 0.11.2's --actor.loss_agg_mode is token-mean or seq-mean-token-mean"
# openrlhf/models/loss.py (0.11.2): PolicyLoss.__init__ raises for clip at the seq level; its seq gate is the ratio's
# geometric mean (masked_mean of the log-ratio) and a kept token keeps its own weight (coef = token_is)
IS_SEQUENCE_CLIP = ("OpenRLHF 0.11.2's PolicyLoss clamps token weights only: is_correction_mode clip needs "
                    "is_correction_level token")
IS_SEQUENCE_MASK = ("OpenRLHF 0.11.2's seq level gates a sequence on its weights' geometric mean, not their product, "
                    "and weights a kept token by its own ratio")
IS_GSPO = ("OpenRLHF 0.11.2's gspo loss puts the engine's log-probs into its sequence ratio instead of weighting "
           "the token losses")
TRACKERS_NOTE = ("logging: OpenRLHF writes TensorBoard events to <run>/tensorboard; after its trainer they become "
                 "the run's metrics.jsonl, and every tracker of the spec (tensorboard, wandb, mlflow, trackio; "
                 "its package installed in the OpenRLHF environment) gets those rows then, not live")


class OpenRLHFBackend(kit.Adapter):
    """Compiles a spec into an OpenRLHF 0.11.2 PPO-family job whose agent executor runs agentbridge's driver."""

    name, label, version, pin = "openrlhf", "OpenRLHF", __version__, OPENRLHF_PIN
    module = "openrlhf"  # the conformance suite runs in the environment where this imports
    algorithms, why_not, known_options = ALGORITHMS, WHY_NOT, dict.fromkeys(OPTIONS)
    recipe_why_not = {"loss_agg": {"seq_mean_token_sum": LOSS_AGG_MODES, "seq_mean_token_sum_norm": LOSS_AGG_MODES},
                      "scale_advantages": {"batch": "OpenRLHF 0.11.2's group estimators divide by the group's std "
                                           "(group_norm) or by nothing (dr_grpo); reinforce_baseline whitens per "
                                           "token over the batch, which is not the same"},
                      "is_correction": {"sequence_truncate": IS_SEQUENCE_CLIP, "sequence_mask": IS_SEQUENCE_MASK}}
    sizing_options = SIZING_OPTIONS
    lora_why_not = ("OpenRLHF 0.11.2 trains the adapter but sends vLLM the unmerged PEFT parameter names, which its "
                    "weight sync cannot load (OpenRLHF#1349)")
    validator, conformance_module = "agentbridge_openrlhf.validate", "agentbridge_openrlhf.conformance"
    algorithm_probe = "agentbridge_openrlhf.algorithm_probe"  # the training-math conformance
    step_probe = "agentbridge_openrlhf.step_probe"
    # what the rollout conformance records of OpenRLHF's default job do not hold (None), and why; any other None fails
    rollout_not_held = {"logprobs": "with backend.options.is_correction off the job asks vLLM for no log-probs and "
                                    "keeps no rollout_log_probs (the actor recomputes them); checked under "
                                    "backend.options.is_correction=token"}
    notes_in_submit = True

    # OpenRLHF's DeepSpeed and flash-attn cannot build without CUDA: on CPU it goes in without its dependencies and
    # the adapter's `cpu` extra brings the part that runs on CPU
    environment = kit.EnvironmentRecipe(adapter="agentbridge-openrlhf", cpu_extra="cpu",
                                        cpu_pre=(("--no-deps", f"openrlhf=={OPENRLHF_PIN}"),),
                                        gpu=(f"openrlhf[vllm]=={OPENRLHF_PIN}",))
    capability_fields = dict(
        multimodal=True, tool_images=True, async_rollout=True, serves_reward_models=True, verified_in_ci=True,
        scale_out="Ray cluster (ray job submit); vLLM engines + DeepSpeed actor/ref(/critic), GPUs required",
        notes=[f"{algo}: {why}" for algo, why in WHY_NOT.items()] + NOTES + [
            "rewards are sequence-level: OpenRLHF puts the episode reward on the last generated token and "
            "broadcasts the advantage over every generated token (no per-turn credit)",
            "images: a task's first ones (task.data['images']) travel in the dataset's images key, later "
            "ones come from the environment; every image in order reaches vLLM and pixel_values",
            TRACKERS_NOTE])

    def recipe_refusals(self, spec: Spec) -> dict[str, str]:
        refusals = super().recipe_refusals(spec)
        agg = spec.algorithm.loss_agg
        if spec.algorithm.name == "gspo" and agg is not None and agg != "seq_mean_token_mean":
            refusals["algorithm.loss_agg"] = "OpenRLHF's gspo policy loss is always seq-mean-token-mean"
        if spec.algorithm.name == "gspo" and spec.algorithm.is_correction is not None:
            refusals.setdefault("algorithm.is_correction", IS_GSPO)
        return refusals

    def spec_problems(self, spec: Spec) -> list[Problem]:
        problems = []
        opts = options(spec)
        flags = openrlhf_flags()
        est = estimator(spec)
        choices = flags["algo.advantage.estimator"]["choices"]
        if est not in choices:
            problems.append(Problem("backend.options.estimator", f"'{est}' is not an OpenRLHF {OPENRLHF_PIN} "
                                                                 f"estimator ({', '.join(choices)})"))
        if est in GROUP_ESTIMATORS and spec.algorithm.group_size < 2:
            problems.append(Problem("algorithm.group_size", f"{spec.algorithm.name} ({est}) normalises within a "
                                    "group of samples per prompt; use group_size >= 2"))
        if opts["is_correction"] not in ("off", "token", "seq"):
            problems.append(Problem("backend.options.is_correction", "must be off, token or seq"))
        mine = spec.backend.options if applies(spec) else {}
        if spec.algorithm.is_correction is not None and mine.get("is_correction", "off") != "off":
            problems.append(Problem("backend.options.is_correction", "algorithm.is_correction sets OpenRLHF's "
                                                                     "is_correction flags; remove one of the two"))
        twins = [k for k in ROLLOUT_OPTIONS if k in mine]
        if spec.algorithm.rollout is not None and twins:
            problems.append(Problem(f"backend.options.{twins[0]}", "algorithm.rollout sets OpenRLHF's async flags; "
                                    f"remove backend.options.{' and backend.options.'.join(twins)}"))
        demand = gpu_demand(flag_getter(flag_values(spec, model="", job="", out="", train_size=1, eval_size=0)))
        if spec.resources.gpus_per_node > 0 and sum(demand.values()) > world_size(spec):
            problems.append(Problem("resources", f"the OpenRLHF job asks for {describe_demand(demand)}, more than "
                                    f"{spec.resources.nodes}x{spec.resources.gpus_per_node} = {world_size(spec)}; "
                                    "its placement groups would wait forever"))
        if spec.agent.sampling.top_k:
            problems.append(Problem("agent.sampling.top_k", f"OpenRLHF {OPENRLHF_PIN} has no top_k flag (it samples "
                                                            "with top_k=-1); remove it"))
        if is_vlm(spec.model.path) or int(opts["max_images_per_prompt"]) > 0:
            if est == "gae":
                problems.append(Problem("algorithm.name", "OpenRLHF has no critic for vision-language models; "
                                                          "use grpo, rloo, reinforce_pp or dr_grpo"))
            if opts["packing_samples"]:
                problems.append(Problem("backend.options.packing_samples", "OpenRLHF cannot pack VLM samples"))
        for key in overrides(spec):
            name = key.removeprefix("--")
            if name in OWNED:
                problems.append(Problem(f"backend.overrides.{key}", "set by the adapter; the agentbridge executor "
                                                                    "depends on it"))
            elif name not in flags:
                near = difflib.get_close_matches(name, list(flags), n=1)
                hint = f"; did you mean --{near[0]}?" if near else ""
                problems.append(Problem(f"backend.overrides.{key}", f"not an OpenRLHF {OPENRLHF_PIN} flag (every "
                                                                    f"flag was renamed in 0.10.2){hint}"))
        return problems

    def write_data(self, draft: kit.Draft) -> None:
        """``data/*.jsonl`` of OpenRLHF prompt rows; ``facts``: their sizes and images, for the flags."""
        spec = draft.spec
        train = [dataset_row(spec, t) for t in draft.train]
        evals = [dataset_row(spec, t) for t in draft.evals]
        if not train:
            raise ValueError("data.train: no tasks")
        write_jsonl(draft.out / "data" / "train.jsonl", train)
        if evals:
            write_jsonl(draft.out / "data" / "eval.jsonl", evals)
        draft.facts = {"train_size": len(train), "eval_size": len(evals),
                       "multimodal": is_multimodal(spec, train + evals),
                       "first_images": max((len(r.get("images") or []) for r in train + evals), default=0)}

    def job_config(self, draft: kit.Draft) -> dict[str, Any]:
        """``train_ppo_ray``'s flag values (``@MODEL@``, ``@JOB@``, ``@OUT@``: the scripts' variables)."""
        return flag_values(draft.spec, model="@MODEL@", job="@JOB@", out="@OUT@", **draft.facts)

    def write_config(self, draft: kit.Draft) -> None:
        """No config file: the flags become the scripts' ``ARGS`` (``facts["argv"]``)."""
        draft.facts["argv"] = to_argv(draft.config)

    def write_files(self, draft: kit.Draft) -> None:
        (draft.out / AGENT_FILE).write_text(AGENT_SOURCE.format(name=draft.spec.name, version=__version__,
                                                                pin=OPENRLHF_PIN))

    def compile_notes(self, draft: kit.Draft) -> list[str]:
        spec, values = draft.spec, draft.config
        ws = spec.algorithm.warm_start
        warm = NOTES[-1] if ws is not None and ws.control else None  # "algorithm.warm_start.control is not run"
        trackers = [t for t in spec.logging.enabled() if t != "tensorboard"]
        late = (f"logging.{' and logging.'.join(trackers)}: fed after OpenRLHF's trainer ends, from its TensorBoard "
                "events, not live (launch.sh, and submit.sh's Ray job, run agentbridge_openrlhf.run_metrics)"
                ) if trackers else None
        filtering = None
        if values.get("algo.dynamic_filtering_enable"):
            prompts = int(values["data.max_samples"]) * int(values["train.num_episodes"])
            filtering = (f"algo.dynamic_filtering_enable: OpenRLHF replaces every dropped group with a new prompt and "
                         f"stops when its {prompts} prompts are used up, so the job runs about "
                         f"{spec.algorithm.steps} x (the share of groups kept) steps, not {spec.algorithm.steps}; "
                         "more data (data.train.size) or more passes (train.num_episodes) give it more")
        passes = None
        samples, episodes = int(values["data.max_samples"]), int(values["train.num_episodes"])
        train_size, algo = int(draft.facts["train_size"]), spec.algorithm
        if samples < min(train_size, algo.steps * algo.batch_size):  # exact steps cost prompts: say how many
            passes = (f"algorithm.steps: OpenRLHF makes whole passes over its prompts, so {algo.steps} steps of "
                      f"{algo.batch_size} prompts run as {episodes} passes over {samples} of the {train_size} training "
                      "tasks; a step count with more divisors uses more of them")
        draft.facts["not_run"] = [warm] if warm else []
        return [n for n in (warm, late, filtering, passes) if n]

    def launch_lines(self, draft: kit.Draft) -> list[str]:
        return _launch_lines(draft.spec, draft.facts["argv"])

    def submit_lines(self, draft: kit.Draft) -> list[str]:
        return _submit_lines(draft.spec, draft.facts["argv"])

    def manifest_extra(self, draft: kit.Draft) -> dict[str, Any]:
        rm = served(draft.spec)
        return {"command": ["python", "-m", "openrlhf.cli.train_ppo_ray", *draft.facts["argv"]],
                "reward_server": None if rm is None else ["python", "-m", SERVER_MODULE, *server_argv(rm, draft.spec)],
                "multimodal": draft.facts["multimodal"], "not_run": draft.facts["not_run"]}

    def launch(self, job: Job, runner: Any = None, run_dir: Path | None = None,
               extra_args: list[str] | None = None) -> Path:
        """Run ``launch.sh`` (OpenRLHF starts a local Ray cluster); needs GPUs for vLLM and DeepSpeed."""
        if kit.job_spec(job).resources.gpus_per_node == 0:
            raise JobError("OpenRLHF needs GPUs (vLLM engines, DeepSpeed actor); set resources.gpus_per_node and "
                           f"run {job.path / 'launch.sh'} or submit.sh on a GPU machine")
        return kit.launch_job(job, runner, run_dir, self, label="OpenRLHF", run_dir_variable="OUT",
                              extra_args=extra_args or ())


def _args_block(argv: list[str], *, job_variable: bool) -> list[str]:
    """``ARGS=(...)``, one flag per line; every value quoted, its ``@MODEL@``/``@OUT@`` (and ``@JOB@`` when
    ``job_variable``, else the working directory ``.``) the script's variables."""
    variables = {"@MODEL@": "MODEL", "@OUT@": "OUT", **({"@JOB@": "JOB"} if job_variable else {})}
    lines, i = ["ARGS=("], 0
    while i < len(argv):
        flag, values = argv[i], []
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            value = argv[i] if job_variable else argv[i].replace("@JOB@", ".")
            values.append(kit.shell_quote(value, variables))
            i += 1
        lines.append("  " + " ".join([kit.shell_quote(flag), *values]))
    return [*lines, ")"]


def _model_line(spec: Spec, path: str | None = None, var: str = "MODEL") -> str:
    return kit.model_line(var, spec.model.path if path is None else path)


def _reward_server_lines(spec: Spec, *, start: bool) -> list[str]:
    """The reward-model server's lines: ``RM_ARGS`` (serve_rm's flags, the manifest's ``reward_server``, which
    ``agentbridge check`` validates with serve_rm's own parser), then in ``launch.sh`` (``start``) start it unless
    ``AGENTBRIDGE_REWARD_MODEL_URL`` names one already, wait for it and stop it on exit; in ``submit.sh`` require
    that address."""
    rm = served(spec)
    if rm is None:
        return []
    lines = ["# the reward model (core/reward_model, serve: backend) is served by OpenRLHF's own serve_rm",
             _model_line(spec, rm.path, "RM"),
             "RM_ARGS=(" + " ".join(shlex.quote(a) if a != "@RM@" else '"$RM"' for a in server_argv(rm, spec)) + ")"]
    if not start:
        return [*lines, 'if [ "${1:-}" != "--print-args" ]; then',
                '  case "${AGENTBRIDGE_REWARD_MODEL_URL:-}" in http://*|https://*) ;; *) echo "submit.sh: start '
                f'the reward model on a cluster node (python -m {SERVER_MODULE} ${{RM_ARGS[*]}} --port PORT) and set '
                'AGENTBRIDGE_REWARD_MODEL_URL to its http://HOST:PORT/get_reward" >&2; exit 2 ;; esac',
                "fi"]
    return [*lines, 'if [ "${1:-}" != "--print-args" ] && [ -z "${AGENTBRIDGE_REWARD_MODEL_URL:-}" ]; then',
            f'  RM_PORT="${{RM_PORT:-{DEFAULT_PORT}}}"',
            f'  "$PYTHON" -m "${{RM_SERVER_MODULE:-{SERVER_MODULE}}}" "${{RM_ARGS[@]}}" --port "$RM_PORT" \\',
            '    > "$OUT/reward_model_server.log" 2>&1 &',
            "  RM_PID=$!",
            "  trap 'kill \"$RM_PID\" 2>/dev/null || true' EXIT",
            '  export AGENTBRIDGE_REWARD_MODEL_URL="$("$PYTHON" -m agentbridge_openrlhf.reward_server url "$RM_PORT")"',
            '  "$PYTHON" -m agentbridge_openrlhf.reward_server wait "$AGENTBRIDGE_REWARD_MODEL_URL" --pid "$RM_PID" \\',
            '    --log "$OUT/reward_model_server.log"',
            "fi"]


def _launch_lines(spec: Spec, argv: list[str]) -> list[str]:
    before, after = launch_lines(spec, job="$JOB", run_dir="$OUT", checkpoint="$OUT/ckpt")
    if before:  # not for --print-args, which only prints the trainer's command line
        before = [before[0], 'if [ "${1:-}" != "--print-args" ]; then', *(f"  {line}" for line in before[1:]), "fi"]
    return [
        f"# OpenRLHF {OPENRLHF_PIN} job for spec '{spec.name}' (agentbridge-openrlhf {__version__}), run here:",
        "# OpenRLHF starts a local Ray cluster, or joins $RAY_ADDRESS (a multi-node job goes to its cluster with",
        "# submit.sh); vLLM and DeepSpeed need GPUs. `launch.sh --print-args` prints the exact argv (NUL-separated),",
        "# which `agentbridge check` validates with OpenRLHF's own parser.",
        'PYTHON="${PYTHON:-python3}"',
        _model_line(spec),
        kit.default_line("OUT", f"runs/{spec.name}"),
        "# first: the Ray cluster the job uses ($RAY_ADDRESS, else this machine) must have the GPUs it asks for;",
        "# then the run format every backend writes: the executor records the driver's episodes in $OUT",
        'if [ "${1:-}" != "--print-args" ]; then',
        '  MODEL="$MODEL" "$PYTHON" -m agentbridge_openrlhf.cluster "$JOB" "$@"',
        '  mkdir -p "$OUT"',
        '  export AGENTBRIDGE_RUN_DIR="$(cd "$OUT" && pwd)"',
        "  # a Ray cluster already running starts OpenRLHF's workers with none of this shell's variables, and",
        "  # OpenRLHF's ray.init passes on only its own: they see AGENTBRIDGE_RUN_DIR from a Job's runtime env alone",
        '  if [ -n "${RAY_ADDRESS:-}" ]; then',
        '    echo "agentbridge: OpenRLHF joins the Ray cluster at $RAY_ADDRESS: its workers record episodes in'
        ' $AGENTBRIDGE_RUN_DIR only if the Ray job sets AGENTBRIDGE_RUN_DIR (submit.sh does)" >&2',
        "  fi",
        "fi",
        *before,
        *_reward_server_lines(spec, start=True),
        *_args_block(argv, job_variable=True),
        'if [ "${1:-}" = "--print-args" ]; then printf \'%s\\0\' "${ARGS[@]}"; exit 0; fi',
        'mkdir -p "$OUT"',
        '"$PYTHON" -m openrlhf.cli.train_ppo_ray "${ARGS[@]}" "$@"',
        "# the run format every backend writes: OpenRLHF's TensorBoard scalars as metrics.jsonl (the run report's RL",
        "# section), fed to the spec's trackers",
        '[ ! -d "$OUT/tensorboard" ] || "$PYTHON" -m agentbridge_openrlhf.run_metrics "$OUT" --job "$JOB" || true',
        *after,
    ]


def _submit_lines(spec: Spec, argv: list[str]) -> list[str]:
    """``submit.sh``: submits itself as the Ray job's entrypoint (``AGENTBRIDGE_RAY_JOB=1``), which then runs what
    ``launch.sh`` runs around the trainer: the cluster check, agentbridge's phases and the metrics conversion. The
    Job's runtime env carries the run format's variables to every worker; no key of OpenRLHF's own ``ray.init``
    (``TOKENIZERS_PARALLELISM``, ``NCCL_DEBUG``, ``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS``: Ray refuses a Job that sets
    any of them, and ``train()`` takes their values from the entrypoint's environment)."""
    before, after = launch_lines(spec, job="$JOB", run_dir="$OUT", checkpoint="$OUT/ckpt")
    env_vars = worker_env("$OUT")  # OUT is absolute: where the executor records the episodes
    if served(spec) is not None:  # the workers call the reward-model server: its address travels in the Job's env
        env_vars["AGENTBRIDGE_REWARD_MODEL_URL"] = "$AGENTBRIDGE_REWARD_MODEL_URL"
    runtime_env = runtime_env_json_lines("RUNTIME_ENV", env_vars, excludes=["runs/", "out/", "__pycache__/"])
    in_job = 'if [ "${AGENTBRIDGE_RAY_JOB:-}" = 1 ]; then'
    return [
        f"# The same job as a Ray job on a GPU cluster (OpenRLHF {OPENRLHF_PIN}). The job directory is the",
        "# working_dir, so paths are relative to it. Every node needs agentbridge-openrlhf[backend] and the spec's",
        "# plugins installed; PYTHON is that environment's interpreter on the node Ray runs the entrypoint on, and",
        "# MODEL a path the cluster nodes can read. OUT (the run directory: the trained model, checkpoints,",
        "# TensorBoard events, episodes.jsonl, the evaluation arms) is written by the actors wherever they run: an",
        "# absolute path on storage all nodes share (a relative one lands in a node's copy of the working_dir).",
        'if [ "${1:-}" != "--print-args" ]; then',
        "  case \"${OUT:-}\" in /*) ;; *) echo \"submit.sh: set OUT to an absolute directory on storage every node "
        "shares (now: '${OUT:-}')\" >&2; exit 2 ;; esac",
        "fi",
        'RAY_ADDRESS="${RAY_ADDRESS:-http://127.0.0.1:8265}"',
        'PYTHON="${PYTHON:-python3}"',
        _model_line(spec),
        'OUT="${OUT:-out}"  # what --print-args shows without one',
        *_reward_server_lines(spec, start=False),
        "# in the Ray job (this script is its entrypoint, AGENTBRIDGE_RAY_JOB=1, on the node Ray picks): first the",
        "# cluster must have the GPUs the job asks for (OpenRLHF waits forever), then agentbridge's phases as in",
        "# launch.sh: held-out eval and the warm start (on that node) before the trainer",
        in_job,
        '  MODEL="$MODEL" "$PYTHON" -m agentbridge_openrlhf.cluster "$JOB" "$@"',
        '  mkdir -p "$OUT"',
        *(f"  {line}" for line in before),
        "fi",
        *_args_block(argv, job_variable=False),
        'if [ "${1:-}" = "--print-args" ]; then printf \'%s\\0\' "${ARGS[@]}"; exit 0; fi',
        'if [ "${AGENTBRIDGE_RAY_JOB:-}" != 1 ]; then',
        "  # the run format's variables (AGENTBRIDGE_RUN_DIR=$OUT) reach every worker in the Job's runtime env:",
        "  # workers on a running cluster inherit nothing from the entrypoint's shell",
        *(f"  {line}" for line in runtime_env),
        '  exec ray job submit --address "$RAY_ADDRESS" --working-dir "$JOB" --runtime-env-json "$RUNTIME_ENV" \\',
        '    -- env AGENTBRIDGE_RAY_JOB=1 TOKENIZERS_PARALLELISM=false PYTHON="$PYTHON" MODEL="$MODEL" OUT="$OUT" \\',
        '    AGENTBRIDGE_PHASES="${AGENTBRIDGE_PHASES:-on}" bash submit.sh "$@"',
        "fi",
        '"$PYTHON" -m openrlhf.cli.train_ppo_ray "${ARGS[@]}" "$@"',
        "# the run format every backend writes: OpenRLHF's TensorBoard scalars as metrics.jsonl, then the trained",
        "# model's held-out eval, as launch.sh does",
        '[ ! -d "$OUT/tensorboard" ] || "$PYTHON" -m agentbridge_openrlhf.run_metrics "$OUT" --job "$JOB" || true',
        *after,
    ]

"""The agent spec as pydantic models. Unknown keys are errors everywhere.

Every number is bounded: a float field is a ``FiniteFloat`` (no ``.inf``/``.nan``) with a range, an integer field an
``Int`` with a range, a seed a ``Seed`` (0 .. 2**32-1, what numpy and the backends accept); ``true``/``false`` are not
numbers. The ranges are far beyond any real run and only refuse values that would poison one (a learning rate of
1e300, ``steps: 1e12``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from agentbridge.spec.recipe import (
    GROUP_NORMALISED,
    RECIPE_FIELDS,
    IsLevel,
    IsMode,
    KlEstimator,
    KlIn,
    LossAgg,
    RolloutMode,
    ScaleAdvantages,
    clip_range,
    preset_clip,
)
from agentbridge.spec.sizing import SIZING_FIELDS

ALGORITHMS = ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "ppo")

MAX_SEED = 2**32 - 1           # numpy's seed range; torch, vLLM and the backends take it too
MAX_TOKENS = 1 << 20           # a token budget (prompt, response, turn)
MAX_TURNS = 1000
MAX_STEPS = 1_000_000          # optimizer steps (RL or SFT), step intervals
MAX_BATCH = 65_536             # prompts (or SFT rows) per step
MAX_GROUP = 1024               # samples per prompt
MAX_TASKS = 10_000_000         # tasks in a data split, warm-start demonstrations
MAX_EPOCHS = 1000
MAX_UPDATE_EPOCHS = 100        # PPO epochs over one step's episodes
MAX_LORA_RANK = 4096
MAX_LORA_ALPHA = 1e5
MAX_MINUTES = 7 * 24 * 60      # a week
MAX_LR = 1.0
MAX_KL = 10.0
MAX_CLIP = 10.0                 # a ratio clip bound: the ratio stays within [1 - low, 1 + high]
MAX_DUAL_CLIP = 1000.0
MAX_ENTROPY_COEF = 1.0
MAX_GRAD_NORM = 1e4
MAX_IS_CAP = 1e4               # an importance-sampling weight's cap
MAX_OVERLONG_PENALTY = 100.0
MAX_STALENESS = 1000           # policy versions an asynchronous rollout may lag behind
MAX_TEMPERATURE = 10.0
MAX_TOP_K = 1_000_000          # above every vocabulary
MAX_WEIGHT = 1000.0            # a reward weight, either sign
MAX_NODES = 4096
MAX_GPUS_PER_NODE = 64


def _not_bool(value: Any) -> Any:
    """Refuse ``true``/``false`` where a number belongs (pydantic would read them as 1 and 0)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


def _integer(value: Any) -> Any:
    """Not a boolean; a whole float (``1e12``) as the int it is, so that its bounds, not its size, are reported."""
    value = _not_bool(value)
    return int(value) if isinstance(value, float) and value.is_integer() else value


FiniteFloat = Annotated[float, AllowInfNan(False), BeforeValidator(_not_bool)]
"""A float that is a finite number (not ``.inf``, ``.nan`` or ``1e999``) and not a boolean; bound it per field."""
Int = Annotated[int, BeforeValidator(_integer)]
"""An integer that is not a boolean; bound it per field."""
Fraction = Annotated[FiniteFloat, Field(ge=0, le=1)]
Seed = Annotated[Int, Field(ge=0, le=MAX_SEED, description=f"0 .. {MAX_SEED}")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraSpec(_Strict):
    """Train a low-rank adapter instead of every weight; the reference policy is the base model without it."""

    rank: Int = Field(gt=0, le=MAX_LORA_RANK, description="The adapter's rank r")
    alpha: Annotated[FiniteFloat, Field(gt=0, le=MAX_LORA_ALPHA)] | None = Field(
        None, description="Scaling alpha (the update is alpha / r times the low-rank product); null: 2 x rank")
    dropout: Fraction = Field(0.0, description="Dropout on the adapter's input")
    target_modules: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | Literal[
            "all-linear"] = Field(
        "all-linear", description="The modules that get an adapter: all-linear, or their names (q_proj, v_proj, ...)")

    def scaling_alpha(self) -> float:
        """alpha, or its default, 2 x rank."""
        return self.alpha if self.alpha is not None else 2.0 * self.rank


class ModelSpec(_Strict):
    path: str = Field("builtin:tiny", description="Local model dir, hub id, or builtin:tiny / builtin:tiny-qwen2.5")
    chat_template: Annotated[str, Field(min_length=1)] | None = Field(
        None, description="Override: a template file path or a vendored name")
    tool_call_format: str = Field("hermes", description="Id of the tool-call parser")
    lora: LoraSpec | None = Field(None, description="Train a LoRA adapter instead of every weight (null: full "
                                  "fine-tuning)")

    @model_serializer(mode="wrap")
    def _omit_unset_lora(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Without LoRA the model dumps and hashes as it did before the field existed."""
        data: dict[str, Any] = handler(self)
        if data.get("lora", 0) is None:
            del data["lora"]
        return data

    @field_validator("path")
    @classmethod
    def _path(cls, path: str) -> str:
        if not path.strip():
            raise ValueError("must not be empty (give a local model directory, a hub id like Qwen/Qwen2.5-0.5B or "
                             "builtin:tiny)")
        if "\0" in path:
            raise ValueError("holds a NUL character; no path or hub id does")
        local = Path(os.path.normpath(os.path.expanduser(path)))
        if local.anchor and local == Path(local.anchor):
            raise ValueError(f"'{path}' is the filesystem root, not a model directory")
        return path


class SamplingSpec(_Strict):
    temperature: FiniteFloat = Field(1.0, ge=0, le=MAX_TEMPERATURE,
                                     description="Sampling temperature of RL's rollouts (evaluation is greedy)")
    top_p: FiniteFloat = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling: 1.0 keeps every token")
    top_k: Int = Field(0, ge=0, le=MAX_TOP_K, description="0: no top-k cut")


class AgentSpec(_Strict):
    system_prompt: str | None = Field(None, description="The system message of every episode (null: none)")
    max_turns: Int = Field(6, gt=0, le=MAX_TURNS, description="Assistant turns per episode at most")
    max_prompt_tokens: Int = Field(1024, gt=0, le=MAX_TOKENS, description="Budget for the first prompt's tokens")
    max_response_tokens: Int = Field(2048, gt=0, le=MAX_TOKENS, description="Budget for everything after the prompt")
    max_tokens_per_turn: Int = Field(256, gt=0, le=MAX_TOKENS, description="Tokens one assistant turn may generate")
    sampling: SamplingSpec = Field(default_factory=SamplingSpec, description="How RL's rollouts sample")
    max_error_rate: Fraction = Field(0.5, description=(
        "Stop training when more than this share of recent episodes ended in error (a broken environment, tool "
        "server or template), instead of training on reward-0 episodes; 1 never stops"))

    @model_validator(mode="after")
    def _budgets(self) -> AgentSpec:
        if self.max_tokens_per_turn > self.max_response_tokens:
            raise ValueError(f"max_tokens_per_turn ({self.max_tokens_per_turn}) must not exceed "
                             f"max_response_tokens ({self.max_response_tokens})")
        return self


class EnvironmentSpec(_Strict):
    id: str = Field(description="A registered environment id (agentbridge plugins list)")
    args: dict[str, Any] = Field(default_factory=dict, description="The environment's typed arguments")
    record: Annotated[str, Field(min_length=1)] | None = Field(
        None, description="Record every environment output, tool schema and reward score of every episode into this "
        "directory (one JSONL file per process), keyed by task and action history, for replay (null: no recording)")
    replay: Annotated[str, Field(min_length=1)] | None = Field(
        None, description="Serve environment outputs and reward scores from this recorded directory instead of the "
        "live environment and rewards; an action history not recorded is an error naming the step (null: live)")

    @field_validator("record", "replay")
    @classmethod
    def _directory(cls, directory: str | None, info: ValidationInfo) -> str | None:
        if directory is None:
            return None
        if "\0" in directory:
            raise ValueError("holds a NUL character; no directory does")
        path = Path(directory)
        if info.field_name == "replay" and not path.is_dir():
            raise ValueError(f"no such directory '{directory}' (record one with agentbridge rollout SPEC --record DIR)")
        if path.exists() and not path.is_dir():
            raise ValueError(f"'{directory}' is a file, not a directory")
        return directory

    @model_validator(mode="after")
    def _record_or_replay(self) -> EnvironmentSpec:
        if self.record is not None and self.replay is not None:
            raise ValueError("give at most one of 'record' and 'replay': a replayed episode has nothing new to record")
        return self

    @model_serializer(mode="wrap")
    def _omit_unset_recording(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Without recording or replay the environment dumps and hashes as it did before the fields existed."""
        data: dict[str, Any] = handler(self)
        for key in ("record", "replay"):
            if data.get(key, 0) is None:
                del data[key]
        return data


class RewardSpec(_Strict):
    id: str = Field(description="A registered reward id")
    weight: FiniteFloat = Field(1.0, ge=-MAX_WEIGHT, le=MAX_WEIGHT,
                                description=f"A finite number (not .nan or .inf), at most {MAX_WEIGHT:g} either way")
    args: dict[str, Any] = Field(default_factory=dict, description="The reward's typed arguments")
    per: Literal["episode", "turn"] = Field(
        "episode", description="episode: scores the whole episode once; turn: a process reward, scoring each "
        "assistant turn (the episode up to that turn and what the environment answered it)")


class DatasetSpec(_Strict):
    """Either a registered generator (``id`` + ``split``/``size``/``seed``) or a JSONL file (``path``)."""

    id: str | None = Field(None, description="A registered dataset id (or give path)")
    path: str | None = Field(None, description="A JSONL file of tasks (or give id)")
    split: str = Field("train", description="The dataset's split: train, eval or dev draw disjoint tasks")
    size: Annotated[Int, Field(gt=0, le=MAX_TASKS)] | None = Field(
        None, description="Tasks to draw (null: the dataset's default)")
    seed: Seed = 0
    args: dict[str, Any] = Field(default_factory=dict, description="The dataset's typed arguments")

    @model_validator(mode="after")
    def _one_source(self) -> DatasetSpec:
        if (self.id is None) == (self.path is None):
            raise ValueError("give exactly one of 'id' (a registered dataset) or 'path' (a JSONL file)")
        return self


class DataSpec(_Strict):
    train: DatasetSpec = Field(description="The tasks RL trains on")
    eval: DatasetSpec | None = Field(None, description="Held-out tasks: every evaluation arm is scored on them")
    dev: DatasetSpec | None = Field(None, description="Tasks the warm start checks to decide when to stop; "
                                                      "distinct from train and eval")


class WarmStartSpec(_Strict):
    """Supervised warm start on the environment's scripted demonstrations before RL.

    It stops when greedy success on ``data.dev`` reaches ``target`` (checked every ``dev_every`` steps, and five
    times as often once it passes a quarter of the target) and every task group (``Task.data["group"]``) reaches
    ``group_floor``, or at ``max_steps`` (default: ``epochs`` passes over the demonstrations) or ``max_minutes``,
    whichever comes first.
    """

    demos: Int = Field(2000, gt=0, le=MAX_TASKS, description="Scripted demonstrations to train on")
    epochs: Int = Field(1, gt=0, le=MAX_EPOCHS, description="Passes over the demonstrations (without max_steps)")
    lr: FiniteFloat = Field(1e-3, gt=0, le=MAX_LR, description="The warm start's learning rate")
    batch_size: Int = Field(32, gt=0, le=MAX_BATCH, description="Demonstrations per SFT step")
    target: Annotated[FiniteFloat, Field(gt=0, le=1)] | None = Field(
        None, description="Stop at this dev success (needs data.dev)")
    group_floor: Fraction | None = Field(None, description="With target: every task group's dev success "
                                         "must reach this too, so RL starts with each skill present")
    dev_every: Int = Field(50, gt=0, le=MAX_STEPS, description="SFT steps between dev checks")
    max_steps: Annotated[Int, Field(gt=0, le=MAX_STEPS)] | None = Field(
        None, description="Step cap (default: epochs over the demonstrations)")
    max_minutes: Annotated[FiniteFloat, Field(gt=0, le=MAX_MINUTES)] | None = Field(None, description="Time cap")
    control: bool = Field(False, description="Also train an SFT-only control arm for RL's wall time and "
                                             "compare it with RL on the held-out tasks")
    control_steps: Annotated[Int, Field(gt=0, le=MAX_STEPS)] | None = Field(
        None, description="The control's budget in SFT steps instead of RL's wall time (the same on any machine)")


class ClipSpec(_Strict):
    """PPO's clip of the policy ratio to [1 - low, 1 + high]; ``dual``: dual-clip PPO, a negative advantage's loss
    capped at ``dual`` times the advantage. Each null: the algorithm preset's value."""

    low: Annotated[FiniteFloat, Field(gt=0, lt=1)] | None = Field(
        None, description="The ratio's lower clip is 1 - low (null: the preset's, 0.2; gspo 3e-4)")
    high: Annotated[FiniteFloat, Field(gt=0, le=MAX_CLIP)] | None = Field(
        None, description="The ratio's upper clip is 1 + high, clip-higher when above low (null: the preset's, 0.2; "
        "dapo 0.28, gspo 4e-4)")
    dual: Annotated[FiniteFloat, Field(gt=1, le=MAX_DUAL_CLIP)] | None = Field(
        None, description="Dual-clip constant, above 1 + high (null: the preset's behaviour, which is dual-clip 3.0 "
        "on veRL and none elsewhere)")


class IsCorrectionSpec(_Strict):
    """Importance-sampling correction for the gap between the inference engine's log-probs (those the rollout
    sampled with) and the trainer's log-probs of the same tokens before the update: each token's policy loss is
    multiplied by the weight ``w = exp(trainer - engine)`` (per token, or per sequence: the exponential of the
    sequence's summed difference), which is cut to ``cap`` (truncate: TIS) or set to 0 above it (mask: MIS)."""

    level: IsLevel = Field("token", description="token: each token's own weight; sequence: one weight per "
                           "sequence, the product of its tokens'")
    mode: IsMode = Field("truncate", description="truncate: a weight above cap becomes cap; mask: a weight above cap "
                         "becomes 0 (the token or sequence leaves the loss)")
    cap: FiniteFloat = Field(2.0, gt=1, le=MAX_IS_CAP, description="The weight's upper bound")


class OverlongSpec(_Strict):
    """What RL does with episodes that ran out of response tokens (``agent.max_response_tokens``), applied by
    agentbridge's episode runner, the same on every backend (evaluation is not shaped)."""

    mask_truncated: bool = Field(False, description="An episode cut by a token budget (finish_reason length) "
                                 "keeps its reward in its group's statistics but none of its tokens are trained on")
    buffer: Annotated[Int, Field(gt=0, le=MAX_TOKENS)] | None = Field(
        None, description="DAPO's soft overlong penalty: an episode whose generated tokens pass max_response_tokens "
        "- buffer loses penalty x (its excess / buffer), the full penalty at max_response_tokens; null: no penalty. "
        "Its reward component is 'overlong'")
    penalty: FiniteFloat = Field(1.0, gt=0, le=MAX_OVERLONG_PENALTY,
                                 description="The soft penalty's size at max_response_tokens")


class RolloutModeSpec(_Strict):
    """How rollouts and updates overlap."""

    mode: RolloutMode = Field("sync", description="sync: each step's episodes come from the current policy; "
                              "one_step_off: step n trains on episodes generated by the policy of step n-1 while "
                              "step n+1's are generated; async: generation runs ahead of training, up to "
                              "max_staleness policy versions")
    max_staleness: Annotated[Int, Field(gt=0, le=MAX_STALENESS)] | None = Field(
        None, description="async only: the most policy versions an episode's policy may lag behind the one it "
        "trains (null: the backend's default)")
    partial: bool = Field(False, description="async only: an episode interrupted by a weight update continues with "
                          "the new weights instead of starting again")

    @model_validator(mode="after")
    def _async_only(self) -> RolloutModeSpec:
        if self.mode != "async" and (self.max_staleness is not None or self.partial):
            raise ValueError(f"max_staleness and partial apply to mode async, not {self.mode}")
        return self


class AlgorithmSpec(_Strict):
    name: Literal["grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "ppo"] = Field(
        "grpo", description="The algorithm preset; the recipe fields below override its values")
    group_size: Int = Field(8, gt=0, le=MAX_GROUP, description="Samples per prompt")
    batch_size: Int = Field(64, gt=0, le=MAX_BATCH, description="Prompts per step; each is sampled group_size times")
    lr: FiniteFloat = Field(1e-6, gt=0, le=MAX_LR, description="The actor's learning rate")
    kl_coef: FiniteFloat = Field(0.0, ge=0, le=MAX_KL, description="KL coefficient against the reference policy "
                                 "(0: no reference model)")
    steps: Int = Field(200, gt=0, le=MAX_STEPS, description="RL steps")
    warmup_steps: Int = Field(0, ge=0, le=MAX_STEPS, description="Learning-rate warmup steps")
    warm_start: WarmStartSpec | None = None
    credit: Literal["episode", "turn"] = Field(
        "episode", description="episode: the episode's reward on its last token; turn: each turn's process reward "
        "(the environment's step reward and per-turn rewards) on the turn's last token, the rest on the last token, "
        "where the backend trains on per-token rewards (summed into one per episode where it does not, with a note)")
    clip: ClipSpec | None = Field(None, description="Policy-ratio clipping (null: the preset's)")
    entropy_coef: Annotated[FiniteFloat, Field(ge=0, le=MAX_ENTROPY_COEF)] | None = Field(
        None, description="Entropy bonus: the loss minus this times the policy's mean token entropy (null: the "
        "preset's, 0)")
    max_grad_norm: Annotated[FiniteFloat, Field(gt=0, le=MAX_GRAD_NORM)] | None = Field(
        None, description="Clip the actor's gradient to this global norm (null: the preset's, 1.0)")
    loss_agg: LossAgg | None = Field(
        None, description="How token losses make the step's loss: token_mean (over every token of the step), "
        "seq_mean_token_mean (each sequence's token mean, then the mean over sequences), seq_mean_token_sum (each "
        "sequence's token sum, then the mean), seq_mean_token_sum_norm (Dr. GRPO: the token sum divided by "
        "agent.max_response_tokens, then the mean); null: the preset's")
    scale_advantages: ScaleAdvantages | None = Field(
        None, description="How a group-normalised preset (grpo, dr_grpo, dapo, gspo) scales each reward minus its "
        "group's mean: group (divided by the group's reward std), batch (by the std over the step's rewards), none "
        "(not divided); null: the preset's (none for dr_grpo, group for the others)")
    epochs: Annotated[Int, Field(gt=0, le=MAX_UPDATE_EPOCHS)] | None = Field(
        None, description="Passes of updates over each step's episodes (PPO epochs; null: the preset's, 1)")
    mini_batches: Annotated[Int, Field(gt=0, le=MAX_BATCH)] | None = Field(
        None, description="Optimizer steps per pass, each over batch_size / mini_batches prompts' episodes (null: the "
        "preset's, 1: one update per step)")
    kl_estimator: KlEstimator | None = Field(
        None, description="How the KL to the reference policy is estimated per token from log-ratio d = log pi - "
        "log pi_ref: k1 (d), k2 (d^2 / 2), k3 (exp(-d) + d - 1, the low-variance estimator); needs kl_coef > 0; "
        "null: the preset's (k3 in the loss; k1 in the reward for reinforce_pp and ppo)")
    kl_in: KlIn | None = Field(
        None, description="Where the KL term goes: loss (kl_coef x the aggregated estimate added to the policy loss) "
        "or reward (kl_coef x each token's estimate subtracted from the reward before advantages); needs kl_coef "
        "> 0; null: the preset's (reward for reinforce_pp and ppo, loss for the others)")
    is_correction: IsCorrectionSpec | None = Field(
        None, description="Importance-sampling correction between the inference engine's and the trainer's "
        "log-probs (null: none)")
    overlong: OverlongSpec | None = Field(None, description="Masking and soft penalty for episodes that run out "
                                          "of response tokens (null: neither)")
    rollout: RolloutModeSpec | None = Field(None, description="Synchronous, one-step off-policy or asynchronous "
                                            "rollouts (null: sync)")

    @model_validator(mode="after")
    def _recipe_fits(self) -> AlgorithmSpec:
        if self.scale_advantages is not None and self.name not in GROUP_NORMALISED:
            raise ValueError(f"scale_advantages applies to the group-normalised presets ({', '.join(GROUP_NORMALISED)})"
                             f"; {self.name} sets its own advantage")
        if self.mini_batches is not None and self.batch_size % self.mini_batches:
            raise ValueError(f"mini_batches ({self.mini_batches}) must divide batch_size ({self.batch_size}): each "
                             "mini-batch holds whole groups")
        for knob in ("kl_estimator", "kl_in"):
            if getattr(self, knob) is not None and self.kl_coef == 0:
                raise ValueError(f"{knob} needs kl_coef > 0: with kl_coef 0 there is no KL term")
        return self

    @model_validator(mode="after")
    def _dual_above_high(self) -> AlgorithmSpec:
        dual = None if self.clip is None else self.clip.dual
        high = (clip_range(self) or preset_clip(self.name))[1]
        if dual is not None and dual <= 1 + high:
            raise ValueError(f"clip.dual ({dual:g}) must exceed 1 + clip.high ({1 + high:g}): dual-clip caps the loss "
                             "of a ratio already past the upper clip")
        return self

    @model_serializer(mode="wrap")
    def _omit_unset_recipe(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Recipe fields left null are not written, so a spec without them dumps and hashes as it did before."""
        data: dict[str, Any] = handler(self)
        for key in RECIPE_FIELDS:
            if data.get(key, 0) is None:
                del data[key]
        return data


class ResourcesSpec(_Strict):
    """Machines and GPUs, and how the trainer fits the model on them. The sizing fields (``micro_batch_size``,
    ``gradient_checkpointing``, ``save_steps``, ``save_total_limit``) are null by default, the backend's own default;
    a set one is written to each backend's own setting, and a backend without one refuses the spec naming the
    backends that can (``agentbridge.spec.sizing``)."""

    nodes: Int = Field(1, gt=0, le=MAX_NODES, description="Machines the job runs on")
    gpus_per_node: Int = Field(0, ge=0, le=MAX_GPUS_PER_NODE, description="GPUs per machine (0: CPU)")
    micro_batch_size: Annotated[Int, Field(gt=0, le=MAX_BATCH)] | None = Field(
        None, description="Sequences each GPU puts through one forward and backward pass of training; the gradients "
        "of a step's micro-batches accumulate into its updates, so it sets memory, not the algorithm (null: the "
        "backend's default)")
    gradient_checkpointing: bool | None = Field(
        None, description="Recompute each layer's activations in the backward pass instead of keeping them "
        "(activation checkpointing, Megatron's full recompute): far less activation memory for about a third more "
        "training compute (null: the backend's default)")
    save_steps: Annotated[Int, Field(gt=0, le=MAX_STEPS)] | None = Field(
        None, description="RL steps between checkpoints, one also at the last step: what a relaunched or resumed run "
        "continues from (null: the backend's default)")
    save_total_limit: Annotated[Int, Field(gt=0, le=MAX_STEPS)] | None = Field(
        None, description="Checkpoints kept, the newest; older ones are deleted (null: the backend's default)")

    @model_serializer(mode="wrap")
    def _omit_unset_sizing(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Sizing fields left null are not written, so a spec without them dumps and hashes as it did before."""
        data: dict[str, Any] = handler(self)
        for key in SIZING_FIELDS:
            if data.get(key, 0) is None:
                del data[key]
        return data


class BackendSpec(_Strict):
    name: str = Field("trl", description="The backend this spec trains on by default (--backend overrides it)")
    options: dict[str, Any] = Field(default_factory=dict, description="The backend's adapter options (agentbridge "
                                    "backends lists them); applied only when this is the spec's backend")
    overrides: dict[str, Any] = Field(default_factory=dict, description="The backend's own config keys, dotted, set "
                                      "last and verbatim; applied only when this is the spec's backend")


TRACKERS = ("tensorboard", "wandb", "mlflow", "trackio")  # each an optional extra: pip install 'agentbridge[NAME]'


class LoggingSpec(_Strict):
    """Experiment trackers a run writes to, besides its own ``metrics.jsonl``; each configured in the backend's own
    way (TRL ``report_to``, veRL ``trainer.logger``, OpenRLHF's logger flags) and fed agentbridge's metrics through
    the ``on_metrics`` hook. Files go under the run directory: ``tensorboard/``, ``wandb/`` (offline unless
    ``WANDB_MODE`` says otherwise), ``mlruns/`` (unless ``MLFLOW_TRACKING_URI`` is set), ``trackio/``."""

    tensorboard: bool = Field(False, description="TensorBoard events under the run's tensorboard/")
    wandb: bool = Field(False, description="Weights & Biases (offline unless WANDB_MODE says otherwise)")
    mlflow: bool = Field(False, description="MLflow (mlruns/ unless MLFLOW_TRACKING_URI is set)")
    trackio: bool = Field(False, description="Trackio under the run's trackio/")
    project: str | None = Field(None, description="The trackers' project (null: the spec's name)")

    def enabled(self) -> list[str]:
        return [name for name in TRACKERS if getattr(self, name)]


class Spec(_Strict):
    """One agent: model, agent budgets, environment, tools, rewards, data, algorithm, resources, backend, and the
    trackers its runs log to (``logging``: not part of the spec hash, it does not change what is trained)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="The spec's name: its runs and jobs "
                      "are named after it")
    model: ModelSpec = Field(default_factory=ModelSpec, description="The policy model and its chat format")
    agent: AgentSpec = Field(default_factory=AgentSpec, description="The episode's budgets and sampling")
    environment: EnvironmentSpec = Field(description="Where the agent acts")
    tools: list[str] = Field(default_factory=list, description="Tool ids, each once; only for an environment "
                             "that runs listed tools (a ToolEnvironment)")
    reward: list[RewardSpec] = Field(min_length=1, description="Reward components, summed with their weights")
    data: DataSpec = Field(description="The tasks: train, and optionally eval (held-out) and dev")
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec, description="The RL algorithm and its recipe")
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec, description="Machines and GPUs")
    backend: BackendSpec = Field(default_factory=BackendSpec, description="The backend and its own settings")
    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    seed: Seed = 0

    @field_validator("tools")
    @classmethod
    def _tools_once(cls, tools: list[str]) -> list[str]:
        first: dict[str, int] = {}
        for i, name in enumerate(tools):
            if name in first:
                raise ValueError(f"'{name}' is listed twice (tools[{first[name]}] and tools[{i}])")
            first[name] = i
        return tools

    @model_validator(mode="after")
    def _consistent(self) -> Spec:
        ids = [r.id for r in self.reward]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"reward ids must be unique; repeated: {', '.join(dupes)}")
        ws = self.algorithm.warm_start
        if ws is not None and ws.target is not None and self.data.dev is None:
            raise ValueError("algorithm.warm_start.target needs data.dev: the tasks its dev success is measured on")
        if ws is not None and ws.control and self.data.eval is None:
            raise ValueError("algorithm.warm_start.control needs data.eval: the arms are compared on held-out tasks")
        if ws is not None and ws.control_steps is not None and not ws.control:
            raise ValueError("algorithm.warm_start.control_steps needs algorithm.warm_start.control: true")
        micro, algo = self.resources.micro_batch_size, self.algorithm
        gpus = max(1, self.resources.nodes * self.resources.gpus_per_node)
        share = algo.batch_size * algo.group_size // (algo.mini_batches or 1)
        if micro is not None and share % gpus == 0 and (share // gpus) % micro:
            raise ValueError(f"resources.micro_batch_size ({micro}) must divide each GPU's {share // gpus} episodes "
                             "per update (batch_size x group_size / mini_batches / GPUs): the backends split them "
                             "into whole micro-batches")
        return self

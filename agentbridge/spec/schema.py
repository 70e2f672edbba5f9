"""The agent spec as pydantic models. Unknown keys are errors everywhere."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt, model_validator

ALGORITHMS = ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "ppo")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSpec(_Strict):
    path: str = Field("builtin:tiny", description="Local model dir, hub id, or builtin:tiny / builtin:tiny-qwen2.5")
    chat_template: str | None = Field(None, description="Override: a template file path or a vendored name")
    tool_call_format: str = Field("hermes", description="Id of the tool-call parser")


class SamplingSpec(_Strict):
    temperature: NonNegativeFloat = 1.0
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)


class AgentSpec(_Strict):
    system_prompt: str | None = None
    max_turns: PositiveInt = 6
    max_prompt_tokens: PositiveInt = 1024
    max_response_tokens: PositiveInt = Field(2048, description="Budget for everything after the prompt")
    max_tokens_per_turn: PositiveInt = 256
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    max_error_rate: float = Field(0.5, ge=0, le=1, description=(
        "Stop training when more than this share of recent episodes ended in error (a broken environment, tool "
        "server or template), instead of training on reward-0 episodes; 1 never stops"))

    @model_validator(mode="after")
    def _budgets(self) -> AgentSpec:
        if self.max_tokens_per_turn > self.max_response_tokens:
            raise ValueError(f"max_tokens_per_turn ({self.max_tokens_per_turn}) must not exceed "
                             f"max_response_tokens ({self.max_response_tokens})")
        return self


class EnvironmentSpec(_Strict):
    id: str
    args: dict[str, Any] = Field(default_factory=dict)


class RewardSpec(_Strict):
    id: str
    weight: float = Field(1.0, allow_inf_nan=False, description="A finite number (not .nan or .inf)")
    args: dict[str, Any] = Field(default_factory=dict)
    per: Literal["episode", "turn"] = Field(
        "episode", description="episode: scores the whole episode once; turn: a process reward, scoring each "
        "assistant turn (the episode up to that turn and what the environment answered it)")


class DatasetSpec(_Strict):
    """Either a registered generator (``id`` + ``split``/``size``/``seed``) or a JSONL file (``path``)."""

    id: str | None = None
    path: str | None = None
    split: str = "train"
    size: PositiveInt | None = None
    seed: int = 0
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> DatasetSpec:
        if (self.id is None) == (self.path is None):
            raise ValueError("give exactly one of 'id' (a registered dataset) or 'path' (a JSONL file)")
        return self


class DataSpec(_Strict):
    train: DatasetSpec
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

    demos: PositiveInt = 2000
    epochs: PositiveInt = 1
    lr: float = Field(1e-3, gt=0)
    batch_size: PositiveInt = 32
    target: float | None = Field(None, gt=0, le=1, description="Stop at this dev success (needs data.dev)")
    group_floor: float | None = Field(None, ge=0, le=1, description="With target: every task group's dev success "
                                      "must reach this too, so RL starts with each skill present")
    dev_every: PositiveInt = Field(50, description="SFT steps between dev checks")
    max_steps: PositiveInt | None = Field(None, description="Step cap (default: epochs over the demonstrations)")
    max_minutes: float | None = Field(None, gt=0)
    control: bool = Field(False, description="Also train an SFT-only control arm for RL's wall time and "
                                             "compare it with RL on the held-out tasks")


class AlgorithmSpec(_Strict):
    name: Literal["grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "ppo"] = "grpo"
    group_size: PositiveInt = 8
    batch_size: PositiveInt = Field(64, description="Prompts per step; each is sampled group_size times")
    lr: float = Field(1e-6, gt=0)
    kl_coef: NonNegativeFloat = 0.0
    steps: PositiveInt = 200
    warmup_steps: int = Field(0, ge=0)
    warm_start: WarmStartSpec | None = None
    credit: Literal["episode", "turn"] = Field(
        "episode", description="episode: the episode's reward on its last token; turn: each turn's process reward "
        "(the environment's step reward and per-turn rewards) on the turn's last token, the rest on the last token, "
        "where the backend trains on per-token rewards (summed into one per episode where it does not, with a note)")


class ResourcesSpec(_Strict):
    nodes: PositiveInt = 1
    gpus_per_node: int = Field(0, ge=0)


class BackendSpec(_Strict):
    name: str = "trl"
    options: dict[str, Any] = Field(default_factory=dict)
    overrides: dict[str, Any] = Field(default_factory=dict)


TRACKERS = ("tensorboard", "wandb", "mlflow", "trackio")  # each an optional extra: pip install 'agentbridge[NAME]'


class LoggingSpec(_Strict):
    """Experiment trackers a run writes to, besides its own ``metrics.jsonl``; each configured in the backend's own
    way (TRL ``report_to``, veRL ``trainer.logger``, OpenRLHF's logger flags) and fed agentbridge's metrics through
    the ``on_metrics`` hook. Files go under the run directory: ``tensorboard/``, ``wandb/`` (offline unless
    ``WANDB_MODE`` says otherwise), ``mlruns/`` (unless ``MLFLOW_TRACKING_URI`` is set), ``trackio/``."""

    tensorboard: bool = False
    wandb: bool = False
    mlflow: bool = False
    trackio: bool = False
    project: str | None = None  # the tracker's project (default: the spec's name)

    def enabled(self) -> list[str]:
        return [name for name in TRACKERS if getattr(self, name)]


class Spec(_Strict):
    """One agent: model, agent budgets, environment, tools, rewards, data, algorithm, resources, backend, and the
    trackers its runs log to (``logging``: not part of the spec hash, it does not change what is trained)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    model: ModelSpec = Field(default_factory=ModelSpec)
    agent: AgentSpec = Field(default_factory=AgentSpec)
    environment: EnvironmentSpec
    tools: list[str] = Field(default_factory=list)
    reward: list[RewardSpec] = Field(min_length=1)
    data: DataSpec
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    backend: BackendSpec = Field(default_factory=BackendSpec)
    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    seed: int = 0

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
        return self

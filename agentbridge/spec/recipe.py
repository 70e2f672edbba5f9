"""The recipe knobs of ``algorithm`` (:data:`RECIPE_FIELDS`): the values each algorithm preset implies, and the
one key per explicit value that adapters declare refusals against (:func:`recipe_key`). Which backends can honour
an explicit value each adapter declares (``Adapter.recipe_why_not`` / ``recipe_refusals``). ``overlong`` is applied by
agentbridge's episode runner itself (:func:`overlong_penalty`), the same on every backend.

Every knob is null by default, meaning the algorithm preset's value, so a spec without them compiles to the job it
compiled to before they existed. An explicit value is written to each backend's own setting; where a backend has no
setting with the same meaning, its ``check`` refuses the spec in one line naming the backends that can run it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    from agentbridge.spec.schema import AlgorithmSpec

RECIPE_FIELDS = ("clip", "entropy_coef", "max_grad_norm", "loss_agg", "scale_advantages", "epochs", "mini_batches",
                 "kl_estimator", "kl_in", "is_correction", "overlong", "rollout")
LossAgg = Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
LOSS_AGG: tuple[str, ...] = get_args(LossAgg)
ScaleAdvantages = Literal["group", "batch", "none"]
SCALE_ADVANTAGES: tuple[str, ...] = get_args(ScaleAdvantages)
KlEstimator = Literal["k1", "k2", "k3"]
KlIn = Literal["loss", "reward"]
IsLevel = Literal["token", "sequence"]
IsMode = Literal["truncate", "mask"]
RolloutMode = Literal["sync", "one_step_off", "async"]
REWARD_KL = ("reinforce_pp", "ppo")  # presets whose KL is k1 in the reward; the others: k3 in the loss
OVERLONG = "overlong"  # the reward component of the soft overlong penalty
GROUP_NORMALISED = ("grpo", "dr_grpo", "dapo", "gspo")  # presets whose advantage is the reward minus its group's mean
DEFAULT_CLIP = (0.2, 0.2)
PRESET_CLIP: dict[str, tuple[float, float]] = {"dapo": (0.2, 0.28), "gspo": (3e-4, 4e-4)}
"""(low, high) of the ratio clip each preset sets on every backend that runs it; (0.2, 0.2) for the others."""


PRESET_LOSS_AGG = {"grpo": "seq_mean_token_mean", "gspo": "seq_mean_token_mean", "dr_grpo": "seq_mean_token_sum_norm",
                   "rloo": "seq_mean_token_sum"}
"""The loss aggregation each preset implies; token_mean for the others (dapo, reinforce_pp, ppo)."""


def loss_agg(algo: AlgorithmSpec) -> str:
    """How token losses make the step's loss: the explicit ``loss_agg``, else the preset's."""
    return algo.loss_agg or PRESET_LOSS_AGG.get(algo.name, "token_mean")


def preset_clip(name: str) -> tuple[float, float]:
    """The (low, high) ratio clip of algorithm preset ``name``."""
    return PRESET_CLIP.get(name, DEFAULT_CLIP)


def clip_range(algo: AlgorithmSpec) -> tuple[float, float] | None:
    """The explicit (low, high) ratio clip, the preset's value for a bound not given; None when neither is given."""
    clip = algo.clip
    if clip is None or (clip.low is None and clip.high is None):
        return None
    low, high = preset_clip(algo.name)
    return (low if clip.low is None else clip.low, high if clip.high is None else clip.high)


def dual_clip(algo: AlgorithmSpec) -> float | None:
    """The explicit dual-clip constant, or None (the preset's behaviour)."""
    return None if algo.clip is None else algo.clip.dual


def clip_settings(algo: AlgorithmSpec, keys: Mapping[str, str]) -> dict[str, Any]:
    """The explicit ratio clip (:func:`clip_range`: ``clip_low``, ``clip_high``), dual clip (``dual_clip``),
    ``entropy_coef`` and ``max_grad_norm`` of ``algo`` under a backend's ``keys`` (knob -> the backend's key; a knob
    without one is left out), in that order; none for a field left null (the preset's)."""
    clip = clip_range(algo)
    knobs = {**({"clip_low": clip[0], "clip_high": clip[1]} if clip else {}), "dual_clip": dual_clip(algo),
             "entropy_coef": algo.entropy_coef, "max_grad_norm": algo.max_grad_norm}
    return {keys[knob]: value for knob, value in knobs.items() if value is not None and knob in keys}



def scale_advantages(algo: AlgorithmSpec) -> str | None:
    """How a group-normalised preset scales its advantages: the explicit value, else the preset's (none for dr_grpo,
    group for the others); None for the presets that set their own advantage."""
    if algo.name not in GROUP_NORMALISED:
        return None
    return algo.scale_advantages or ("none" if algo.name == "dr_grpo" else "group")


def updates(algo: AlgorithmSpec) -> tuple[int, int]:
    """(epochs, mini-batches) of the updates over each step's episodes: the explicit values, else one of each."""
    return algo.epochs or 1, algo.mini_batches or 1


def kl_setting(algo: AlgorithmSpec) -> tuple[str, str]:
    """(estimator, where) of the KL term: the explicit ``kl_estimator`` / ``kl_in``, else the preset's (k1 in the
    reward for reinforce_pp and ppo, k3 in the loss for the others). Meaningful only with ``kl_coef`` > 0."""
    reward = algo.name in REWARD_KL
    return algo.kl_estimator or ("k1" if reward else "k3"), algo.kl_in or ("reward" if reward else "loss")


def recipe_key(field: str, value: object) -> object:
    """The value adapters declare refusals against (``Adapter.recipe_why_not[field]``): the value itself for a plain
    knob; ``"<level>_<mode>"`` for ``is_correction`` (``token_truncate``, ``sequence_mask``, ...); the mode for
    ``rollout`` (with ``"+partial"`` when partial rollouts are asked for); ``"set"`` for any other block."""
    if field == "is_correction":
        return f"{value.level}_{value.mode}"  # type: ignore[attr-defined]
    if field == "rollout":
        return value.mode + ("+partial" if value.partial else "")  # type: ignore[attr-defined]
    if field in ("clip", "overlong"):
        return "set"
    return value


def overlong_penalty(response_tokens: int, max_tokens: int, buffer: int, penalty: float) -> float:
    """DAPO's soft overlong penalty (Yu et al. 2025) of a response of ``response_tokens`` under a budget of
    ``max_tokens``: 0 up to ``max_tokens - buffer``, then falling linearly to ``-penalty`` at ``max_tokens``."""
    start = max_tokens - buffer
    if response_tokens <= start:
        return 0.0
    return -penalty * min(response_tokens - start, buffer) / buffer


def overlong_words(overlong: Any, *more: str) -> str:
    """The shared words of ``compare``'s "overlong" aspect for a spec's ``algorithm.overlong`` (agentbridge's rollout
    applies it, the same on every backend): ``truncated episodes masked; penalty 1 over the last 64 tokens``, either
    part alone, then ``more`` (what a backend adds of its own), or ``none``."""
    parts = ["truncated episodes masked"] if overlong is not None and overlong.mask_truncated else []
    if overlong is not None and overlong.buffer:
        parts.append(f"penalty {overlong.penalty:g} over the last {overlong.buffer} tokens")
    return "; ".join([*parts, *more]) or "none"


def is_correction_words(level: str, mode: str, cap: float) -> str:
    """The shared words of an IS correction in ``compare``'s "IS correction" aspect: ``token truncate, cap 2``
    (every adapter's validator writes an importance-sampling correction with the spec's meaning this way)."""
    return f"{level} {mode}, cap {cap:g}"


def rollout_words(mode: str, max_staleness: int | None = None, partial: bool = False) -> str:
    """The shared words of a rollout mode in ``compare``'s "rollout mode" aspect: ``sync``, ``one_step_off``,
    ``async, max staleness 2, partial``."""
    if mode != "async":
        return mode
    return "async" + (f", max staleness {max_staleness}" if max_staleness else "") + (", partial" if partial else "")



def entropy_words(coef: float | None) -> str:
    """The shared words of ``compare``'s ``entropy bonus`` aspect: ``coef 0.01``, or ``none``."""
    return f"coef {float(coef):g}" if coef else "none"


def grad_clip_words(norm: float | None) -> str:
    """The shared words of ``compare``'s ``grad clip`` aspect: ``max norm 0.5``, or ``none`` (no norm, or one <= 0)."""
    return f"max norm {float(norm):g}" if norm is not None and float(norm) > 0 else "none"


def batch_words(prompts: int, samples: int, epochs: int, mini_batches: int) -> str:
    """The shared words of ``compare``'s ``batch`` aspect: ``8 prompts x 4 samples, 1 epoch(s) x 2 mini-batch(es)``."""
    return f"{prompts} prompts x {samples} samples, {epochs} epoch(s) x {mini_batches} mini-batch(es)"


def lora_words(rank: int | None, alpha: float | None = None, targets: str | Iterable[str] = "all-linear",
               dropout: float = 0.0) -> str:
    """The shared words of ``compare``'s ``LoRA`` aspect: ``rank 16, alpha 32, targets q_proj v_proj[, dropout
    0.05]`` (module names sorted; alpha 2 x rank when None); ``full fine-tuning`` for no adapter (rank 0 or None)."""
    if not rank:
        return "full fine-tuning"
    names = targets if isinstance(targets, str) else " ".join(sorted(str(t) for t in targets))
    scale = 2.0 * rank if alpha is None else float(alpha)
    return f"rank {rank}, alpha {scale:g}, targets {names}" + (f", dropout {dropout:g}" if dropout else "")


def sampling_words(temperature: float, top_p: float, top_k: int | None) -> str:
    """The shared words of ``compare``'s ``sampling`` aspect: ``temperature 1.0, top_p 1.0, top_k off`` (a top_k of
    None or <= 0 filters nothing in any engine)."""
    return f"temperature {temperature}, top_p {top_p}, top_k {top_k if top_k is not None and top_k > 0 else 'off'}"


def optimizer_words(lr: float, schedule: object) -> str:
    """The shared words of ``compare``'s ``optimizer`` aspect: ``lr 1e-06, constant after warmup`` (a
    ``*_with_warmup`` schedule named without the suffix)."""
    return f"lr {lr}, {str(schedule).removesuffix('_with_warmup')} after warmup"

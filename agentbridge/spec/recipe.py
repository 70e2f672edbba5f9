"""The recipe knobs of ``algorithm`` (``clip``, ``entropy_coef``, ``max_grad_norm``, ``loss_agg``,
``scale_advantages``, ``epochs``, ``mini_batches``): the values each
algorithm preset implies. Which backends can honour an explicit value each adapter declares
(``Adapter.recipe_why_not`` / ``recipe_refusals``).

Every knob is null by default, meaning the algorithm preset's value, so a spec without them compiles to the job it
compiled to before they existed. An explicit value is written to each backend's own setting; where a backend has no
setting with the same meaning, its ``check`` refuses the spec in one line naming the backends that can run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from agentbridge.spec.schema import AlgorithmSpec

RECIPE_FIELDS = ("clip", "entropy_coef", "max_grad_norm", "loss_agg", "scale_advantages", "epochs", "mini_batches")
LossAgg = Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
LOSS_AGG: tuple[str, ...] = get_args(LossAgg)
ScaleAdvantages = Literal["group", "batch", "none"]
SCALE_ADVANTAGES: tuple[str, ...] = get_args(ScaleAdvantages)
GROUP_NORMALISED = ("grpo", "dr_grpo", "dapo", "gspo")  # presets whose advantage is the reward minus its group's mean
DEFAULT_CLIP = (0.2, 0.2)
PRESET_CLIP: dict[str, tuple[float, float]] = {"dapo": (0.2, 0.28), "gspo": (3e-4, 4e-4)}
"""(low, high) of the ratio clip each preset sets on every backend that runs it; (0.2, 0.2) for the others."""


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



def scale_advantages(algo: AlgorithmSpec) -> str | None:
    """How a group-normalised preset scales its advantages: the explicit value, else the preset's (none for dr_grpo,
    group for the others); None for the presets that set their own advantage."""
    if algo.name not in GROUP_NORMALISED:
        return None
    return algo.scale_advantages or ("none" if algo.name == "dr_grpo" else "group")


def updates(algo: AlgorithmSpec) -> tuple[int, int]:
    """(epochs, mini-batches) of the updates over each step's episodes: the explicit values, else one of each."""
    return algo.epochs or 1, algo.mini_batches or 1

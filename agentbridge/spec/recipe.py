"""The recipe knobs of ``algorithm`` (``clip``, ``entropy_coef``, ``max_grad_norm``, ``loss_agg``): the values each
algorithm preset implies, and which backends can honour an explicit value.

Every knob is null by default, meaning the algorithm preset's value, so a spec without them compiles to the job it
compiled to before they existed. An explicit value is written to each backend's own setting; where a backend has no
setting with the same meaning, its ``check`` refuses the spec in one line naming the backends that can run it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from agentbridge.spec.schema import AlgorithmSpec

RECIPE_FIELDS = ("clip", "entropy_coef", "max_grad_norm", "loss_agg")
LossAgg = Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
LOSS_AGG: tuple[str, ...] = get_args(LossAgg)
BACKENDS = ("trl", "verl", "openrlhf", "rlinf", "slime", "roll")

DEFAULT_CLIP = (0.2, 0.2)
PRESET_CLIP: dict[str, tuple[float, float]] = {"dapo": (0.2, 0.28), "gspo": (3e-4, 4e-4)}
"""(low, high) of the ratio clip each preset sets on every backend that runs it; (0.2, 0.2) for the others."""

_OPENRLHF_AGG = "OpenRLHF 0.11.2's --actor.loss_agg_mode is token-mean or seq-mean-token-mean"
LOSS_AGG_WHY_NOT: dict[str, dict[str, str]] = {
    "openrlhf": {"seq_mean_token_sum": _OPENRLHF_AGG, "seq_mean_token_sum_norm": _OPENRLHF_AGG},
    "rlinf": {"seq_mean_token_sum_norm": "RLinf 0.3.0's loss_agg_func has no constant normaliser"},
    "slime": {"seq_mean_token_sum": "slime has no pg-loss reducer summing each sample's tokens"},
    "roll": {"seq_mean_token_sum_norm": "ROLL's seq-mean-token-sum-norm divides by the padded sequence width "
                                        "(prompt included), not agent.max_response_tokens"},
}
"""backend -> loss_agg mode -> why the backend cannot aggregate its loss that way (absent: it can)."""


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


def loss_agg_why_not(backend: str, algorithm: str, mode: str) -> str | None:
    """Why ``backend`` cannot aggregate ``algorithm``'s loss as ``mode``; None when it can."""
    if backend == "openrlhf" and algorithm == "gspo" and mode != "seq_mean_token_mean":
        return "OpenRLHF's gspo policy loss is always seq-mean-token-mean"
    return LOSS_AGG_WHY_NOT.get(backend, {}).get(mode)

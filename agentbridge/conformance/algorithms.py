"""Algorithm conformance: agentbridge's reference math for each algorithm name, and the comparison with what each
backend's own advantage and policy-loss code computes on the same golden batch, configured as its compiled job.

The reference follows the papers (plain torch, float64):

- ``grpo`` (Shao et al. 2024): ``A = (r - mean_g) / (std_g + 1e-6)`` (unbiased std within the group); token
  ratio, PPO clip 0.2; loss averaged over each sequence's tokens, then over sequences; KL: k3 estimator in the loss.
- ``dr_grpo`` (Liu et al. 2025): ``A = r - mean_g``; clip 0.2; token losses summed and divided by
  ``sequences x max_response_tokens`` (a constant); KL as grpo.
- ``dapo`` (Yu et al. 2025): grpo advantages; clip-higher (0.2, 0.28); token-level loss (all tokens of the batch);
  dynamic sampling drops groups whose rewards are all equal; no overlong shaping here; KL as grpo when asked for.
- ``gspo`` (Zheng et al. 2025): grpo advantages; sequence ratio ``exp(mean_t log ratio)``, clip (3e-4, 4e-4);
  loss averaged per sequence; KL as grpo.
- ``rloo`` (Ahmadian et al. 2024): ``A_i = r_i - mean_{j != i} r_j``; clip 0.2; per-sequence sum of token losses,
  averaged over sequences (REINFORCE on the whole sequence); KL as grpo.
- ``reinforce_pp`` (Hu 2025): token rewards ``r_T - beta * k1_t``, returns with gamma 1, advantages whitened over
  every action token of the batch (population std); clip 0.2; token-level loss; KL in the reward, not the loss.
- ``ppo`` (Schulman et al. 2017, GAE 2016, as in RLHF): token rewards as reinforce_pp, GAE with gamma 1 and
  lambda 0.95 over the action tokens (environment tokens skipped), whitened; clip 0.2; token-level loss.

Each stage is fed the reference's inputs, so a difference names the stage: ``advantages`` (from rewards, values,
log-probs), ``loss`` (the clipped policy loss from the reference advantages), ``clip_fraction`` (the share of action
tokens whose clipped surrogate is the one taken, as the backend logs it), ``kl`` (the KL term added to the loss) and
``kept`` (the groups dynamic sampling keeps). A backend's probe (the module its ``algorithm_probe`` names,
``probe(job_dir, batch)``) runs that backend's own code, in its own environment, configured by the job directory
``compile`` wrote.

The recipe axis: the golden batch under ``grpo`` with one recipe knob of the spec away from its default
(:data:`RECIPE_CASES`: clip-higher, dual-clip, each loss aggregation, advantage scaling none / batch with KL off; the
KL estimators k1 and k2 and KL in the reward with KL 0.05; the importance-sampling correction at each level and mode,
against the batch's ``rollout_logp``, the engine's log-probs), compiled into the backend's job and run through the
same probe; the reference follows the knob (:class:`Recipe`: ``policy_loss``'s clip range, dual-clip, aggregation,
KL estimator and IS weights, ``reference_advantages``' scaling and KL in the reward). A knob the backend's ``check``
refuses is n/a with the refusal line. Its cells are the variants ``grpo@<case>``, pinned in ``DIFFERENCES`` under that
key.

What the probe module declares, and what fails a cell (✘):

- ``DIFFERENCES``: ``algorithm -> quantity -> Documented(why, off, on)``, a difference the backend cannot be
  configured away, pinned with its max |Δ| on the golden batch with KL off and on (None: no such difference in
  that variant). A documented difference whose max |Δ| leaves its pin (by more than its tolerance), or appears in
  a variant it is not pinned for, fails the cell.
- ``NOT_PRODUCED``: ``quantity -> why``, what the backend's code cannot produce. Any other quantity a probe leaves
  out (or returns as None), in either variant, fails the cell; so does a declared one it returns.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import math
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentbridge.spec.recipe import PRESET_LOSS_AGG, REWARD_KL

ALGORITHMS = ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "ppo")
QUANTITIES = ("advantages", "loss", "clip_fraction", "kl", "kept")
METRICS = ("clip_fraction",)  # logged, not trained on: compared and pinned here, not warned at validate
KL_COEF = 0.05  # the "KL on" variant of every algorithm
GROUP_SIZE = 4
IDENTICAL = 1e-5  # float32 backends against the float64 reference
CLOSE = 1e-3
PIN_TOLERANCE = 0.01  # a pinned difference holds while its max |Δ| is within 1% (or IDENTICAL) of the pin
CLIP = {"dapo": (0.2, 0.28), "gspo": (3e-4, 4e-4)}
GAE_LAMBDA = 0.95
RECIPE_ALGORITHM = "grpo"  # the recipe axis sets each knob away from its default on this algorithm
# the recipe axis: case -> (its row in the recipe table, the spec's settings). clip.dual 1.25 bites on the golden
# batch: the tokens whose ratio passes it with a negative advantage (-0.783) are response 11's first and third (ratios
# exp(0.45) = 1.568 and exp(0.25) = 1.284), and the loss moves by 3.8e-3, beyond CLOSE (at 1.5 only the first bites
# and it moves by 7.4e-4, within CLOSE: a dual-clip left unwritten would pass). The largest golden ratio is 1.568, so
# a constant of 1.57 or more (3.0, veRL's default, included) never bites
RECIPE_CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "clip_higher": ("clip=0.1/0.3", ("algorithm.clip.low=0.1", "algorithm.clip.high=0.3")),
    "dual_clip": ("clip.dual=1.25", ("algorithm.clip.dual=1.25",)),
    "token_mean": ("loss_agg=token_mean", ("algorithm.loss_agg=token_mean",)),
    "seq_mean_token_sum": ("loss_agg=seq_mean_token_sum", ("algorithm.loss_agg=seq_mean_token_sum",)),
    "seq_mean_token_sum_norm": ("loss_agg=seq_mean_token_sum_norm", ("algorithm.loss_agg=seq_mean_token_sum_norm",)),
    "scale_none": ("scale_advantages=none", ("algorithm.scale_advantages=none",)),
    "scale_batch": ("scale_advantages=batch", ("algorithm.scale_advantages=batch",)),
    "kl_k1": ("kl_estimator=k1 (KL 0.05)", (f"algorithm.kl_coef={KL_COEF}", "algorithm.kl_estimator=k1")),
    # k2 and the preset's k3 agree to second order in the log-ratio: at KL 10 their KL terms part by 1.9e-3, past CLOSE
    "kl_k2": ("kl_estimator=k2 (KL 10)", ("algorithm.kl_coef=10", "algorithm.kl_estimator=k2")),
    "kl_in_reward": ("kl_in=reward, k1 (KL 0.05)", (f"algorithm.kl_coef={KL_COEF}", "algorithm.kl_in=reward",
                                                    "algorithm.kl_estimator=k1")),
    "is_token_truncate": ("is_correction token truncate 2", ("algorithm.is_correction.level=token",
                                                             "algorithm.is_correction.mode=truncate")),
    "is_token_mask": ("is_correction token mask 2", ("algorithm.is_correction.level=token",
                                                     "algorithm.is_correction.mode=mask")),
    "is_sequence_truncate": ("is_correction sequence truncate 2", ("algorithm.is_correction.level=sequence",
                                                                   "algorithm.is_correction.mode=truncate")),
    "is_sequence_mask": ("is_correction sequence mask 2", ("algorithm.is_correction.level=sequence",
                                                           "algorithm.is_correction.mode=mask")),
}


@dataclass(frozen=True)
class Recipe:
    """The recipe knobs the reference math follows, each None for the algorithm preset's: ``clip`` (low, high),
    ``dual`` (dual-clip constant: a negative advantage's token loss capped at ``-dual x A``), ``loss_agg`` (how token
    losses make the loss) and ``scale_advantages`` (group / batch / none: what a group-normalised preset divides the
    reward minus its group's mean by)."""

    clip: tuple[float, float] | None = None
    dual: float | None = None
    loss_agg: str | None = None
    scale_advantages: str | None = None
    kl_coef: float = 0.0
    kl_estimator: str | None = None
    kl_in: str | None = None
    is_correction: tuple[str, str, float] | None = None  # (level, mode, cap)

    @classmethod
    def of(cls, algo: Any) -> Recipe:
        """The recipe of a spec's ``algorithm`` (an ``AlgorithmSpec``)."""
        from agentbridge.spec.recipe import clip_range, dual_clip

        isc = algo.is_correction
        return cls(clip_range(algo), dual_clip(algo), algo.loss_agg, algo.scale_advantages, algo.kl_coef,
                   algo.kl_estimator, algo.kl_in, None if isc is None else (isc.level, isc.mode, isc.cap))

    def kl(self, name: str) -> tuple[str, str]:
        """(estimator, where) of the KL term of algorithm ``name`` under this recipe (``spec.recipe.kl_setting``)."""
        reward = name in REWARD_KL
        return self.kl_estimator or ("k1" if reward else "k3"), self.kl_in or ("reward" if reward else "loss")


def recipe_variant(name: str, case: str) -> str:
    """The variant (probe result key, DIFFERENCES key, job directory stem) of algorithm ``name`` under recipe case
    ``case``: ``grpo@token_mean``."""
    return f"{name}@{case}"


@dataclass
class GoldenBatch:
    """Three groups of four responses (width 8, padded with mask 0): all-equal rewards, all-zero, mixed; different
    lengths, an environment gap inside one response, a truncated (full-width) one; ratios inside and outside the
    clip ranges, some exactly 1 (on-policy); a reference policy for the KL term and values for GAE."""

    rewards: list[float]
    group: list[int]
    mask: list[list[int]]
    old_logp: list[list[float]]
    logp: list[list[float]]
    ref_logp: list[list[float]]
    values: list[list[float]]
    max_response_tokens: int = 256
    rollout_logp: list[list[float]] = field(default_factory=list)  # the inference engine's (empty: old_logp's)

    def tensors(self, width: int | None = None, dtype: Any = None) -> dict[str, Any]:
        """The batch as torch tensors, right-padded to ``width`` (the backend's response length)."""
        import torch

        dtype = dtype or torch.float32
        w = width or len(self.mask[0])

        def pad(rows: list[list[float]], t: Any) -> Any:
            return torch.tensor([list(r) + [0] * (w - len(r)) for r in rows], dtype=t)

        return {"rewards": torch.tensor(self.rewards, dtype=dtype), "group": torch.tensor(self.group),
                "mask": pad(self.mask, torch.long), "old_logp": pad(self.old_logp, dtype),
                "logp": pad(self.logp, dtype), "ref_logp": pad(self.ref_logp, dtype), "values": pad(self.values, dtype),
                "rollout_logp": pad(self.rollout_logp or self.old_logp, dtype)}

    def groups(self) -> list[int]:
        return sorted(set(self.group))

    def lengths(self) -> list[int]:
        """Each response's length through its last action token (the rest of its row is padding)."""
        return [len(m) - m[::-1].index(1) for m in self.mask]

    def advantages(self, algorithm: Any, width: int | None = None) -> Any:
        """The reference advantages of a spec's ``algorithm`` (its name, KL coefficient and recipe) on this batch,
        float32, right-padded to ``width``: what a probe feeds the backend's policy loss, so that a difference in
        the loss is the loss's own."""
        import torch

        return reference_advantages(algorithm.name, self.tensors(width, torch.float64), algorithm.kl_coef,
                                    Recipe.of(algorithm)).float()


def golden_batch() -> GoldenBatch:
    """The golden batch (deterministic; no random numbers)."""
    rewards = [0.5] * 4 + [0.0] * 4 + [1.0, 0.0, 0.5, 0.0]
    lengths = [3, 5, 8, 4, 6, 2, 7, 8, 5, 3, 8, 6]  # 8 = the full width: a truncated response
    mask = [[1] * n + [0] * (8 - n) for n in lengths]
    mask[6][2:4] = [0, 0]  # an environment observation inside a multi-turn response
    deltas = [0.0, 0.15, -0.3, 0.45, -0.1, 0.25, -0.45, 0.05]
    # trainer minus engine log-probs: a token weight exp(0.9) or exp(1.2) passes the cap 2; sequence weights on both
    # sides of it (6 of the 12 sequences pass it)
    engine_gap = [0.0, 0.1, -0.35, 0.9, -0.3, 0.15, 1.2, -0.9]
    old, new, ref, values, rollout = [], [], [], [], []
    for i in range(12):
        o = [-((i * 7 + t * 13) % 29 + 1) / 20.0 for t in range(8)]
        on_policy = i in (0, 5, 9)  # ratio exactly 1: inside every clip range, GSPO's included
        d = [0.0 if on_policy else deltas[(i + t) % 8] for t in range(8)]
        old.append(o)
        new.append([a + b for a, b in zip(o, d, strict=True)])
        ref.append([a - 0.1 * ((i + 2 * t) % 5 - 2) for t, a in enumerate(o)])
        values.append([0.1 * ((i + t) % 7) - 0.2 for t in range(8)])
        rollout.append([a - (0.0 if on_policy else engine_gap[(3 * i + t) % 8]) for t, a in enumerate(o)])
    return GoldenBatch(rewards, [i // GROUP_SIZE for i in range(12)], mask, old, new, ref, values,
                       rollout_logp=rollout)


# ---------------------------------------------------------------------------------------------- reference math


def _last_action(mask: Any) -> Any:
    import torch

    w = mask.shape[1]
    return w - 1 - torch.fliplr(mask.long()).argmax(dim=1)


def kl_estimate(logp: Any, ref_logp: Any, estimator: str) -> Any:
    """Each token's KL estimate from ``d = logp - ref_logp``: k1 ``d``, k2 ``d^2 / 2``, k3 ``exp(-d) + d - 1``."""
    import torch

    d = logp - ref_logp
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d * d
    return torch.exp(-d) + d - 1


def _token_rewards(t: dict[str, Any], beta: float, estimator: str = "k1") -> Any:
    """Outcome reward on the last action token, minus ``beta`` x the KL estimate on every action token."""
    import torch

    m = t["mask"].to(t["logp"].dtype)
    out = torch.zeros_like(t["logp"])
    out[torch.arange(len(out)), _last_action(t["mask"])] = t["rewards"]
    return out - beta * kl_estimate(t["old_logp"], t["ref_logp"], estimator) * m


def is_weights(t: dict[str, Any], m: Any, level: str, mode: str, cap: float) -> Any:
    """The importance-sampling weight on each token: ``exp(old_logp - rollout_logp)`` per token, or per sequence
    the exponential of the sequence's summed gap; truncated to ``cap`` or set to 0 above it (``mode`` mask)."""
    import torch

    gap = (t["old_logp"] - t["rollout_logp"]) * m
    w = gap.exp() if level == "token" else gap.sum(-1, keepdim=True).exp().expand_as(m)
    return w.clamp(max=cap) if mode == "truncate" else torch.where(w > cap, torch.zeros_like(w), w)


def _whiten(x: Any, mask: Any) -> Any:
    m = mask.to(x.dtype)
    mean = (x * m).sum() / m.sum()
    var = (((x - mean) ** 2) * m).sum() / m.sum()
    return (x - mean) / (var.sqrt() + 1e-8) * m


def reference_advantages(name: str, t: dict[str, Any], kl_coef: float, recipe: Recipe | None = None) -> Any:
    """Per-token advantages (0 outside the mask); ``recipe``'s ``scale_advantages`` for a group-normalised preset:
    group (the group's unbiased std + 1e-6), batch (the unbiased std of the step's rewards + 1e-6), none."""
    import torch

    r, g, m = t["rewards"], t["group"], t["mask"].to(t["logp"].dtype)
    estimator, where = (recipe or Recipe()).kl(name)
    in_reward = kl_coef if where == "reward" else 0.0
    if name in ("reinforce_pp", "ppo"):
        rew = _token_rewards(t, in_reward, estimator)
        if name == "reinforce_pp":
            returns = torch.flip(torch.cumsum(torch.flip(rew * m, [1]), 1), [1])
            return _whiten(returns, t["mask"])
        adv = torch.zeros_like(rew)
        for i in range(len(rew)):  # GAE over the action tokens only (gamma 1)
            idx = [k for k in range(rew.shape[1]) if m[i, k] > 0]
            last, nxt = 0.0, 0.0
            for k in reversed(idx):
                delta = rew[i, k] + nxt - t["values"][i, k]
                last = delta + GAE_LAMBDA * last
                adv[i, k], nxt = last, t["values"][i, k]
        return _whiten(adv, t["mask"])
    scale = (recipe.scale_advantages if recipe else None) or ("none" if name == "dr_grpo" else "group")
    if in_reward:  # a sequence-level preset sees the reward minus the KL summed over its action tokens
        r = r - in_reward * (kl_estimate(t["old_logp"], t["ref_logp"], estimator) * m).sum(-1)
    out = torch.zeros_like(r)
    for gid in g.unique():
        sel = g == gid
        rg = r[sel]
        if name == "rloo":
            out[sel] = rg - (rg.sum() - rg) / (len(rg) - 1)
        elif scale == "none":
            out[sel] = rg - rg.mean()
        elif scale == "batch":
            out[sel] = (rg - rg.mean()) / (r.std() + 1e-6)
        else:
            out[sel] = (rg - rg.mean()) / (rg.std() + 1e-6)
    return out.unsqueeze(1) * m


def kept_groups(name: str, t: dict[str, Any]) -> list[int]:
    """The groups a step trains on: DAPO's dynamic sampling drops groups whose rewards are all equal."""
    gids = [int(x) for x in t["group"].unique()]
    if name != "dapo":
        return gids
    return [gid for gid in gids if float(t["rewards"][t["group"] == gid].std()) > 0]


def reference(name: str, batch: GoldenBatch, kl_coef: float, recipe: Recipe | None = None) -> dict[str, Any]:
    """The reference quantities of algorithm ``name`` on ``batch`` (see the module docstring), under ``recipe``'s
    knobs where set."""
    import torch

    t = batch.tensors(dtype=torch.float64)
    m = t["mask"].to(torch.float64)
    adv = reference_advantages(name, t, kl_coef, recipe)
    # every group enters the loss: which groups dynamic sampling keeps is its own quantity ("kept")
    isc = recipe.is_correction if recipe else None
    weights = is_weights(t, m, *isc) if isc else None
    loss, kl, clipped = policy_loss(name, t["logp"], t["old_logp"], t["ref_logp"], adv, m, kl_coef,
                                    batch.max_response_tokens, recipe, weights)
    return {"advantages": (adv * m).tolist(), "loss": float(loss),
            "clip_fraction": float((clipped * m).sum() / m.sum()), "kl": float(kl), "kept": kept_groups(name, t)}


def policy_loss(name: str, logp: Any, old_logp: Any, ref_logp: Any, adv: Any, m: Any, kl_coef: float,
                max_tokens: int, recipe: Recipe | None = None, is_weight: Any = None) -> tuple[Any, Any, Any]:
    """The reference policy loss of ``name`` (differentiable in ``logp``): ``(policy loss, KL term in the loss,
    per-token clip indicator)``; the KL term is 0 where the recipe (or the algorithm) puts KL in the reward.
    ``recipe``: its clip range, dual-clip constant (a negative advantage's token loss at most ``-dual x A``; the clip
    indicator stays the ratio clip's), loss aggregation (the KL term's too) and KL estimator, where set;
    ``is_weight``: importance-sampling weights multiplying each token's policy loss (not the KL term)."""
    import torch

    recipe = recipe or Recipe()
    low, high = recipe.clip or CLIP.get(name, (0.2, 0.2))
    log_ratio = logp - old_logp
    if name == "gspo":
        seq = (log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1)
        ratio = seq.exp().unsqueeze(1).expand_as(m)
    else:
        ratio = log_ratio.exp()
    surr1, surr2 = ratio * adv, ratio.clamp(1 - low, 1 + high) * adv
    per_token = -torch.min(surr1, surr2)
    clipped = (surr2 < surr1).to(logp.dtype)
    if recipe.dual is not None:  # dual-clip PPO (Ye et al. 2020)
        per_token = torch.where(adv < 0, torch.min(per_token, -adv * recipe.dual), per_token)
    if is_weight is not None:
        per_token = per_token * is_weight
    estimator, where = recipe.kl(name)
    loss = _aggregate(name, per_token, m, max_tokens, recipe.loss_agg)
    kl = kl_coef * _aggregate(name, kl_estimate(logp, ref_logp, estimator), m, max_tokens, recipe.loss_agg) \
        if kl_coef > 0 and where == "loss" else torch.zeros((), dtype=logp.dtype)
    return loss, kl, clipped.detach()


def _aggregate(name: str, x: Any, m: Any, max_tokens: int, loss_agg: str | None = None) -> Any:
    """Token losses ``x`` as the loss: ``loss_agg`` (the spec's names), else algorithm ``name``'s preset."""
    mode = loss_agg or PRESET_LOSS_AGG.get(name, "token_mean")
    rows = m.sum(-1) > 0
    if mode == "seq_mean_token_mean":  # per-sequence token mean, then mean over sequences: grpo, gspo
        return ((x * m).sum(-1)[rows] / m.sum(-1)[rows]).mean()
    if mode == "seq_mean_token_sum_norm":  # dr_grpo: a constant normaliser
        return (x * m).sum() / (rows.sum() * max_tokens)
    if mode == "seq_mean_token_sum":  # rloo
        return (x * m).sum(-1)[rows].mean()
    return (x * m).sum() / m.sum()  # token mean: dapo, reinforce_pp, ppo


# ---------------------------------------------------------------------------------------------- documented differences


def probe_module(backend: Any, kind: str = "algorithm") -> Any:
    """The module a backend names for its ``kind`` probe (its ``algorithm_probe`` / ``step_probe`` attribute; by
    default ``<adapter package>.<kind>_probe``), imported only now: probes import the backend."""
    name = getattr(backend, f"{kind}_probe", None) or f"{type(backend).__module__.split('.')[0]}.{kind}_probe"
    return importlib.import_module(name)


@dataclass(frozen=True)
class Documented:
    """A difference from the reference that a backend cannot be configured away (an entry of its probe module's
    ``DIFFERENCES``): why, and its max |Δ| on the golden batch with KL off (``off``) and with KL on (``on``), None
    where that variant has no such difference. The cell fails when a max |Δ| leaves its pin by more than
    ``tolerance`` (relative; IDENTICAL absolute at least)."""

    why: str
    off: float | None
    on: float | None
    tolerance: float = PIN_TOLERANCE

    @property
    def kl_only(self) -> bool:
        """Whether the difference appears with KL on only."""
        return self.off is None

    def pin(self, kl: bool) -> float | None:
        return self.on if kl else self.off

    def holds(self, delta: float, kl: bool) -> bool:
        """Whether ``delta`` (one variant's max |Δ|) is the pinned one; with no pin, whether it is within CLOSE."""
        pin = self.pin(kl)
        if pin is None:
            return delta <= CLOSE
        return math.isclose(delta, pin, rel_tol=self.tolerance, abs_tol=IDENTICAL)

    @property
    def unpinned(self) -> bool:
        """Whether the entry has no pin (an old ``(why, kl_only)`` pair): it never holds."""
        return any(pin is not None and math.isnan(pin) for pin in (self.off, self.on))

    def describe(self) -> str:
        if self.unpinned:
            return "not pinned"
        pins = [f"{pin:.4g} KL {side}" for side, pin in (("off", self.off), ("on", self.on)) if pin is not None]
        return f"pinned at {', '.join(pins)} ±{self.tolerance:.0%}"


def _entry(value: Any) -> Documented:
    """A ``DIFFERENCES`` entry as :class:`Documented`; an unpinned ``(why, kl_only)`` pair gets NaN pins (it
    never holds: the cell fails until the difference is pinned)."""
    if isinstance(value, Documented):
        return value
    why, kl_only = value
    return Documented(str(why), None if kl_only else math.nan, math.nan)


def declared_differences(backend: Any, name: str) -> dict[str, Documented]:
    """The differences a backend's adapter documents for algorithm ``name`` (``quantity -> Documented``; its probe
    module's ``DIFFERENCES``)."""
    try:
        table = getattr(probe_module(backend), "DIFFERENCES", {})
    except ImportError:
        return {}
    return {quantity: _entry(value) for quantity, value in table.get(name, {}).items()}


def not_produced(backend: Any) -> dict[str, str]:
    """The quantities a backend's probe declares it cannot produce (``quantity -> why``; its probe module's
    ``NOT_PRODUCED``)."""
    try:
        return dict(getattr(probe_module(backend), "NOT_PRODUCED", {}))
    except ImportError:
        return {}


def documented(backend: Any, name: str, kl_coef: float | None = None) -> dict[str, str]:
    """The differences from the reference a backend's adapter documents for algorithm ``name`` (``quantity ->
    why``; its ``DIFFERENCES`` table): those the backend cannot be configured away. With ``kl_coef`` 0, the ones
    that only appear with KL on are left out."""
    return {quantity: d.why for quantity, d in declared_differences(backend, name).items()
            if not (d.kl_only and kl_coef is not None and kl_coef <= 0)}


def difference_lines(backend: Any, name: str, kl_coef: float | None = None, *, kl_chosen: bool = False) -> list[str]:
    """One line per documented difference in what training computes (logged metrics left out), for ``validate``
    and the job manifest; ``kl_chosen``: the spec sets its KL estimator or placement itself, so the differences
    that appear only with the preset's KL on are left out."""
    kl_only = {q for q, d in declared_differences(backend, name).items() if d.kl_only} if kl_chosen else set()
    return [f"algorithm {name} on {backend.name}: {quantity} differs from agentbridge's reference: {why}"
            for quantity, why in documented(backend, name, kl_coef).items()
            if quantity not in METRICS and quantity not in kl_only]


def matching_recipe_cases(algo: Any) -> list[str]:
    """The recipe cases (:data:`RECIPE_CASES`) a spec's ``algorithm`` sets the way the case does: each knob the case
    moves has the case's value in the spec (a clip bound or dual-clip: any explicit value; the IS correction: its
    level and mode, whatever its cap; KL in the reward: whatever its estimator; a KL knob: with KL on)."""
    spec, out = Recipe.of(algo), []
    for case in RECIPE_CASES:
        knobs = recipe_of_case(case)
        moved = [name for name in ("clip", "dual", "loss_agg", "scale_advantages", "kl_estimator", "kl_in",
                                   "is_correction") if getattr(knobs, name) is not None]
        if "kl_in" in moved:  # where the KL goes decides the difference, whichever estimator goes there
            moved.remove("kl_estimator")
        if moved and all(_same_knob(name, getattr(knobs, name), getattr(spec, name)) for name in moved) \
                and (knobs.kl_coef == 0 or spec.kl_coef > 0):
            out.append(case)
    return out


def _same_knob(name: str, case: Any, spec: Any) -> bool:
    if spec is None:
        return False
    if name in ("clip", "dual"):
        return True
    if name == "is_correction":
        return tuple(case[:2]) == tuple(spec[:2])
    return bool(case == spec)


def spec_differences(backend: Any, algo: Any) -> list[str]:
    """One line per documented difference of a spec's ``algorithm`` on ``backend``: its algorithm's
    (:func:`difference_lines`; those that appear only with KL on left out where the spec sets ``kl_estimator`` or
    ``kl_in`` itself), then those pinned for each recipe case the spec matches (measured on grpo), for ``validate``
    and the job manifest."""
    lines = difference_lines(backend, algo.name, algo.kl_coef,
                             kl_chosen=algo.kl_estimator is not None or algo.kl_in is not None)
    for case in matching_recipe_cases(algo):
        label = RECIPE_CASES[case][0]
        lines += [f"recipe {label} on {backend.name} (measured on {RECIPE_ALGORITHM}): {quantity} differs from "
                  f"agentbridge's reference: {d.why}"
                  for quantity, d in declared_differences(backend, recipe_variant(RECIPE_ALGORITHM, case)).items()
                  if quantity not in METRICS]
    return lines


def job_differences(job: Any) -> list[str]:
    """The documented differences of a compiled job (its backend, its spec's algorithm, KL and recipe), for its
    manifest."""
    from agentbridge.plugins import get_plugins
    from agentbridge.spec import load_spec

    registry = get_plugins().backends
    if job.backend not in registry:
        return []
    spec = load_spec(str(job.path / "spec.yaml"))
    return spec_differences(registry.get(job.backend), spec.algorithm)


# ---------------------------------------------------------------------------------------------- comparison


@dataclass
class Cell:
    """One algorithm (with KL off and on) on one backend: ✔ identical, ≈ within tolerance, ≠ a documented
    difference at its pinned value (warned at validate, recorded in the manifest), ✘ an undocumented one (a
    documented one away from its pin or gone: the documentation is stale; a quantity the probe left out without
    declaring it), or n/a."""

    algorithm: str
    backend: str
    status: str = "✔"
    deltas: dict[str, float] = field(default_factory=dict)  # quantity -> max |Δ| over the KL off/on variants
    why: str = ""
    known: dict[str, str] = field(default_factory=dict)  # documented differences: quantity -> why
    pinned: dict[str, Documented] = field(default_factory=dict)  # documented differences with their pins
    variants: dict[str, dict[str, float]] = field(default_factory=dict)  # "off"/"on" -> quantity -> max |Δ|
    missing: dict[str, list[str]] = field(default_factory=dict)  # undeclared, not returned: quantity -> variants
    declared: dict[str, str] = field(default_factory=dict)  # the backend's NOT_PRODUCED: quantity -> why

    def worst(self) -> list[str]:
        """The quantities beyond tolerance."""
        return [q for q, d in self.deltas.items() if d > CLOSE]

    def differing(self) -> list[str]:
        """The quantities beyond tolerance, and documented ones that are not identical (a documented difference
        can be smaller than the tolerance)."""
        return [q for q, d in self.deltas.items() if d > CLOSE or (q in self.known and d > IDENTICAL)]

    def moved(self) -> list[tuple[str, str, float]]:
        """``(quantity, variant, max |Δ|)`` of each documented difference away from its pin (a variant it is not
        pinned for included), when it is not gone altogether (see :meth:`unexpected`)."""
        out = []
        for q, d in self.pinned.items():
            for variant, deltas in self.variants.items():
                if q in deltas and not d.holds(deltas[q], variant == "on") and self.deltas.get(q, 0.0) > IDENTICAL:
                    out.append((q, variant, deltas[q]))
        return out

    def unexpected(self) -> list[str]:
        """Quantities that differ without being documented, documented ones that are identical, documented ones
        away from their pins, ones the probe left out undeclared and declared ones it returned."""
        differing = self.differing()
        out = [q for q in differing if q not in self.known]
        out += [f"{q} (documented, yet equal)" for q in self.known if q in self.deltas and q not in differing]
        out += [f"{q} (documented, not pinned)" if self.pinned[q].unpinned else f"{q} (pinned difference moved)"
                for q in dict.fromkeys(q for q, _, _ in self.moved()) if q not in out]
        out += [f"{q} (not returned)" for q in self.missing]
        out += [f"{q} (declared not produced, yet returned)" for q in self.declared if q in self.deltas]
        return out


def max_delta(want: Any, got: Any) -> float:
    """max |Δ| between two numbers or nested lists of numbers; for group lists, how many groups are in one and
    not the other."""
    if isinstance(want, list) and want and not isinstance(want[0], list) and isinstance(want[0], int) \
            and not isinstance(want[0], bool):
        return math.inf if got is None else float(len(set(want) ^ {int(g) for g in got}))
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) < len(want):
            return math.inf
        return max([max_delta(w, g) for w, g in zip(want, got, strict=False)] or [0.0])
    if got is None:
        return math.inf
    return abs(float(want) - float(got))


def compare_cell(name: str, backend: str, got: dict[str, dict[str, Any]], batch: GoldenBatch,
                 known: Mapping[str, Documented | str] | None = None, declared: Mapping[str, str] | None = None,
                 recipe: Recipe | None = None) -> Cell:
    """Compare a backend's probe output for ``name`` (variants ``name`` and ``name+kl``) with the reference;
    ``known``: the documented differences (a bare reason is an unpinned one, which fails), ``declared``: what the
    probe cannot produce (any other quantity missing or None in either variant fails). A recipe variant ``name``
    (``grpo@token_mean``, see :func:`recipe_variant`) is compared once, with ``recipe``'s KL coefficient, against the
    reference under ``recipe``."""
    pinned = {q: d if isinstance(d, Documented) else _entry((d, False)) for q, d in (known or {}).items()}
    cell = Cell(name, backend, known={q: d.why for q, d in pinned.items()}, pinned=pinned,
                declared=dict(declared or {}))
    algorithm = name.split("@")[0]
    coef = recipe.kl_coef if recipe else 0.0
    sides = ((name, coef, "on" if coef > 0 else "off"),) if "@" in name else \
        ((name, 0.0, "off"), (f"{name}+kl", KL_COEF, "on"))
    for variant, coef, side in sides:
        quantities = got.get(variant) or {}
        want = reference(algorithm, batch, coef, recipe)
        for q in QUANTITIES:
            if quantities.get(q) is None:
                if q not in cell.declared:
                    cell.missing.setdefault(q, []).append(side)
                continue
            delta = max_delta(want[q], quantities[q])
            cell.variants.setdefault(side, {})[q] = delta
            cell.deltas[q] = max(cell.deltas.get(q, 0.0), delta)
    worst = max(cell.deltas.values(), default=0.0)
    cell.status = "✘" if cell.unexpected() else "≠" if cell.differing() else "≈" if worst > IDENTICAL else "✔"
    return cell


def problem_lines(cells: list[Cell]) -> list[str]:
    """One line per difference: algorithm, backend, quantity, max |Δ| (and whether it is documented, at its pin);
    one per quantity left out undeclared or returned though declared not produced; then the declarations
    (:func:`declaration_lines`)."""
    def tag(c: Cell, q: str) -> str:
        if q not in c.known:
            return " (undocumented)"
        moved = [(v, d) for m, v, d in c.moved() if m == q]
        if moved:
            now = ", ".join(f"{d:.4g} KL {v}" for v, d in moved)
            return f" (undocumented): now {now}; the documented difference is {c.pinned[q].describe()} " \
                   f"({c.known[q]})"
        pin = f"; {c.pinned[q].describe()}" if q in c.pinned else ""
        return f" (documented: {c.known[q]}{pin})"

    lines = [f"{c.algorithm} {c.backend} {q} max|Δ|={c.deltas[q]:.3g}{tag(c, q)}"
             for c in cells for q in dict.fromkeys(c.differing() + c.worst() + [m for m, _, _ in c.moved()])]
    lines += [f"{c.algorithm} {c.backend} {q}" for c in cells for q in c.unexpected() if q.endswith("yet equal)")]
    lines += [f"{c.algorithm} {c.backend} {q} not returned by the probe with KL {' and '.join(vs)} "
              "(undocumented): return it, or declare it in the probe module's NOT_PRODUCED"
              for c in cells for q, vs in c.missing.items()]
    lines += [f"{c.algorithm} {c.backend} {q} returned by the probe (undocumented): its NOT_PRODUCED says it "
              f"cannot be ({why})" for c in cells for q, why in c.declared.items() if q in c.deltas]
    return lines + declaration_lines(cells)


def declaration_lines(cells: list[Cell]) -> list[str]:
    """One line per quantity a backend declares its probe cannot produce (once per backend), with the reason."""
    seen = {(c.backend, q): why for c in cells if c.status != "n/a" for q, why in c.declared.items()}
    return [f"{backend} {q} not produced by its probe (declared: {why})" for (backend, q), why in seen.items()]


# ---------------------------------------------------------------------------------------------- running probes


def golden_algorithm_spec(name: str, backend: str, kl_coef: float, sets: tuple[str, ...] = ()) -> Any:
    """The golden text spec set to one algorithm, groups of four, and a KL coefficient (and ``sets``: a recipe
    case's settings)."""
    from agentbridge.conformance.suite import golden_spec

    return golden_spec("text", [f"backend.name={backend}", f"algorithm.name={name}",
                                f"algorithm.group_size={GROUP_SIZE}", f"algorithm.kl_coef={kl_coef}", *sets])


@functools.cache
def case_algorithm(case: str) -> Any:
    """The ``algorithm`` block of recipe case ``case`` (an ``AlgorithmSpec``: grpo, groups of four, KL off, the
    case's settings), built without a whole spec."""
    import yaml

    from agentbridge.spec.schema import AlgorithmSpec

    data: dict[str, Any] = {"name": RECIPE_ALGORITHM, "group_size": GROUP_SIZE}
    for setting in RECIPE_CASES[case][1]:
        path, _, value = setting.partition("=")
        *parents, last = path.split(".")[1:]
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = yaml.safe_load(value)
    return AlgorithmSpec.model_validate(data)


def recipe_of_case(case: str, backend: str = "trl") -> Recipe:
    """The reference's recipe of a recipe case: the knobs of its ``algorithm`` (:func:`case_algorithm`; the same on
    every backend)."""
    return Recipe.of(case_algorithm(case))


def backend_probe_results(backend_name: str, workdir: Path, algorithms: tuple[str, ...] = ALGORITHMS,
                          recipe: tuple[str, ...] = ()) -> dict[str, Any]:
    """Compile each algorithm (KL off and on), and each recipe case of :data:`RECIPE_CASES` in ``recipe``,
    for ``backend_name`` into ``workdir`` and run the backend's probe on the golden batch; ``{"results": {variant:
    quantities}, "unsupported": {algorithm or recipe variant: the check's refusal}}``. Runs here."""
    from agentbridge.conformance.suite import _backend

    backend = _backend(backend_name)
    probe = probe_module(backend).probe
    batch = golden_batch()
    out: dict[str, Any] = {"results": {}, "unsupported": {}}
    runs: list[tuple[str, str, float, tuple[str, ...]]] = [
        (name, variant, coef, ()) for name in algorithms for variant, coef in ((name, 0.0), (f"{name}+kl", KL_COEF))]
    runs += [(recipe_variant(RECIPE_ALGORITHM, case), recipe_variant(RECIPE_ALGORITHM, case), 0.0,
              RECIPE_CASES[case][1]) for case in recipe]
    for name, variant, coef, sets in runs:
        if name in out["unsupported"]:
            continue
        spec = golden_algorithm_spec(name.split("@")[0], backend_name, coef, sets)
        problems = backend.check(spec)
        if problems:
            out["unsupported"][name] = str(problems[0])
            continue
        job = backend.compile(spec, workdir / variant.replace("+", "_").replace("@", "_recipe_")).path
        out["results"][variant] = probe(job, batch)
    return out


def no_probe(backend: Any) -> str:
    """Why a backend has no algorithm probe ("" when it has one: the module its ``algorithm_probe`` names exists)."""
    name = getattr(backend, "algorithm_probe", None) or f"{type(backend).__module__.split('.')[0]}.algorithm_probe"
    try:
        found = importlib.util.find_spec(name) is not None
    except ImportError:
        found = False
    return "" if found else f"{backend.name} has no algorithm probe ({name} does not exist): its training math is " \
        "not checked"


def run_algorithms(backend_name: str, algorithms: tuple[str, ...] = ALGORITHMS,
                   workdir: Path | None = None, recipe: tuple[str, ...] = ()) -> list[Cell]:
    """The algorithm x backend cells of one backend, then its recipe cells (``recipe``: cases of
    :data:`RECIPE_CASES`, algorithm ``grpo@<case>``): its probe runs in this interpreter when its package imports
    here, else in the backend's own environment (``python -m agentbridge.conformance algorithms``)."""
    from agentbridge.backends import backend_python
    from agentbridge.conformance.suite import ConformanceError, _backend

    backend = _backend(backend_name)
    module = getattr(backend, "module", backend_name)
    names = [*algorithms, *(recipe_variant(RECIPE_ALGORITHM, case) for case in recipe)]
    missing = no_probe(backend)
    if missing:
        return [Cell(name, backend_name, "n/a", why=missing) for name in names]
    with tempfile.TemporaryDirectory(prefix=f"algorithms-{backend_name}-") as tmp:
        work = Path(workdir or tmp)
        if importlib.util.find_spec(module) is not None:
            try:
                payload = backend_probe_results(backend_name, work, algorithms, recipe)
            except Exception as e:  # noqa: BLE001 - one line, as from another environment
                raise ConformanceError(f"backend {backend_name}: {type(e).__name__}: {e}".splitlines()[0]) from e
        else:
            python = backend_python(backend_name, module)
            if python is None:
                from agentbridge.backend_envs import no_environment

                raise ConformanceError(f"backend {backend_name}: {no_environment(backend_name, module)}")
            cmd = [python, "-m", "agentbridge.conformance", "algorithms", backend_name, "--workdir", str(work),
                   "--algorithms", ",".join(algorithms), "--recipe", ",".join(recipe)]
            result = subprocess.run(cmd, capture_output=True, text=True)
            try:
                payload = json.loads(result.stdout.strip().splitlines()[-1])
            except (json.JSONDecodeError, IndexError):
                tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
                raise ConformanceError(f"backend {backend_name}: the algorithm probe in {python} failed: {tail}") \
                    from None
            if "error" in payload:
                raise ConformanceError(f"backend {backend_name}: {payload['error']}")
    batch = golden_batch()
    cells = []
    for name in names:
        if name in payload["unsupported"]:
            cells.append(Cell(name, backend_name, "n/a", why=_refusal(backend, name, payload["unsupported"][name])))
        else:
            knobs = recipe_of_case(name.split("@")[1], backend_name) if "@" in name else None
            cells.append(compare_cell(name, backend_name, payload["results"], batch,
                                      declared_differences(backend, name), not_produced(backend), knobs))
    return cells


def _refusal(backend: Any, name: str, line: str) -> str:
    """The check's refusal of variant ``name``, as this interpreter's check says it (its "backends that can" names
    every backend installed here, not only those in the backend's own environment); ``line`` where it cannot."""
    algorithm, _, case = name.partition("@")
    try:
        spec = golden_algorithm_spec(algorithm, backend.name, 0.0, RECIPE_CASES[case][1] if case else ())
        problems = [str(p) for p in backend.check(spec)]
    except Exception:  # noqa: BLE001 - the backend's own line stands
        return line
    return problems[0] if problems else line


def table(cells: list[Cell], backends: list[str]) -> str:
    """The algorithm x backend table as plain text (✔ identical, ≈ within tolerance, ≠ documented difference,
    ✘ with the quantity)."""
    names = [a for a in ALGORITHMS if any(c.algorithm == a for c in cells)]
    return _table(cells, backends, [(a, a) for a in names], "algorithm")


def recipe_table(cells: list[Cell], backends: list[str]) -> str:
    """The recipe knob x backend table (grpo, each knob away from its default) as plain text: ✔, ≈, ≠ a
    pinned documented difference, ✘ with the quantity, n/a where the backend's check refuses the knob; empty when
    there are no recipe cells."""
    rows = [(recipe_variant(RECIPE_ALGORITHM, case), label) for case, (label, _) in RECIPE_CASES.items()
            if any(c.algorithm == recipe_variant(RECIPE_ALGORITHM, case) for c in cells)]
    return _table(cells, backends, rows, f"recipe ({RECIPE_ALGORITHM})") if rows else ""


def _table(cells: list[Cell], backends: list[str], names: list[tuple[str, str]], head: str) -> str:
    by = {(c.algorithm, c.backend): c for c in cells}
    rows = [[head, *backends]]
    for a, label in names:
        row = [label]
        for b in backends:
            c = by.get((a, b))
            if c is None:
                row.append("")
            elif c.status == "✘":
                row.append("✘ " + ",".join(c.unexpected()))
            elif c.status == "≠":
                row.append("≠ " + ",".join(c.differing()))
            else:
                row.append(c.status)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def cells_to_json(cells: list[Cell]) -> list[dict[str, Any]]:
    return [asdict(c) for c in cells]


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    return fn(*args, **kwargs), time.perf_counter() - t0

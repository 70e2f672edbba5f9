"""What a backend ends up with for one episode (``EpisodeRecord``), and the comparison against the driver's."""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any

FIELDS = ("prompt_ids", "response_ids", "response_mask", "logprobs", "reward", "images")
LOGPROB_TOLERANCE = 1e-5  # log-probs may pass through float32 tensors
REWARD_TOLERANCE = 1e-5


@dataclass
class EpisodeRecord:
    """One episode as a backend holds it for training, without the backend's padding.

    ``logprobs`` are the rollout log-probs of every response token (0 where the environment wrote);
    ``images`` are digests of every image the model saw, in order (:func:`image_digest`).
    """

    case: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    logprobs: list[float]
    reward: float
    images: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeRecord:
        return cls(case=str(d["case"]), prompt_ids=[int(x) for x in d["prompt_ids"]],
                   response_ids=[int(x) for x in d["response_ids"]],
                   response_mask=[int(x) for x in d["response_mask"]],
                   logprobs=[float(x) for x in d["logprobs"]], reward=float(d["reward"]),
                   images=[str(x) for x in d.get("images", [])])


def image_digest(image: Any) -> str:
    """A digest of an image's size and RGB pixels (PIL images, or anything with ``convert``/``tobytes``)."""
    rgb = image.convert("RGB")
    h = hashlib.sha256(f"{rgb.size[0]}x{rgb.size[1]}:".encode())
    h.update(rgb.tobytes())
    return h.hexdigest()[:16]


def record_of(trajectory: Any, case: str | None = None) -> EpisodeRecord:
    """The record of a driver trajectory (the reference every backend is compared with)."""
    return EpisodeRecord(case=case or trajectory.task_id, prompt_ids=list(trajectory.prompt_ids),
                         response_ids=list(trajectory.response_ids), response_mask=list(trajectory.response_mask),
                         logprobs=[float(x) for x in trajectory.logprobs], reward=float(trajectory.reward),
                         images=[image_digest(im) for im in trajectory.images])


def _first_difference(want: list[Any], got: list[Any], close: float | None = None) -> str | None:
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        same = math.isclose(w, g, abs_tol=close) if close is not None else w == g
        if not same:
            return f"differs at {i} of {len(want)} (driver {w}, backend {g})"
    if len(want) != len(got):
        return f"has length {len(got)}, the driver's has {len(want)}"
    return None


def compare_record(want: EpisodeRecord, got: EpisodeRecord) -> list[tuple[str, str]]:
    """``(field, what differs)`` for each field of ``got`` that differs from ``want``."""
    out = []
    for name in ("prompt_ids", "response_ids", "response_mask", "images"):
        diff = _first_difference(getattr(want, name), getattr(got, name))
        if diff:
            out.append((name, diff))
    diff = _first_difference(want.logprobs, got.logprobs, close=LOGPROB_TOLERANCE)
    if diff:
        out.append(("logprobs", diff))
    if not math.isclose(want.reward, got.reward, abs_tol=REWARD_TOLERANCE):
        out.append(("reward", f"is {got.reward:g}, the driver's is {want.reward:g}"))
    return out


def compare(reference: list[EpisodeRecord], got: list[EpisodeRecord], backend: str,
            samples: int = 1) -> list[str]:
    """One line per difference between a backend's records and the driver's (``samples`` records per case)."""
    want = {r.case: r for r in reference}
    problems = []
    for case in want:
        n = sum(r.case == case for r in got)
        if n != samples:
            problems.append(f"{backend}: case {case}: {n} episodes reached the batch, expected {samples}")
    for r in got:
        if r.case not in want:
            problems.append(f"{backend}: case {r.case}: not a golden case")
    seen: dict[str, int] = {}
    for r in got:
        if r.case not in want:
            continue
        i = seen[r.case] = seen.get(r.case, -1) + 1
        for name, diff in compare_record(want[r.case], r):
            problems.append(f"{backend}: case {r.case}[{i}]: {name} {diff}")
    return problems

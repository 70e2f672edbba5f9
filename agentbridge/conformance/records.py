"""What a backend ends up with for one episode (``EpisodeRecord``), and the comparison against the driver's."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

FIELDS = ("prompt_ids", "response_ids", "response_mask", "logprobs", "reward", "token_rewards", "images")
LOGPROB_TOLERANCE = 1e-5  # log-probs may pass through float32 tensors
REWARD_TOLERANCE = 1e-5


@dataclass
class EpisodeRecord:
    """One episode as a backend holds it for training, without the backend's padding.

    ``logprobs`` are the rollout log-probs of every response token (0 where the environment wrote), or None when
    the backend holds none under the job the record was read from (OpenRLHF's default job: it recomputes the old
    log-probs in the actor and keeps no rollout log-probs); the comparison reports a field not held as a note
    naming backend and field, never as conforming, and as a difference unless the backend's adapter declares it
    (``rollout_not_held``, see :func:`compare`).
    ``images`` are digests of every image the model saw, in order (:func:`image_digest`).
    ``token_rewards``: the reward on each response token as the backend's training batch holds it before any KL
    term (where its returns and advantages read it), or None for a backend that keeps one reward per episode and
    no per-token rewards (TRL).
    ``job``: empty for a record of the backend's default job (the one its ``conformance`` compiles the golden spec
    into, as a user's job would be: OpenRLHF's with its default options); otherwise the settings of the other job
    it was read from (``--set`` overrides, e.g. ``backend.options.is_correction=token``). Such a record checks
    only the fields the default job's records do not hold (see :func:`compare`).
    """

    case: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    logprobs: list[float] | None
    reward: float
    images: list[str] = field(default_factory=list)
    job: str = ""
    token_rewards: list[float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeRecord:
        lps = d["logprobs"]
        return cls(case=str(d["case"]), prompt_ids=[int(x) for x in d["prompt_ids"]],
                   response_ids=[int(x) for x in d["response_ids"]],
                   response_mask=[int(x) for x in d["response_mask"]],
                   logprobs=None if lps is None else [float(x) for x in lps], reward=float(d["reward"]),
                   images=[str(x) for x in d.get("images", [])], job=str(d.get("job", "")),
                   token_rewards=None if d.get("token_rewards") is None
                   else [float(x) for x in d["token_rewards"]])


def image_digest(image: Any) -> str:
    """A digest of an image's size and RGB pixels (PIL images, or anything with ``convert``/``tobytes``)."""
    rgb = image.convert("RGB")
    h = hashlib.sha256(f"{rgb.size[0]}x{rgb.size[1]}:".encode())
    h.update(rgb.tobytes())
    return h.hexdigest()[:16]


def record_of(trajectory: Any, case: str | None = None, credit: str = "episode") -> EpisodeRecord:
    """The record of a driver trajectory (the reference every backend is compared with), its rewards placed on
    the tokens by ``credit`` (:func:`agentbridge.rollout.training.token_rewards`)."""
    from agentbridge.rollout.training import token_rewards

    return EpisodeRecord(case=case or trajectory.task_id, prompt_ids=list(trajectory.prompt_ids),
                         response_ids=list(trajectory.response_ids), response_mask=list(trajectory.response_mask),
                         logprobs=[float(x) for x in trajectory.logprobs], reward=float(trajectory.reward),
                         images=[image_digest(im) for im in trajectory.images],
                         token_rewards=token_rewards(trajectory, credit))


def _first_difference(want: list[Any], got: list[Any], close: float | None = None) -> str | None:
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        same = math.isclose(w, g, abs_tol=close) if close is not None else w == g
        if not same:
            return f"differs at {i} of {len(want)} (driver {w}, backend {g})"
    if len(want) != len(got):
        return f"has length {len(got)}, the driver's has {len(want)}"
    return None


def not_held(record: EpisodeRecord) -> list[str]:
    """The fields ``record`` marks as not held by its backend under its job (None)."""
    return [name for name in FIELDS if getattr(record, name) is None]


def compare_record(want: EpisodeRecord, got: EpisodeRecord,
                   fields: tuple[str, ...] = FIELDS) -> list[tuple[str, str]]:
    """``(field, what differs)`` for each of ``fields`` of ``got`` that differs from ``want``. A field ``got`` does
    not hold (None) is no difference (see :func:`notes`); one the driver's reference does not hold is."""
    out = []
    for name in fields:
        w, g = getattr(want, name), getattr(got, name)
        if w is None:
            out.append((name, "is not held by the driver's reference"))
            continue
        if g is None:
            continue
        if name == "reward":
            if not math.isclose(w, g, abs_tol=REWARD_TOLERANCE):
                out.append((name, f"is {g:g}, the driver's is {w:g}"))
            continue
        close = {"logprobs": LOGPROB_TOLERANCE, "token_rewards": REWARD_TOLERANCE}.get(name)
        diff = _first_difference(w, g, close=close)
        if diff:
            out.append((name, diff))
    return out


def _jobs(got: list[EpisodeRecord]) -> dict[str, list[EpisodeRecord]]:
    """A backend's records by the job they were read from, the default job (``""``) first."""
    out: dict[str, list[EpisodeRecord]] = {"": []}
    for r in got:
        out.setdefault(r.job, []).append(r)
    return out


def _missing(records: list[EpisodeRecord]) -> tuple[str, ...]:
    """The fields some of ``records`` do not hold, in ``FIELDS`` order."""
    return tuple(name for name in FIELDS if any(getattr(r, name) is None for r in records))


def compare(reference: list[EpisodeRecord], got: list[EpisodeRecord], backend: str,
            samples: int = 1, not_held: Mapping[str, str] | None = None) -> list[str]:
    """One line per difference between a backend's records and the driver's (``samples`` records per case).

    The records of the default job (``job`` empty) are compared field by field; a field they do not hold is a note
    (:func:`notes`). With ``not_held`` (what the backend's adapter declares its default job does not hold: field ->
    why) it is also a difference unless declared there, and a declared field that every record holds is a stale
    declaration. The records of another job (``job`` set, named in their lines) are compared only on the fields
    the default job's records do not hold, and must hold them.
    """
    jobs = _jobs(got)
    missing = _missing(jobs[""])
    problems = []
    if not_held is not None and jobs[""]:
        problems += [f"{backend}: {name} is declared not held by the default job ({why}), yet every record holds it"
                     for name, why in not_held.items() if name not in missing]
    for job, records in jobs.items():
        fields = FIELDS if not job else missing
        if job and not fields:
            problems.append(f"{backend} ({job}): records of another job, but the default job's records hold "
                            f"every field")
            continue
        kept = () if job or not_held is None else tuple(name for name in FIELDS if name not in not_held)
        problems += _compare_job(reference, records, f"{backend} ({job})" if job else backend, samples, fields,
                                 must_hold=bool(job), kept=kept)
    return problems


def _compare_job(reference: list[EpisodeRecord], got: list[EpisodeRecord], who: str, samples: int,
                 fields: tuple[str, ...], must_hold: bool, kept: tuple[str, ...] = ()) -> list[str]:
    want = {r.case: r for r in reference}
    problems = []
    for case in want:
        n = sum(r.case == case for r in got)
        if n != samples:
            problems.append(f"{who}: case {case}: {n} episodes reached the batch, expected {samples}")
    for r in got:
        if r.case not in want:
            problems.append(f"{who}: case {r.case}: not a golden case")
    seen: dict[str, int] = {}
    for r in got:
        if r.case not in want:
            continue
        i = seen[r.case] = seen.get(r.case, -1) + 1
        if must_hold:
            problems += [f"{who}: case {r.case}[{i}]: {name} is not held under this job either"
                         for name in fields if getattr(r, name) is None]
        problems += [f"{who}: case {r.case}[{i}]: {name} is not held (None), and {who} does not declare it not held "
                     "(rollout_not_held)" for name in kept if getattr(r, name) is None]
        for name, diff in compare_record(want[r.case], r, fields):
            problems.append(f"{who}: case {r.case}[{i}]: {name} {diff}")
    return problems


def notes(got: list[EpisodeRecord], backend: str) -> list[str]:
    """One line per field a backend's default-job records do not hold: checked under which other job, or not at
    all. Neither a pass nor a difference: what the suite could not compare on the job the backend would run."""
    jobs = _jobs(got)
    out = []
    for name in _missing(jobs[""]):
        under = [job for job, records in jobs.items() if job and records
                 and all(getattr(r, name) is not None for r in records)]
        if under:
            out.append(f"{backend}: {name} checked under {' and '.join(under)}; the default job keeps none")
        else:
            out.append(f"{backend}: {name} not held by the default job; not compared")
    return out

"""What an adapter's ``golden_records`` is built from, written once, so that the adapter holds only the calls into
its backend's own code:

- :func:`golden_sets` / :func:`golden_job`: the golden spec of a kind compiled into the backend's job, with the
  backend's own sequence-length settings at :data:`~agentbridge.conformance.golden.BACKEND_LENGTHS` for the
  ``lengths`` kind (an adapter declares them as a template, e.g. ``"data.max_len: {total}"``);
- :func:`episode_record`: one episode's record from the rows of the backend's own batch, its padding dropped;
- the golden engine's reply (:func:`~agentbridge.conformance.golden.golden_reply`) and the image checks
  (:mod:`agentbridge.conformance.images`) live beside the golden turns and the records.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentbridge.conformance.golden import BACKEND_LENGTHS, LENGTHS
from agentbridge.conformance.records import EpisodeRecord
from agentbridge.conformance.suite import golden_spec
from agentbridge.spec import Spec


def golden_sets(backend: str, kind: str, lengths: str = "", sets: Sequence[str] = ()) -> list[str]:
    """The ``--set`` overrides of a backend's golden job: ``backend.name`` (the golden spec names trl, and a backend
    applies ``backend.options`` / ``backend.overrides`` only when it is the spec's backend), then ``sets``, then for
    the ``lengths`` kind ``backend.overrides={<lengths>}``, the backend's own length settings with ``{max_prompt}``,
    ``{max_response}`` and ``{total}`` (their sum) filled in from ``BACKEND_LENGTHS``."""
    out = [f"backend.name={backend}", *sets]
    if kind == LENGTHS and lengths:
        prompt, response = BACKEND_LENGTHS["max_prompt"], BACKEND_LENGTHS["max_response"]
        out.append("backend.overrides={" + lengths.format(max_prompt=prompt, max_response=response,
                                                          total=prompt + response) + "}")
    return out


def golden_job(backend: Any, kind: str, workdir: Path, lengths: str = "", sets: Sequence[str] = (),
               name: str = "") -> tuple[Spec, Path]:
    """The golden spec of ``kind`` set up for ``backend`` (an adapter instance; :func:`golden_sets`) and compiled by
    it into ``workdir / name`` (default: the backend's name); returns ``(spec, job directory)``."""
    spec = golden_spec(kind, golden_sets(backend.name, kind, lengths, sets))
    return spec, backend.compile(spec, Path(workdir) / (name or backend.name)).path


def episode_record(case: str, prompt: Any, response: Any, mask: Any, logprobs: Any, reward: Any, *,
                   token_rewards: Any = None, images: Sequence[str] = (), job: str = "") -> EpisodeRecord:
    """The record of one episode from what the backend's batch holds for it, padding already dropped (tensors or
    lists): ids and mask as ints, log-probs and per-token rewards as floats (None: not held), the reward a float."""
    return EpisodeRecord(case=case, prompt_ids=_ints(prompt), response_ids=_ints(response), response_mask=_ints(mask),
                         logprobs=_floats(logprobs), reward=float(reward), images=list(images), job=job,
                         token_rewards=_floats(token_rewards))


def _values(x: Any) -> list[Any]:
    return list(x.tolist() if hasattr(x, "tolist") else x)


def _ints(x: Any) -> list[int]:
    return [int(v) for v in _values(x)]


def _floats(x: Any) -> list[float] | None:
    return None if x is None else [float(v) for v in _values(x)]

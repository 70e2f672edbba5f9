"""The conformance kit, as an adapter's conformance and probe modules use it (``from agentbridge.adapter.conformance
import ...``):

- the golden episodes: :data:`LENGTHS`, :data:`BACKEND_LENGTHS`, :data:`CREDIT`, :class:`GoldenPolicy`,
  :func:`golden_turn` and :func:`golden_reply` (the fixed turns a backend's stand-in engine answers with),
  :func:`golden_spec`, and the golden spec compiled into a backend's job, its own lengths for the ``lengths`` kind:
  :func:`golden_sets`, :func:`golden_job`;
- the records a backend's training data is compared as: :class:`EpisodeRecord`, :func:`episode_record` (one from the
  rows of a backend's batch), :func:`image_digest`, :func:`handed_image_digests` and :class:`ImageIndex` (the images
  of a row read back from its pixels), :func:`compare`, :func:`reference_records`, :class:`ConformanceError`;
- the algorithm probes: :class:`Documented`, :class:`Recipe`, :func:`reference_advantages` (and the golden batch's
  own ``advantages``);
- the optimizer-step probe: :data:`PROMPT`, :func:`train_step`, :func:`optimizer_step`, :func:`response_logp`.

Each name is imported from ``agentbridge.conformance`` on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentbridge.adapter import _lazy

if TYPE_CHECKING:
    from agentbridge.conformance.algorithms import Documented, Recipe, reference_advantages
    from agentbridge.conformance.golden import (
        BACKEND_LENGTHS,
        CREDIT,
        LENGTHS,
        GoldenPolicy,
        golden_reply,
        golden_turn,
    )
    from agentbridge.conformance.images import ImageIndex, handed_image_digests
    from agentbridge.conformance.kit import episode_record, golden_job, golden_sets
    from agentbridge.conformance.records import EpisodeRecord, compare, image_digest
    from agentbridge.conformance.step import PROMPT, optimizer_step, response_logp, train_step
    from agentbridge.conformance.suite import ConformanceError, golden_spec, reference_records

# name -> the core module that defines it
_CORE = {
    "Documented": "agentbridge.conformance.algorithms",
    "Recipe": "agentbridge.conformance.algorithms",
    "reference_advantages": "agentbridge.conformance.algorithms",
    "BACKEND_LENGTHS": "agentbridge.conformance.golden",
    "CREDIT": "agentbridge.conformance.golden",
    "LENGTHS": "agentbridge.conformance.golden",
    "GoldenPolicy": "agentbridge.conformance.golden",
    "golden_reply": "agentbridge.conformance.golden",
    "golden_turn": "agentbridge.conformance.golden",
    "ImageIndex": "agentbridge.conformance.images",
    "handed_image_digests": "agentbridge.conformance.images",
    "episode_record": "agentbridge.conformance.kit",
    "golden_job": "agentbridge.conformance.kit",
    "golden_sets": "agentbridge.conformance.kit",
    "EpisodeRecord": "agentbridge.conformance.records",
    "compare": "agentbridge.conformance.records",
    "image_digest": "agentbridge.conformance.records",
    "PROMPT": "agentbridge.conformance.step",
    "optimizer_step": "agentbridge.conformance.step",
    "response_logp": "agentbridge.conformance.step",
    "train_step": "agentbridge.conformance.step",
    "ConformanceError": "agentbridge.conformance.suite",
    "golden_spec": "agentbridge.conformance.suite",
    "reference_records": "agentbridge.conformance.suite",
}

__all__ = [
    "BACKEND_LENGTHS", "CREDIT", "LENGTHS", "PROMPT", "ConformanceError", "Documented", "EpisodeRecord",
    "GoldenPolicy", "ImageIndex", "Recipe", "compare", "episode_record", "golden_job", "golden_reply", "golden_sets",
    "golden_spec", "golden_turn", "handed_image_digests", "image_digest", "optimizer_step", "reference_advantages",
    "reference_records", "response_logp", "train_step",
]


def __getattr__(name: str) -> Any:
    return _lazy.load(_CORE, __name__, name)

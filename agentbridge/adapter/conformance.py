"""The conformance kit, as an adapter's conformance and probe modules use it (``from agentbridge.adapter.conformance
import ...``):

- the golden episodes: :data:`LENGTHS`, :data:`BACKEND_LENGTHS`, :data:`CREDIT`, :class:`GoldenPolicy`,
  :func:`golden_turn` (the fixed turns a backend's stand-in engine answers with) and :func:`golden_spec`;
- the records a backend's training data is compared as: :class:`EpisodeRecord`, :func:`image_digest`,
  :func:`compare`, :func:`reference_records`, :class:`ConformanceError`;
- the algorithm probes: :class:`Documented`, :class:`Recipe`, :func:`reference_advantages`;
- the optimizer-step probe: :data:`PROMPT`, :func:`optimizer_step`, :func:`response_logp`.

Each name is imported from ``agentbridge.conformance`` on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentbridge.adapter import _lazy

if TYPE_CHECKING:
    from agentbridge.conformance.algorithms import Documented, Recipe, reference_advantages
    from agentbridge.conformance.golden import BACKEND_LENGTHS, CREDIT, LENGTHS, GoldenPolicy, golden_turn
    from agentbridge.conformance.records import EpisodeRecord, compare, image_digest
    from agentbridge.conformance.step import PROMPT, optimizer_step, response_logp
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
    "golden_turn": "agentbridge.conformance.golden",
    "EpisodeRecord": "agentbridge.conformance.records",
    "compare": "agentbridge.conformance.records",
    "image_digest": "agentbridge.conformance.records",
    "PROMPT": "agentbridge.conformance.step",
    "optimizer_step": "agentbridge.conformance.step",
    "response_logp": "agentbridge.conformance.step",
    "ConformanceError": "agentbridge.conformance.suite",
    "golden_spec": "agentbridge.conformance.suite",
    "reference_records": "agentbridge.conformance.suite",
}

__all__ = [
    "BACKEND_LENGTHS", "CREDIT", "LENGTHS", "PROMPT", "ConformanceError", "Documented", "EpisodeRecord",
    "GoldenPolicy", "Recipe", "compare", "golden_spec", "golden_turn", "image_digest", "optimizer_step",
    "reference_advantages", "reference_records", "response_logp",
]


def __getattr__(name: str) -> Any:
    return _lazy.load(_CORE, __name__, name)

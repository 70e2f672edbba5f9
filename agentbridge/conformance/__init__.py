"""The cross-backend conformance suite: golden episodes every backend must turn into the same training data.

``agentbridge conformance --backend NAME`` runs it; a third-party backend package runs the same suite in its
own tests with :func:`agentbridge.conformance.pytest_plugin.conformance_tests`.
"""

from agentbridge.conformance.golden import BACKEND_LENGTHS, CASES, KINDS, LENGTHS, GoldenPolicy, cases, golden_turn
from agentbridge.conformance.records import EpisodeRecord, compare, image_digest, record_of
from agentbridge.conformance.suite import (
    ConformanceError,
    SuiteResult,
    golden_spec,
    reference_records,
    run_suite,
)

__all__ = ["BACKEND_LENGTHS", "CASES", "KINDS", "LENGTHS", "ConformanceError", "EpisodeRecord", "GoldenPolicy",
           "SuiteResult", "cases", "compare", "golden_spec", "golden_turn", "image_digest", "record_of",
           "reference_records", "run_suite"]

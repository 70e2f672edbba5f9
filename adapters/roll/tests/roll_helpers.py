"""What the ROLL adapter's tests share (a module of its own name: the suites of several packages run in one pytest)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from agentbridge.backends import Job
from agentbridge.spec import load_spec
from agentbridge_roll.backend import RollBackend

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = "examples/calculator.yaml"
# backend.name=roll: the spec's backend.options / overrides apply to ROLL only when it is the spec's backend
SMALL = ["backend.name=roll", "data.train.size=8", "data.eval.size=4", "algorithm.batch_size=2",
         "algorithm.group_size=4"]


def _has_roll() -> bool:
    """ROLL's agentic pipeline imports here (PyPI's unrelated ``roll`` does not count)."""
    try:
        return importlib.util.find_spec("roll") is not None and \
            importlib.util.find_spec("roll.pipeline.agentic") is not None
    except ImportError:
        return False


HAS_ROLL = _has_roll()
needs_roll = pytest.mark.skipif(not HAS_ROLL, reason="ROLL is not importable here (a source checkout on PYTHONPATH: "
                                "see adapters/roll/README.md)")


def compile_job(out: Path, *sets: str, example: str = EXAMPLE) -> Job:
    """The example compiled with the small settings plus ``sets``, its manifest written (no spec checks, so a broken
    job can be made: ``agentbridge.backends.compile_job`` checks first)."""
    job = RollBackend().compile(load_spec(ROOT / example, [*SMALL, *sets]), out)
    job.write_manifest()
    return job

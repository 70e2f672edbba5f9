"""What the slime adapter tests share (a module of its own name: ``conftest`` is taken when CI runs these tests in one
pytest session with the core's).

slime is not on the package index, so CI has no slime: there the compile and protocol tests run (in the main venv)
and the ones marked ``needs_slime`` skip. Where slime imports (a checkout on ``PYTHONPATH``, see the README) every
test runs, the conformance suite through slime's own rollout path included.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from agentbridge.backends import Job
from agentbridge.spec import load_spec
from agentbridge_slime.backend import SlimeBackend

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = "examples/calculator.yaml"
# backend.name=slime: the spec's backend.options / overrides apply to slime only when it is the spec's backend
SMALL = ["backend.name=slime", "data.train.size=8", "data.eval.size=4", "algorithm.batch_size=2",
         "algorithm.group_size=4"]
HAS_SLIME = importlib.util.find_spec("slime") is not None
needs_slime = pytest.mark.skipif(not HAS_SLIME, reason="slime does not import here (a checkout of THUDM/slime on "
                                                       "PYTHONPATH: adapters/slime/README.md)")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def compile_job(out: Path, *sets: str, example: str = EXAMPLE) -> Job:
    """The example compiled with the small settings plus ``sets``, its manifest written (no spec checks, so a broken
    job can be made: ``agentbridge.backends.compile_job`` checks first)."""
    job = SlimeBackend().compile(load_spec(ROOT / example, [*SMALL, *sets]), out)
    job.write_manifest()
    return job

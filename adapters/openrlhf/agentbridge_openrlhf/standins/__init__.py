"""Stand-ins for what OpenRLHF 0.11.2's rollout path needs and a CPU machine cannot run.

Used by the conformance run (:mod:`agentbridge_openrlhf.conformance`) and the adapter's tests; a real job never
loads them.

- ``toplevel/vllm``: vLLM (a GPU inference engine). :func:`use_vllm_standin` puts ``toplevel/`` first on this
  process's ``sys.path`` and on ``PYTHONPATH`` (inherited by the Ray workers OpenRLHF's engine actors run in), so
  ``import vllm`` finds it. Its ``AsyncLLMEngine`` is :class:`GoldenEngine` (answers with
  :func:`agentbridge.conformance.golden.golden_turn`) or, for the tests, ``ScriptedEngine``; both take prompts and
  images as vLLM does and check them as vLLM checks them.
- :mod:`.deepspeed`: DeepSpeed and OpenRLHF's DeepSpeed actor group, so the experience maker imports.
- :mod:`.torchvision_gap`: without torchvision, the VLM processor's (absent) video processor.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

VLLM_ROOT = Path(__file__).resolve().parent / "toplevel"
ENGINES = ("golden", "scripted")


def on_path(*dirs: Path) -> None:
    """Put ``dirs`` first on this process's ``sys.path`` and on ``PYTHONPATH`` (inherited by Ray workers)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for d in reversed([str(d) for d in dirs]):
        if d in sys.path:
            sys.path.remove(d)
        sys.path.insert(0, d)
        if d in paths:
            paths.remove(d)
        paths.insert(0, d)
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)


def use_vllm_standin() -> None:
    """Make ``import vllm`` (here and in Ray workers started from now on) find the stand-in.

    Refuses when this process already imported the real vLLM: OpenRLHF would mix the two.
    """
    loaded = sys.modules.get("vllm")
    if loaded is not None and not getattr(loaded, "AGENTBRIDGE_STANDIN", False):
        raise RuntimeError("this process already imported the real vLLM; the conformance run needs the vLLM "
                           "stand-in (run it in a fresh process: python -m agentbridge.conformance records openrlhf)")
    on_path(VLLM_ROOT)

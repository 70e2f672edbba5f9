"""OpenRLHF's own ``openrlhf.cli.serve_rm`` on a machine without GPUs (tests, and ``RM_SERVER_MODULE`` in
``launch.sh`` on CPU): the same module run as ``__main__``, after two stand-ins for what its imports need and a CPU
cannot run: an empty ``deepspeed`` (imported by ``openrlhf.models``, unused by a served reward model) and flash-attn's
padding helpers (``cpu_serving/flash_attn``, unused without packed samples). Start with ``--ds.attn_implementation
eager``.

Usage: ``python -m agentbridge_openrlhf.standins.serve_rm [serve_rm's flags]``.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

from agentbridge_openrlhf.standins.deepspeed import empty_deepspeed


def install() -> None:
    """Make ``deepspeed`` and ``flash_attn`` importable here when the real ones are not installed."""
    if importlib.util.find_spec("deepspeed") is None:
        sys.modules["deepspeed"] = empty_deepspeed()
    if importlib.util.find_spec("flash_attn") is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent / "cpu_serving"))


if __name__ == "__main__":
    install()
    sys.argv[0] = "serve_rm"
    runpy.run_module("openrlhf.cli.serve_rm", run_name="__main__")

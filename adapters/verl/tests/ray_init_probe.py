"""Run ``python -m MODULE ARGS`` (as ``$PYTHON`` in launch.sh) and stop at its ``ray.init``.

Prints the keyword arguments of that call as one JSON line prefixed ``RAY_INIT `` and exits 0; a real
``ray.init`` would start a Ray cluster for a GPU job. Invoked as ``python ray_init_probe.py -m MODULE ARGS``; any
other command line runs as it would with this interpreter.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from typing import Any

import ray


def _stop(*args: Any, **kwargs: Any) -> None:
    print("RAY_INIT " + json.dumps(kwargs, default=str), flush=True)
    raise SystemExit(0)


if __name__ == "__main__":
    if sys.argv[1:2] != ["-m"]:
        os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
    module = sys.argv[2]
    ray.init = _stop
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    raise SystemExit(f"{module} returned without calling ray.init")

"""Run ``python -m verl.trainer.main_ppo ARGS`` (as ``$PYTHON`` in launch.sh) and stop at its ``ray.init``.

Prints the keyword arguments of that call as one JSON line prefixed ``RAY_INIT `` and exits 0; a real
``ray.init`` would start the trainer on a GPU cluster. Invoked as ``python ray_init_probe.py -m MODULE ARGS``; any
other command line (the launch script's other steps, its cluster check included) runs as it would with this
interpreter.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from typing import Any

import ray

TRAINER = "verl.trainer.main_ppo"


def _stop(*args: Any, **kwargs: Any) -> None:
    print("RAY_INIT " + json.dumps(kwargs, default=str), flush=True)
    raise SystemExit(0)


if __name__ == "__main__":
    if sys.argv[1:3] != ["-m", TRAINER]:
        os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
    module = sys.argv[2]
    ray.init = _stop
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    raise SystemExit(f"{module} returned without calling ray.init")

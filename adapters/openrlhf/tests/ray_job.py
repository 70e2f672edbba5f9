"""OpenRLHF's ``ray.init`` runtime env, evaluated from its installed source: its ``train`` does not import on CPU
(vLLM, peft). The rest of a ``submit.sh`` replay is :mod:`agentbridge.testing`'s (``ray_job_submitted``,
``ray_driver_env``, ``merge_as_ray_init``).
"""

from __future__ import annotations

import ast
import importlib.util
import types
from pathlib import Path
from typing import Any


def train_ray_init_runtime_env(module: str, environ: dict[str, str]) -> dict[str, Any]:
    """The ``runtime_env`` that ``module``'s ``train`` passes to ``ray.init``, with ``os.environ`` = ``environ``."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    train = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    call = next(n for n in ast.walk(train) if isinstance(n, ast.Call) and ast.unparse(n.func) == "ray.init")
    expr = next(k.value for k in call.keywords if k.arg == "runtime_env")
    code = compile(ast.Expression(expr), spec.origin, "eval")
    return eval(code, {"os": types.SimpleNamespace(environ=dict(environ))})  # noqa: S307 (the backend's own code)

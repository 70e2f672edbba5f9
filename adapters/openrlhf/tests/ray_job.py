"""A compiled job's ``submit.sh`` replayed on CPU up to OpenRLHF's ``ray.init``, with Ray's and OpenRLHF's code.

``submit.sh`` runs against a recorder that stands in for the ``ray`` CLI (no cluster runs here); Ray's CLI
parser builds the Job's runtime env from the recorded options; the entrypoint then runs in the job directory
with the environment Ray's job supervisor gives a driver, and :func:`merge_as_ray_init` merges the two runtime
envs exactly as ``ray.init`` does inside a Ray job. OpenRLHF's ``train`` does not import on CPU (vLLM, peft), so
:func:`train_ray_init_runtime_env` evaluates the ``runtime_env`` of its ``ray.init`` call from the installed source.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import types
from pathlib import Path
from typing import Any

JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # ray._private.runtime_env.constants


def submitted(submit: Path, tmp: Path, env: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The Job's runtime env and its entrypoint argv, as ``ray job submit`` gets them from ``submit``."""
    from ray.dashboard.modules.dashboard_sdk import parse_runtime_env_args

    bin_dir, record = tmp / "ray-cli", tmp / "ray-argv"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ray").write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" > {record}\n")
    (bin_dir / "ray").chmod(0o755)
    res = subprocess.run(["bash", str(submit)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **(env or {}), "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert res.returncode == 0, res.stderr
    argv = record.read_text().split("\0")[:-1]
    assert argv[:2] == ["job", "submit"], argv
    cut = argv.index("--")
    options = dict(zip(argv[2:cut:2], argv[3:cut:2], strict=True))
    runtime_env = parse_runtime_env_args(runtime_env_json=options.get("--runtime-env-json"),
                                         working_dir=options.get("--working-dir"))
    return runtime_env, argv[cut + 1:]


def driver_env(job_runtime_env: dict[str, Any]) -> dict[str, str]:
    """The environment of the Job's driver: the Job's ``env_vars`` and its injected job config."""
    return {**os.environ, **job_runtime_env.get("env_vars", {}),
            JOB_CONFIG_ENV: json.dumps({"runtime_env": job_runtime_env})}


def merge_as_ray_init(job_runtime_env: dict[str, Any], init_runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """``ray.init(runtime_env=init_runtime_env)`` inside the Job: Ray's merge, and its error on a conflict."""
    from ray.job_config import JobConfig
    from ray.runtime_env.runtime_env import _merge_runtime_env

    injected = JobConfig.from_json({"runtime_env": job_runtime_env})
    merged = _merge_runtime_env(injected.runtime_env, init_runtime_env,
                                override=os.getenv("RAY_OVERRIDE_JOB_RUNTIME_ENV") == "1")
    if merged is None:
        raise ValueError(f"Failed to merge the Job's runtime env {injected.runtime_env} with a ray.init's runtime "
                         f"env {init_runtime_env} because of a conflict")
    return dict(merged)


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

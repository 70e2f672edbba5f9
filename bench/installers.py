"""Installing into a fresh environment: pip (byte-compiling, as by default), pip without byte-compiling
(``PIP_NO_COMPILE=1``; where PYTHONDONTWRITEBYTECODE is set such an environment never gets .pyc files) and uv
(scripts/uv-env.sh: pip's package sources handed to uv, byte-compiling), alternated in one run so that the
machine's load falls on all three alike.

Each round creates three empty venvs and installs the same packages into each, timing the install only (wall
seconds). The first uv install fills uv's cache: it is run once before the rounds (and reported apart), as pip's own
cache is already filled by .venv here.

    python bench/installers.py [--rounds 3] [--packages torch==2.13.0 ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def uv_env() -> dict[str, str]:
    """The environment scripts/uv-env.sh gives uv: its variables, read by sourcing it."""
    out = subprocess.run(["bash", "-c", "source scripts/uv-env.sh && env"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def install(kind: str, venv: Path, packages: list[str], env: dict[str, str]) -> float:
    """Create ``venv`` and install ``packages`` with ``kind``; the install's wall seconds."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    if kind == "uv":
        cmd, run_env = [env["AGENTBRIDGE_UV"], "pip", "install", "-q", "--python", python, *packages], env
    else:
        cmd = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *packages]
        run_env = {**os.environ, **({"PIP_NO_COMPILE": "1"} if kind == "pip, no compile" else {})}
    start = time.perf_counter()
    subprocess.run(cmd, env=run_env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--packages", nargs="+", default=["torch==2.13.0", "transformers"])
    args = parser.parse_args()
    env = uv_env()
    if not env.get("AGENTBRIDGE_UV"):
        sys.exit("bench/installers.py: no uv in .venv (run scripts/install.sh)")
    kinds = ("pip", "pip, no compile", "uv")
    times: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        first = install("uv", Path(tmp) / "warm", args.packages, env)
        print(f"uv, first install (fills its cache): {first:.1f} s", flush=True)
        for r in range(args.rounds):
            for kind in kinds:
                venv = Path(tmp) / f"{kind.replace(', ', '-').replace(' ', '-')}-{r}"
                times[kind].append(install(kind, venv, args.packages, env))
                shutil.rmtree(venv)
            print(f"round {r + 1}: " + ", ".join(f"{k} {times[k][-1]:.1f} s" for k in kinds), flush=True)
    base = statistics.median(times["pip"])
    print(f"{' '.join(args.packages)} into a fresh venv, {args.rounds} rounds (median, min-max; ratio to pip):")
    for kind in kinds:
        t = times[kind]
        print(f"  {kind:16s} {statistics.median(t):6.1f} s ({min(t):.1f}-{max(t):.1f})  "
              f"{statistics.median(t) / base:.2f}x")


if __name__ == "__main__":
    main()

"""Backend environments: pinned virtual environments per backend (``agentbridge backends setup``), recorded so
later commands find them.

veRL, OpenRLHF and TRL pin conflicting versions (transformers above all), so each backend gets its own
interpreter. A recipe is a list of ``pip install`` steps; the CPU variant pins the CPU build of torch (tests, this
machine), the GPU variant takes the backend's inference engine (clusters). The record belongs to the project:
``.agentbridge/environments.json`` in the checkout (the nearest directory above the working directory with
``.git`` or ``pyproject.toml``), so a second checkout never runs with the first one's environments and source.
Setting ``$AGENTBRIDGE_HOME`` shares one record (``$AGENTBRIDGE_HOME/environments.json``) between projects instead.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

CPU_TORCH = "torch==2.13.0"  # the CPU build on this project's machines; an unpinned torch pulls CUDA wheels
# backend -> (module that must import, adapter distribution, adapter extra, CPU-only extra steps, GPU extras and the
# GPU steps after them)
FIRST_PARTY: dict[str, dict[str, Any]] = {
    # DeepSpeed (the GPU profiles' ZeRO-3) builds its ops against the installed torch: after, without build isolation
    "trl": {"module": "trl", "adapter": "agentbridge-trl", "extra": "backend", "gpu": ["trl[vllm]==1.16.0"],
            "gpu_post": [["--no-build-isolation", "deepspeed==0.19.6"]]},
    # veRL builds its FSDP actor with flash_attention_2 but lists flash-attn only under its `fsdp` extra; it
    # compiles against the installed torch, so it goes in after, without build isolation
    "verl": {"module": "verl", "adapter": "agentbridge-verl", "extra": "backend", "gpu": ["verl[vllm]==0.9.1"],
             "gpu_post": [["--no-build-isolation", "flash-attn==2.8.3"]]},
    # OpenRLHF's DeepSpeed and flash-attn cannot build without CUDA: on CPU it goes in without its dependencies
    # and the adapter's `cpu` extra brings the part that runs on CPU
    "openrlhf": {"module": "openrlhf", "adapter": "agentbridge-openrlhf", "extra": "backend", "cpu_extra": "cpu",
                 "cpu_pre": [["--no-deps", "openrlhf==0.11.2"]], "gpu": ["openrlhf[vllm]==0.11.2"]},
    # RLinf 0.3.0's declared dependencies drag in triton (liger_kernel), gsutil, nvitop, swanlab and more: on CPU it
    # goes in without them and the adapter's `cpu` extra brings what its validator and agent loop import. Its GPU
    # variant cannot be resolved: the engine extras pin an older transformers than agentbridge's driver needs
    "rlinf": {"module": "rlinf", "adapter": "agentbridge-rlinf", "extra": "backend", "cpu_extra": "cpu",
              "cpu_pre": [["--no-deps", "rlinf==0.3.0"]], "gpu": ["rlinf[agentic-sglang]==0.3.0"],
              "gpu_conflict": "RLinf 0.3.0's engine extras (agentic-sglang, agentic-vllm) pin transformers==4.51.1 "
                              "and agentbridge[hf] needs transformers>=5.5.3: no one environment holds both"},
    # slime is source only (PyPI `slime` is another project): no recipe can install it; its adapter says how to use a
    # checkout (and which commit it was verified against)
    "slime": {"module": "slime", "adapter": "agentbridge-slime", "extra": "cpu",
              "source_only": "slime is not on the package index; create an environment with agentbridge-slime[cpu] "
                             "and put a checkout of THUDM/slime (verified: 624b824) on PYTHONPATH, as "
                             "adapters/slime/README.md says"},
    # ROLL likewise (PyPI `roll` is another project)
    "roll": {"module": "roll", "adapter": "agentbridge-roll", "extra": "cpu",
             "source_only": "ROLL is not on the package index; create an environment with agentbridge-roll[cpu] "
                            "(and TransferQueue==0.1.6 --no-deps) and put a checkout of alibaba/ROLL (verified: "
                            "8eb27cc) on PYTHONPATH, as adapters/roll/README.md says"},
}
QWEN_VOCAB = ["--no-deps", "dashscope"]  # the real Qwen2.5 vocabulary (qwen.tiktoken) for builtin:tiny-qwen2.5


@dataclass
class Recipe:
    """How to build one backend's environment: ``pip install`` steps in order, and the module to check."""

    backend: str
    module: str
    variant: str
    steps: list[list[str]] = field(default_factory=list)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps([self.backend, self.variant, self.steps]).encode()).hexdigest()[:12]


def project_root(start: Path | None = None) -> Path:
    """The checkout the working directory belongs to: the nearest directory with ``.git`` or ``pyproject.toml``
    (the working directory itself when there is none)."""
    here = (start or Path.cwd()).absolute()
    return next((d for d in (here, *here.parents) if (d / ".git").exists() or (d / "pyproject.toml").is_file()),
                here)


def home() -> Path:
    """Where the environment record lives: ``$AGENTBRIDGE_HOME`` when set, else the project's ``.agentbridge``."""
    explicit = os.environ.get("AGENTBRIDGE_HOME")
    return Path(explicit) if explicit else project_root() / ".agentbridge"


def recorded() -> dict[str, dict[str, str]]:
    """Every recorded backend environment: ``{backend: {python, venv, variant, recipe, created}}``."""
    path = home() / "environments.json"
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def record(backend: str, entry: dict[str, str]) -> None:
    """Add ``backend``'s entry to the record; setups running at the same time each keep theirs (a file lock)."""
    home().mkdir(parents=True, exist_ok=True)
    with open(home() / "environments.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = recorded()
        data[backend] = entry
        partial = home() / f"environments.json.{os.getpid()}"
        partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        partial.replace(home() / "environments.json")


def source_of(dist: str, extra: str | None = None) -> list[str]:
    """How to install ``dist`` as it is installed here: ``-e DIR`` for an editable checkout, else ``dist==VERSION``
    (or the bare name when it is not installed here)."""
    suffix = f"[{extra}]" if extra else ""
    try:
        d = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return [f"{dist}{suffix}"]
    direct = d.read_text("direct_url.json")
    if direct:
        info = json.loads(direct)
        url = str(info.get("url", ""))
        if url.startswith("file://") and info.get("dir_info", {}).get("editable"):
            return ["-e", f"{url.removeprefix('file://')}{suffix}"]
    return [f"{dist}{suffix}=={d.version}"]


def plugin_distributions() -> list[str]:
    """The agentbridge plugin distributions installed here, backends' adapters excluded."""
    adapters = {str(v["adapter"]) for v in FIRST_PARTY.values()}
    dists = {ep.dist.name for ep in metadata.entry_points(group="agentbridge") if ep.dist is not None}
    return sorted(d for d in dists if d not in adapters and d != "agentbridge")


def recipe(backend: str, *, cpu: bool, plugins: list[str] | None = None, extra: list[str] | None = None) -> Recipe:
    """The first-party recipe for ``backend``; ``plugins`` defaults to every plugin installed here; ``extra``
    packages (e.g. pytest) join the main install step, so one resolve keeps the backend's pins."""
    if backend not in FIRST_PARTY:
        with_recipe = [name for name, info in FIRST_PARTY.items() if not info.get("source_only")]
        raise ValueError(f"backends setup: no recipe for '{backend}' (first-party: {', '.join(with_recipe)})")
    info = FIRST_PARTY[backend]
    if info.get("source_only"):
        raise ValueError(f"backends setup {backend}: {info['source_only']}")
    if not cpu and info.get("gpu_conflict"):
        raise ValueError(f"backends setup {backend} --gpu: {info['gpu_conflict']}")
    core = source_of("agentbridge", "hf" if backend != "verl" else None)  # veRL pins an older transformers
    adapter_extra = str(info.get("cpu_extra", info["extra"])) if cpu else str(info["extra"])
    packages = [*core, *[a for p in (plugins if plugins is not None else plugin_distributions())
                         for a in source_of(p)], *source_of(str(info["adapter"]), adapter_extra), *(extra or [])]
    steps: list[list[str]] = []
    if cpu:
        steps += [[CPU_TORCH], *info.get("cpu_pre", [])]
        steps.append([CPU_TORCH, *packages])
    else:
        steps += [[*packages, *info["gpu"]], *info.get("gpu_post", [])]
    steps.append(QWEN_VOCAB)
    return Recipe(backend, str(info["module"]), "cpu" if cpu else "gpu", steps)


def install_command(python: Path) -> list[str]:
    """The command that installs into ``python``'s environment: ``uv pip install`` where ``$AGENTBRIDGE_UV`` names a uv
    (scripts/uv-env.sh sets it, with pip's package sources handed to uv), else that environment's ``pip install``."""
    uv = os.environ.get("AGENTBRIDGE_UV", "")
    if uv and uv != "off":
        return [uv, "pip", "install", "--python", str(python), "-q"]
    return [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]


def setup(backend: str, venv: Path, *, cpu: bool, plugins: list[str] | None = None, extra: list[str] | None = None,
          say: Callable[[str], None] = print, dry_run: bool = False) -> Path:
    """Create (or bring up to date) ``venv`` for ``backend``, check that it imports, record it; returns its python."""
    plan = recipe(backend, cpu=cpu, plugins=plugins, extra=extra)
    python = venv / "bin" / "python"
    stamp = venv / ".agentbridge-environment"
    if dry_run:
        for step in plan.steps:
            say(f"pip install {' '.join(step)}")
        return python
    up_to_date = python.is_file() and stamp.is_file() and stamp.read_text().strip() == plan.digest()
    if up_to_date:
        say(f"[{backend}] {venv} is up to date ({plan.variant})")
    else:
        start = time.monotonic()
        if not python.is_file():
            say(f"[{backend}] creating {venv}")
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        installer = install_command(python)
        for i, step in enumerate(plan.steps, 1):
            say(f"[{backend}] step {i}/{len(plan.steps)}: pip install {' '.join(step)}")
            result = subprocess.run([*installer, *step], capture_output=True, text=True)
            if result.returncode != 0:
                lines = ([ln for ln in result.stderr.splitlines() if ln.startswith(("ERROR", "error:", "  ×"))]
                         or [f"{Path(installer[0]).name} failed"])
                raise ValueError(f"backends setup {backend}: step {i} failed: {lines[-1]}")
        stamp.write_text(plan.digest() + "\n")
        say(f"[{backend}] installed in {time.monotonic() - start:.0f}s")
    probe = (f"import {plan.module}, agentbridge; from importlib.metadata import version; "
             f"print(version({plan.module!r}))")
    check = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    if check.returncode != 0:
        tail = (check.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(f"backends setup {backend}: {venv} cannot import {plan.module}: {tail}")
    record(backend, {"python": str(python.absolute()), "venv": str(venv.absolute()), "variant": plan.variant,
                     "recipe": plan.digest(), "version": check.stdout.strip()})
    say(f"[{backend}] {plan.module} {check.stdout.strip()} at {python.absolute()} (recorded in "
        f"{home() / 'environments.json'})")
    return python



def _state(path: str | Path) -> str:
    return "found" if Path(path).is_file() else "does not exist"


def where_looked(backend: str, module: str) -> str:
    """Where :func:`agentbridge.backends.backend_python` looks for ``backend``'s environment, in its order, and
    what is there, in one line (for the message saying that none was found)."""
    import importlib.util

    try:
        here = "installed" if importlib.util.find_spec(module) is not None else "not installed"
    except (ImportError, ValueError):
        here = "not installed"
    variable = f"AGENTBRIDGE_{backend.upper()}_PYTHON"
    explicit = os.environ.get(variable)
    record_file = home() / "environments.json"
    saved = recorded().get(backend, {}).get("python")
    if saved:
        found = f"records {saved}, which {_state(saved)}"
    else:
        found = f"no entry for {backend}" if record_file.is_file() else "no such file"
    whose = ("the record $AGENTBRIDGE_HOME names" if os.environ.get("AGENTBRIDGE_HOME")
             else f"the record of the checkout {project_root()}")
    local = Path.cwd() / f".venv-{backend}" / "bin" / "python"
    places = [f"{module} in {sys.executable} ({here})",
              f"${variable} ({f'{explicit}, which {_state(explicit)}' if explicit else 'not set'})",
              f"{record_file} ({found}; {whose})",
              f"{local} ({_state(local)})"]
    return "looked at " + "; ".join(places)


def no_environment(backend: str, module: str) -> str:
    """One line: no environment for ``backend`` was found, where it was looked for (:func:`where_looked`), and how
    to get one."""
    return (f"{module} is not installed here and no environment for {backend} was found "
            f"({where_looked(backend, module)}); set AGENTBRIDGE_{backend.upper()}_PYTHON to its environment's "
            f"python, run from the checkout where `agentbridge backends setup {backend}` ran (or set AGENTBRIDGE_HOME "
            f"to its .agentbridge directory), or run `agentbridge backends setup {backend}`")

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

CPU_TORCH = "torch==2.13.0"  # the CPU build on this project's machines; an unpinned torch pulls CUDA wheels
QWEN_VOCAB = ["--no-deps", "dashscope"]  # the real Qwen2.5 vocabulary (qwen.tiktoken) for builtin:tiny-qwen2.5


@dataclass(frozen=True)
class EnvironmentRecipe:
    """How ``agentbridge backends setup`` builds a backend's environment, declared by its adapter (``environment``
    on :class:`agentbridge.adapter.Adapter`). Each step is one ``pip install``'s arguments.

    The CPU variant installs ``torch==2.13.0`` (CPU build), then ``cpu_pre``, then agentbridge, the plugins and the
    adapter with ``cpu_extra`` (``extra`` when None); the GPU variant installs agentbridge, the plugins, the adapter
    with ``extra`` and ``gpu`` in one step, then ``gpu_post``. ``gpu_conflict`` refuses the GPU variant and
    ``source_only`` both, each with its one line.
    """

    adapter: str  # the adapter's distribution (e.g. agentbridge-trl)
    extra: str | None = "backend"  # the adapter's extra that brings the backend (None: the adapter has none)
    core_extra: str | None = "hf"  # agentbridge's extra (None where the backend pins its own transformers)
    gpu: tuple[str, ...] = ()  # the backend's packages, in the main GPU step
    gpu_post: tuple[tuple[str, ...], ...] = ()  # GPU steps after it (what builds against the installed torch)
    cpu_extra: str | None = None  # the adapter's extra on CPU, when not ``extra``
    cpu_pre: tuple[tuple[str, ...], ...] = ()  # CPU steps before the main one (e.g. the backend without its deps)
    gpu_conflict: str = ""  # why no GPU environment can be resolved (empty: it can)
    source_only: str = ""  # why no recipe installs it and how to build its environment instead (empty: one does)

    @classmethod
    def from_checkout(cls, name: str, adapter: str, repo: str, commit: str, *, also: str = "") -> EnvironmentRecipe:
        """A backend that is not on the package index (source only): no recipe installs it, and its one line says
        how to build the environment from the adapter's ``cpu`` extra (``also``: what else to install) and a
        checkout of ``repo`` at the verified ``commit``."""
        short = name.lower()
        return cls(adapter=adapter, extra="cpu", source_only=(
            f"{name} is not on the package index; create an environment with {adapter}[cpu]{also} and put a checkout "
            f"of {repo} (verified: {commit[:7]}) on PYTHONPATH, as adapters/{short}/README.md says"))


def declared() -> dict[str, tuple[str, EnvironmentRecipe | None]]:
    """The installed backends' environment declarations: ``{backend: (module, recipe or None)}``, in the
    registry's order (a backend that fails to load is left out)."""
    from agentbridge.plugins import get_plugins

    registry = get_plugins().backends
    out: dict[str, tuple[str, EnvironmentRecipe | None]] = {}
    for name in registry.ids():
        try:
            backend = registry.get(name)
        except Exception:  # noqa: BLE001 - a broken backend package has no recipe to offer
            continue
        env = getattr(backend, "environment", None)
        out[name] = (str(getattr(backend, "module", name)), env if isinstance(env, EnvironmentRecipe) else None)
    return out


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
    adapters = {recipe.adapter for _, recipe in declared().values() if recipe is not None}
    dists = {ep.dist.name for ep in metadata.entry_points(group="agentbridge") if ep.dist is not None}
    return sorted(d for d in dists if d not in adapters and d != "agentbridge")


def recipe(backend: str, *, cpu: bool, plugins: list[str] | None = None, extra: list[str] | None = None) -> Recipe:
    """The recipe ``backend``'s adapter declares (its ``environment``); ``plugins`` defaults to every plugin installed
    here; ``extra`` packages (e.g. pytest) join the main install step, so one resolve keeps the backend's pins."""
    known = declared()
    module, info = known.get(backend, (backend, None))
    if info is None:
        with_recipe = [n for n, (_, r) in known.items() if r is not None and not r.source_only]
        offered = (f"installed backends with one: {', '.join(with_recipe)}" if with_recipe
                   else "no installed backend declares one")
        what = "its adapter declares none" if backend in known else f"no backend '{backend}' is installed here"
        raise ValueError(f"backends setup: no recipe for '{backend}' ({what}; {offered})")
    if info.source_only:
        raise ValueError(f"backends setup {backend}: {info.source_only}")
    if not cpu and info.gpu_conflict:
        raise ValueError(f"backends setup {backend} --gpu: {info.gpu_conflict}")
    core = source_of("agentbridge", info.core_extra)
    adapter_extra = (info.cpu_extra or info.extra) if cpu else info.extra
    packages = [*core, *[a for p in (plugins if plugins is not None else plugin_distributions())
                         for a in source_of(p)], *source_of(info.adapter, adapter_extra), *(extra or [])]
    steps: list[list[str]] = []
    if cpu:
        steps += [[CPU_TORCH], *(list(step) for step in info.cpu_pre)]
        steps.append([CPU_TORCH, *packages])
    else:
        steps += [[*packages, *info.gpu], *(list(step) for step in info.gpu_post)]
    steps.append(list(QWEN_VOCAB))
    return Recipe(backend, module, "cpu" if cpu else "gpu", steps)


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

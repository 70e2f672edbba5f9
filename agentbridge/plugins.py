"""Plugin manager: default plugins, entry-point discovery (group ``agentbridge``), registries.

Besides the installed entry points, a process can opt in to plugin modules that no distribution publishes (the
conformance suite's golden fixtures, a backend under test): :func:`enable_plugin` registers one in this process
and, through the ``AGENTBRIDGE_PLUGINS`` environment variable (comma-separated import paths), in the processes it
starts (a backend's own interpreter, Ray workers).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata as md
import inspect
import os
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pluggy

from agentbridge import __version__, hooks
from agentbridge.rewards import call_shape, callable_name, positional_only_required, reward_problem

ENTRY_POINT_GROUP = "agentbridge"
PLUGINS_ENV = "AGENTBRIDGE_PLUGINS"
KINDS = ("backends", "environments", "tools", "rewards", "datasets", "tool_parsers")
_SINGULAR = {"backends": "backend", "environments": "environment", "tools": "tool", "rewards": "reward",
             "datasets": "dataset", "tool_parsers": "tool parser"}


class PluginError(ValueError):
    """A plugin problem: duplicate ids, unknown ids, a plugin that failed to load (one line)."""


@dataclass
class Entry:
    id: str
    obj: Any
    plugin: str


@dataclass
class PluginInfo:
    name: str
    distribution: str
    version: str
    registered: dict[str, list[str]] = field(default_factory=dict)


class Registry:
    """Ids of one kind (tools, rewards, ...) and the plugin that registered each.

    ``rejected`` holds the ids whose object broke its hook's contract (:func:`contract_problem`), each with the
    line saying why: such an id is not in the registry, and looking it up answers with that line.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.entries: dict[str, Entry] = {}
        self.rejected: dict[str, Entry] = {}  # obj: the line saying what is wrong

    def _claim(self, id: str, plugin: str) -> None:
        if not isinstance(id, str) or not id:
            raise PluginError(f"plugin {plugin} registered a {_SINGULAR[self.kind]} without a string id")
        owner = self.entries.get(id) or self.rejected.get(id)
        if owner is not None:
            raise PluginError(f"{_SINGULAR[self.kind]} id '{id}' is registered by two plugins: {owner.plugin} and "
                              f"{plugin}")

    def add(self, id: str, obj: Any, plugin: str) -> None:
        self._claim(id, plugin)
        self.entries[id] = Entry(id, obj, plugin)

    def reject(self, id: str, line: str, plugin: str) -> None:
        """Keep ``id`` out of the registry; ``line`` (naming the plugin, the id and what is wrong) answers for it."""
        self._claim(id, plugin)
        self.rejected[id] = Entry(id, line, plugin)

    def __contains__(self, id: str) -> bool:
        return id in self.entries

    def ids(self) -> list[str]:
        return sorted(self.entries)

    def get(self, id: str) -> Any:
        if id not in self.entries:
            raise PluginError(self.unknown(id))
        return self.entries[id].obj

    def unknown(self, id: str) -> str:
        if id in self.rejected:
            return str(self.rejected[id].obj)
        close = difflib.get_close_matches(id, self.ids(), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(self.ids()) or 'none'}"
        return f"unknown {_SINGULAR[self.kind]} '{id}'{hint}"


class Plugins:
    """The plugin manager plus the registries filled by every plugin's ``register_*`` hooks.

    ``entry_points``: discover installed plugins (the ``agentbridge`` entry-point group) and the modules named in
    ``AGENTBRIDGE_PLUGINS``; ``extra``: ``(name, module)`` pairs registered in-process.
    """

    def __init__(self, *, entry_points: bool = True, extra: list[tuple[str, Any]] | None = None) -> None:
        self.pm = pluggy.PluginManager(hooks.PROJECT)
        self.pm.add_hookspecs(hooks)
        self.dists: dict[str, tuple[str, str]] = {}
        self.errors: list[str] = []
        from agentbridge import builtins

        self._add("agentbridge.builtins", builtins, ("agentbridge", __version__))
        if entry_points:
            for ep in sorted(md.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
                dist = (ep.dist.name, ep.dist.version) if ep.dist else ("?", "?")
                try:
                    self._add(ep.name, ep.load(), dist)
                except Exception as e:  # noqa: BLE001 - a broken plugin is reported, not fatal
                    self.errors.append(f"plugin {ep.name} ({dist[0]}) failed to load: {type(e).__name__}: {e}")
            for path in enabled_modules():
                try:
                    module = importlib.import_module(path)
                except Exception as e:  # noqa: BLE001 - reported like a broken entry point
                    self.errors.append(f"plugin {path} ({PLUGINS_ENV}) failed to load: {type(e).__name__}: {e}")
                    continue
                if not self.pm.is_registered(module):
                    self._add(path, module, distribution_of(path))
        for name, module in extra or []:
            self._add(name, module, ("(in-process)", ""))
        self.registries = {kind: Registry(kind) for kind in KINDS}
        for kind in KINDS:
            for impl in getattr(self.pm.hook, f"register_{kind}").get_hookimpls():
                self._collect(kind, impl)

    def register(self, name: str, module: Any, dist: tuple[str, str] = ("(in-process)", "")) -> None:
        """Add a plugin after construction: its ``register_*`` hooks fill the registries now."""
        self._add(name, module, dist)
        for kind in KINDS:
            for impl in getattr(self.pm.hook, f"register_{kind}").get_hookimpls():
                if impl.plugin_name == name:
                    self._collect(kind, impl)

    def unregister(self, name: str) -> None:
        """Remove a plugin and every id it registered."""
        self.pm.unregister(name=name)
        self.dists.pop(name, None)
        for registry in self.registries.values():
            registry.entries = {id: e for id, e in registry.entries.items() if e.plugin != name}
            registry.rejected = {id: e for id, e in registry.rejected.items() if e.plugin != name}

    def _add(self, name: str, module: Any, dist: tuple[str, str]) -> None:
        if self.pm.get_plugin(name) is not None:
            raise PluginError(f"two plugins are named '{name}': {self.dists[name][0]} and {dist[0]}")
        self.pm.register(module, name=name)
        self.dists[name] = dist

    def _collect(self, kind: str, impl: Any) -> None:
        """Run one plugin's ``register_<kind>`` hook. An object that breaks the hook's contract is left out of the
        registry with one line in ``errors`` (naming the plugin, the id and what is wrong); the hook goes on."""
        registry = self.registries[kind]
        plugin = impl.plugin_name
        singular = _SINGULAR[kind]

        def register(*args: Any) -> None:
            single = kind in ("backends", "tools")
            if len(args) != (1 if single else 2):
                shape = f"register({singular})" if single else f"register(id, {singular})"
                self.errors.append(f"plugin {plugin}: register_{kind} called {shape} with {len(args)} argument(s)")
                return
            if not single:
                id, obj = args
            elif kind == "tools":
                from agentbridge.tools import as_tool

                try:
                    obj = as_tool(args[0])
                except Exception as e:  # noqa: BLE001 - a signature @tool cannot read: one line, the others go on
                    name = getattr(args[0], "name", None) or getattr(args[0], "__name__", type(args[0]).__name__)
                    self.errors.append(f"plugin {plugin}: tool '{name}' was not registered: {type(e).__name__}: "
                                       f"{_one_line(str(e))}")
                    return
                id = obj.name
            else:
                obj = args[0]
                id = obj.name
            problem = contract_problem(kind, obj)
            if problem is None:
                registry.add(id, obj, plugin)
                return
            line = f"plugin {plugin}: {singular} '{id}' was not registered: {problem}"
            registry.reject(id, line, plugin)
            self.errors.append(line)

        try:
            impl.function(register=register)
        except PluginError:
            raise
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"plugin {plugin}: register_{kind} failed: {type(e).__name__}: {e}")

    def __getattr__(self, kind: str) -> Registry:
        if kind in KINDS and "registries" in self.__dict__:
            return self.__dict__["registries"][kind]
        raise AttributeError(kind)

    def info(self) -> list[PluginInfo]:
        """Each plugin with its distribution, version and the ids it registered."""
        out = []
        for name, (dist, version) in self.dists.items():
            registered = {kind: sorted(e.id for e in reg.entries.values() if e.plugin == name)
                          for kind, reg in self.registries.items()}
            out.append(PluginInfo(name, dist, version, {k: v for k, v in registered.items() if v}))
        return out

    @property
    def hook(self) -> Any:
        return self.pm.hook


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):  # a builtin or an object without a signature: nothing to check
        return None


def environment_problem(obj: Any) -> str | None:
    """What keeps ``obj`` from being an environment factory (the driver calls ``obj(**environment.args)``, plus
    ``tools=`` when the spec lists tools, and uses the result's async ``reset(task)``, ``step(action)`` and
    ``close()``); None when nothing does. A class is checked for those methods too."""
    if not callable(obj):
        return f"expected a class or factory called with the spec's environment.args, got {type(obj).__name__}"
    sig = _signature(obj)
    if sig is not None and (fixed := positional_only_required(sig)):
        return (f"{call_shape(obj, sig)}: positional-only parameter(s) {', '.join(fixed)} cannot be given; the "
                "driver calls it with keyword arguments (environment.args, tools=...)")
    if not inspect.isclass(obj):
        return None
    arity = {"reset": ("task",), "step": ("action",), "close": ()}
    for method, takes in arity.items():
        static = inspect.getattr_static(obj, method, None)
        fn = getattr(obj, method, None)
        if not callable(fn):
            return (f"{callable_name(obj)} has no {method}() method; an environment needs async reset(task), "
                    "step(action) and close() (agentbridge.env.Environment)")
        if isinstance(static, staticmethod | classmethod) or not inspect.isfunction(fn):
            continue
        if not inspect.iscoroutinefunction(fn):
            return f"{callable_name(obj)}.{method}() must be async (async def {method}): the driver awaits it"
        method_sig = _signature(fn)
        if method_sig is None:
            continue
        try:
            method_sig.bind(None, *takes)
        except TypeError:
            wanted = f"{method}(self{''.join(', ' + t for t in takes)})"
            shape = call_shape(fn, method_sig).replace(callable_name(fn), f"{callable_name(obj)}.{method}", 1)
            return f"{shape} cannot be called as {wanted}"
    return None


DATASET_KEYWORDS = ("split", "size", "seed")


def dataset_problem(obj: Any) -> str | None:
    """What keeps ``obj`` from being a task generator (called as ``obj(split=..., size=..., seed=..., **args)``,
    returning tasks); None when nothing does."""
    if not callable(obj):
        return f"expected a function (split, size, seed, **args) -> list[Task], got {type(obj).__name__}"
    sig = _signature(obj)
    if sig is None:
        return None
    params = sig.parameters.values()
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        missing = [k for k in DATASET_KEYWORDS if k not in named]
        if missing:
            return (f"{call_shape(obj, sig)} does not take {', '.join(missing)}; datasets are called as "
                    "fn(split=..., size=..., seed=..., **args)")
    if fixed := positional_only_required(sig):
        return (f"{call_shape(obj, sig)}: positional-only parameter(s) {', '.join(fixed)} cannot be given; datasets "
                "are called with keyword arguments")
    return None


def contract_problem(kind: str, obj: Any) -> str | None:
    """Why ``obj`` cannot serve as a ``kind`` (``"rewards"``, ``"tools"``, ``"environments"``, ``"datasets"``) the
    way the driver calls it, in one line; None when it can (or for a kind without a checked contract)."""
    if kind == "rewards":
        return reward_problem(obj)
    if kind == "tools":
        from agentbridge.tools import tool_problem

        return tool_problem(obj)
    if kind == "environments":
        return environment_problem(obj)
    if kind == "datasets":
        return dataset_problem(obj)
    return None


@cache
def get_plugins() -> Plugins:
    """The process-wide plugin manager (built once)."""
    return Plugins()


def enabled_modules() -> list[str]:
    """The plugin modules this process opted in to (``AGENTBRIDGE_PLUGINS``), in order."""
    return [p.strip() for p in os.environ.get(PLUGINS_ENV, "").split(",") if p.strip()]


def enable_plugin(module: str) -> None:
    """Opt this process, and every process it starts, in to the plugin module ``module`` (an import path).

    Registers it in the process-wide manager (when already built) and appends it to ``AGENTBRIDGE_PLUGINS``.
    Enabling a module twice is a no-op.
    """
    paths = enabled_modules()
    if module not in paths:
        os.environ[PLUGINS_ENV] = ",".join([*paths, module])
    if get_plugins.cache_info().currsize:
        plugins, loaded = get_plugins(), importlib.import_module(module)
        if not plugins.pm.is_registered(loaded):
            plugins.register(module, loaded, distribution_of(module))


def distribution_of(module: str) -> tuple[str, str]:
    """``(distribution, version)`` of the installed distribution shipping ``module``; else ``("(in-process)", "")``."""
    names = md.packages_distributions().get(module.split(".")[0], [])
    if not names:
        return ("(in-process)", "")
    try:
        return (names[0], md.version(names[0]))
    except md.PackageNotFoundError:
        return ("(in-process)", "")

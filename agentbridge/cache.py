"""agentbridge's cache: where built artefacts live (models, indexes, worlds, games), how their keys are made from
everything that builds them, and which entries a run used (for its manifest). ``--no-cache`` runs rebuild each entry
once (``AGENTBRIDGE_NO_CACHE``)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$AGENTBRIDGE_CACHE``, else ``$XDG_CACHE_HOME/agentbridge``, else ``~/.cache/agentbridge``."""
    if os.environ.get("AGENTBRIDGE_CACHE"):
        return Path(os.environ["AGENTBRIDGE_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "agentbridge"


_USED: dict[str, str] = {}     # cache entries this process used: what -> directory
_TOKEN_FILE = ".no-cache-token"  # in an entry rebuilt under AGENTBRIDGE_NO_CACHE: the token it was rebuilt for


def cache_key(*parts: object, code: tuple[Path | str, ...] = (), packages: tuple[str, ...] = ()) -> str:
    """A 16-hex key over everything that builds a cache entry: its inputs, the building code's files (their
    bytes) and the versions of the packages it builds with."""
    import hashlib
    from importlib import metadata

    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode() + b"\0")
    for file in code:
        h.update(Path(file).read_bytes() + b"\0")
    for dist in packages:
        try:
            h.update(f"{dist}=={metadata.version(dist)}".encode() + b"\0")
        except metadata.PackageNotFoundError:
            h.update(f"{dist}: absent".encode() + b"\0")
    return h.hexdigest()[:16]


def no_cache_token() -> str | None:
    """The token of a ``--no-cache`` run (``AGENTBRIDGE_NO_CACHE``): every entry it uses is rebuilt once for it,
    whichever of its processes gets there first."""
    token = os.environ.get("AGENTBRIDGE_NO_CACHE", "")
    return None if token in ("", "0") else token


def use_cache_entry(what: str, path: Path) -> bool:
    """Record that this run uses cache entry ``path`` for ``what``; True when the entry may be reused as it is
    (False under ``--no-cache`` until it has been rebuilt for this run: see ``mark_built``)."""
    _USED[what] = str(path)
    token = no_cache_token()
    if token is None:
        return True
    marker = path / _TOKEN_FILE
    return marker.is_file() and marker.read_text() == token


def mark_built(path: Path) -> None:
    """Note in a freshly built entry which ``--no-cache`` run built it (nothing outside such a run)."""
    token = no_cache_token()
    if token is not None:
        (path / _TOKEN_FILE).write_text(token)


def cache_entries_used() -> dict[str, str]:
    """Every cache entry this process used (``what`` -> directory), for run manifests."""
    return dict(_USED)

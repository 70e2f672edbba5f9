"""Print the ``export UV_...`` lines that give uv the package sources and limits pip is configured with here.

pip's configuration (``pip config list``: its files and ``PIP_*`` variables; a variable overrides a file) names where
packages come from on this machine: local wheel folders (find-links), extra indexes, a constraints file, the
certificate bundle and the network timeout. uv reads none of it, so scripts/uv-env.sh evaluates these lines before
uv installs anything: the same packages from the same places. ``unsafe-best-match`` is pip's way of choosing among
indexes (the best version wherever it is), not uv's first-index default.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

UV_NAMES = {"find-links": "UV_FIND_LINKS", "index-url": "UV_INDEX_URL", "extra-index-url": "UV_EXTRA_INDEX_URL",
            "constraint": "UV_CONSTRAINT", "cert": "SSL_CERT_FILE", "default-timeout": "UV_HTTP_TIMEOUT"}


def pip_settings() -> dict[str, str]:
    """pip's effective settings by name (``find-links`` ...), the environment's over the files'."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    settings: dict[str, str] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        name, value = key.rsplit(".", 1)[-1], value.strip().strip("'\"")
        if key.startswith(":env:"):
            settings[name] = value
        else:
            settings.setdefault(name, value)
    return settings


def main() -> None:
    settings = pip_settings()
    lines = ["export UV_INDEX_STRATEGY=unsafe-best-match"]
    for name, variable in UV_NAMES.items():
        if settings.get(name):
            value = settings[name].split() if name == "find-links" else [settings[name]]
            lines.append(f"export {variable}={shlex.quote(','.join(value) if name == 'find-links' else value[0])}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

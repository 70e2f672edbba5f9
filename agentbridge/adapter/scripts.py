"""The job's shell scripts: every value from a spec quoted, every note a comment."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

SCRIPT_HEAD = ("#!/usr/bin/env bash", "set -euo pipefail", 'JOB="$(cd "$(dirname "$0")" && pwd)"')


def write_script(path: Path, lines: Iterable[str], notes: Iterable[str] = ()) -> None:
    """An executable bash script: strict mode, ``$JOB`` (the script's directory), one ``# NOTE:`` comment per note
    (each of its lines a comment: a note may quote the spec), then ``lines``."""
    comments = ["# NOTE: " + "\n#   ".join(str(note).splitlines() or [""]) for note in notes]
    path.write_text("\n".join([*SCRIPT_HEAD, *comments, *lines]) + "\n")
    path.chmod(0o755)


def shell_quote(text: str, variables: Mapping[str, str] | None = None) -> str:
    """One shell word that reads as ``text`` exactly: single-quoted, so nothing in it is expanded, except the
    placeholders in ``variables`` (e.g. ``{"@OUT@": "OUT"}``), each of which becomes ``"$VAR"``. Every value from a
    spec that a generated script holds goes through this function."""
    if not variables:
        return shlex.quote(text)
    pattern = "(" + "|".join(re.escape(mark) for mark in variables) + ")"
    words = [f'"${{{variables[part]}}}"' if part in variables else shlex.quote(part)
             for part in re.split(pattern, text) if part]
    return "".join(words) or "''"


def default_line(var: str, value: str) -> str:
    """The script's line that sets ``VAR`` to ``value`` (quoted) unless the environment sets it already."""
    return f'if [ -z "${{{var}:-}}" ]; then {var}={shell_quote(value)}; fi'


def model_line(var: str, path: str) -> str:
    """The launch script's line that sets ``VAR`` to a model (``$VAR`` wins when set): a builtin is built (cached)
    by agentbridge with ``$PYTHON``; anything else goes to the backend verbatim, quoted."""
    if not path.startswith("builtin:"):
        return default_line(var, path)
    resolve = "import sys; from agentbridge.models import resolve_model_path as r; print(r(sys.argv[1]))"
    return f'if [ -z "${{{var}:-}}" ]; then {var}="$("$PYTHON" -c {shlex.quote(resolve)} {shlex.quote(path)})"; fi'


def run_dir_lines(spec_name: str) -> list[str]:
    """``launch.sh``'s run directory: ``$RUN_DIR`` (default ``runs/<spec name>``) made absolute, exported as
    ``AGENTBRIDGE_RUN_DIR`` for the driver's episodes."""
    return [default_line("RUN_DIR", f"runs/{spec_name}"),
            'mkdir -p "$RUN_DIR" && RUN_DIR="$(cd "$RUN_DIR" && pwd)"',
            'export AGENTBRIDGE_RUN_DIR="$RUN_DIR"']


def ray_submit_lines(python: str, environment: str) -> list[str]:
    """``submit.sh``'s first lines for a job submitted to a Ray cluster with the job directory as its working_dir:
    ``PYTHON`` (``environment`` says what it must hold, at the same path on every node), an absolute ``RUN_DIR``
    on shared storage (refused otherwise) and ``RAY_ADDRESS``."""
    return [
        "# Submit to a running Ray cluster (ray start --head; ray start --address=... on the other nodes).",
        "# The job directory is the Ray working_dir, so every node reads data, spec and config from its own copy.",
        f"# PYTHON is {environment}, at the same path on every node.",
        default_line("PYTHON", python),
        "# RUN_DIR: checkpoints and logs, written by ranks on every node: an absolute path on storage all nodes share",
        "case \"${RUN_DIR:-}\" in /*) ;; *) echo \"submit.sh: set RUN_DIR to an absolute directory on storage every "
        "node shares (now: '${RUN_DIR:-}')\" >&2; exit 2 ;; esac",
        "RAY_ADDRESS=\"${RAY_ADDRESS:-http://127.0.0.1:8265}\"",
    ]

"""The job's shell scripts: every value from a spec quoted, every note a comment."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

from agentbridge.runs import RUN_DIR_ENV  # where record_episode writes episodes.jsonl

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


def worker_env(run_dir: str = "$RUN_DIR", exported: Iterable[str] = ()) -> dict[str, str]:
    """The environment variables every Ray worker of a run needs for the run format, ``{name: shell expression}``
    (each expanded inside double quotes when the script runs): ``AGENTBRIDGE_RUN_DIR`` = ``run_dir`` (an absolute
    path: :func:`agentbridge.runs.record_episode` appends the driver's episodes to
    ``$AGENTBRIDGE_RUN_DIR/episodes.jsonl`` in whichever worker runs the agent), then each variable in ``exported``
    with its value in the script (``$NAME``): e.g. a metrics file the backend's trainer writes, or the trackers'
    directories.

    A worker on a running cluster inherits none of the entrypoint's environment: Ray starts it from its node's raylet
    with only the runtime env of its job (the Job's, merged with the one the backend's ``ray.init`` receives) and
    the actor's own. So these travel in that runtime env: in the Job's (:func:`runtime_env_json_lines`, when no key
    collides with the backend's ``ray.init``) or in the backend's own ``ray.init`` setting (veRL's
    ``ray_kwargs.ray_init.runtime_env.env_vars``)."""
    return {RUN_DIR_ENV: run_dir, **{name: f"${{{name}}}" for name in exported}}


# a bash function printing its argument as a JSON string: backslash, quote, newline and tab escaped (any bash >= 4)
JSON_STRING_FUNCTION = (r"""json_string() { local s="$1" b='\' q='"'; s="${s//"$b"/"$b$b"}"; """
                        r"""s="${s//"$q"/"$b$q"}"; s="${s//$'\n'/"${b}n"}"; s="${s//$'\t'/"${b}t"}"; """
                        r"""printf '"%s"' "$s"; }""")


def runtime_env_json_lines(var: str, env_vars: Mapping[str, str], **fields: object) -> list[str]:
    """Lines that set ``$VAR`` to a Ray runtime env in JSON (for ``ray job submit --runtime-env-json "$VAR"``):
    ``fields`` as given (e.g. ``excludes``) and ``env_vars``, whose values are shell expressions (e.g.
    :func:`worker_env`'s) expanded when the script runs and escaped for JSON there (a ``"`` or ``\\`` in a path
    stays data)."""
    marks = {json.dumps(f"@ENV{i}@"): value for i, value in enumerate(env_vars.values())}
    runtime_env = {**fields, **({"env_vars": dict(zip(env_vars, (json.loads(m) for m in marks), strict=True))}
                                if env_vars else {})}
    parts = re.split("(" + "|".join(map(re.escape, marks)) + ")", json.dumps(runtime_env)) if marks \
        else [json.dumps(runtime_env)]
    word = "".join(f'"$(json_string "{marks[part]}")"' if part in marks else shlex.quote(part)
                   for part in parts if part)
    return [JSON_STRING_FUNCTION, f"{var}={word}"]

"""The job's shell scripts: every value from a spec quoted, every note a comment."""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

from agentbridge.runs import RUN_DIR_ENV  # where record_episode writes episodes.jsonl

SCRIPT_HEAD = ("#!/usr/bin/env bash", "set -euo pipefail", 'JOB="$(cd "$(dirname "$0")" && pwd)"')
# launch.sh's comment on ROOT for a job that submit.sh hands to a Ray cluster as its working_dir
RAY_ROOT = "# ROOT: where the job's files are read from (. under a Ray job's working_dir, see submit.sh)."


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


def comment_lines(text: str, width: int = 106) -> list[str]:
    """``text`` as a script's comment lines (``# ``), wrapped at ``width`` between words."""
    return textwrap.wrap(text, width=width, initial_indent="# ", subsequent_indent="# ", break_long_words=False,
                         break_on_hyphens=False)


def ray_submit_script(python: str, environment: str, lines: Iterable[str], env_vars: Mapping[str, str],
                      command: str, *more: str, before_submit: Iterable[str] = (), carries: str = "",
                      ray_init: str = "") -> list[str]:
    """``submit.sh``'s lines for a job submitted to a Ray cluster: :func:`ray_submit_lines` (``python``,
    ``environment``), the backend's ``lines``, with ``carries`` the comment on what the Job's runtime env carries
    the run format to (``to every worker, ...``) and why no key of the backend's own ``ray.init`` (``ray_init``)
    collides with it, ``$RUNTIME_ENV`` with ``env_vars`` (:func:`runtime_env_json_lines`), ``before_submit``, then
    ``exec ray job submit`` of the job directory with that runtime env, whose entrypoint runs ``launch.sh`` there with
    ``ROOT``, ``PYTHON`` and ``RUN_DIR`` set: ``command`` ends that line (more variables, ``bash launch.sh`` and its
    arguments), ``more`` are the lines after it."""
    carried = comment_lines(f"the Job's runtime env carries the run format {carries}: workers on a running cluster "
                            f"inherit nothing from the entrypoint's shell. {ray_init}") if carries else []
    return [*ray_submit_lines(python, environment), *lines, *carried,
            *runtime_env_json_lines("RUNTIME_ENV", env_vars),
            *before_submit,
            'exec ray job submit --address "$RAY_ADDRESS" --working-dir "$JOB" \\',
            '  --runtime-env-json "$RUNTIME_ENV" \\',
            f'  -- env ROOT=. PYTHON="$PYTHON" RUN_DIR="$RUN_DIR" {command}', *more]


def hydra_entry_lines(entry: str, config_path: str, config_name: str, overrides: Iterable[str],
                      output: str) -> list[str]:
    """``launch.sh``'s trainer lines for a job's own Hydra entry ``$ROOT/<entry>``: its config ``config_name`` from
    ``config_path`` (a shell word), the ``overrides`` (:func:`override_words`), ``output=$RUN_DIR`` and the script's
    arguments."""
    return [f'"$PYTHON" "$ROOT/{entry}" --config-path {config_path} --config-name {config_name} \\',
            f"  {override_words(overrides)} \\", f'  {output}="$RUN_DIR" "$@"']


def entry_script(doc: str, module: str) -> str:
    """A job's entry file: its docstring ``doc`` and a call of ``<module>.main``."""
    return f'"""{doc}"""\n\nfrom {module} import main\n\nif __name__ == "__main__":\n    main()\n'


def latest_checkpoint_lines(var: str, pattern: str, separator: str) -> list[str]:
    """Lines that set ``$VAR`` to the directory matching ``pattern`` (a glob ending in ``<separator>N``) with a
    Hugging Face model (``config.json``) and the highest N, else to nothing."""
    return [f'{var}=""',
            f'for d in {pattern}; do [ -f "$d/config.json" ] || continue; '
            f'if [ -z "${var}" ] || [ "${{d##*{separator}}}" -gt "${{{var}##*{separator}}}" ]; '
            f'then {var}="$d"; fi; done']


def override_words(overrides: Iterable[str]) -> str:
    """Config overrides (each a shell word in double quotes, so ``$VAR`` in it expands) as one script line's words,
    continued onto a line each."""
    return " \\\n  ".join(f'"{o}"' for o in overrides)


def trainer_metrics_lines(module: str, label: str) -> list[str]:
    """``launch.sh``'s lines after the trainer that read the trainer's TensorBoard scalars into the run's
    ``metrics.jsonl`` (``python -m <module>.run_metrics``, which feeds ``on_metrics`` and the trackers)."""
    return [f"# the run format every backend writes: {label}'s TensorBoard scalars as metrics.jsonl (on_metrics, "
            "trackers)", f'"$PYTHON" -m {module}.run_metrics "$RUN_DIR" --job "$ROOT" || true']

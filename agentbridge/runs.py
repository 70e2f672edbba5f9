"""Run directories, normalized metrics and manifests."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbridge import __version__
from agentbridge.trajectory import FINISH_REASONS, Trajectory

if TYPE_CHECKING:
    from pydantic import ValidationError

METRIC_NAMES = ("step", "reward/mean", "reward/std", "episode/turns", "episode/response_tokens", "tools/calls",
                "tools/failures", "time/step_s", "time/generate_s", "time/env_s", "throughput/tokens_per_s",
                "memory/peak_gb")
IS_METRIC_NAMES: dict[str, str] = {
    "is/weight_mean": "mean importance weight the policy loss was multiplied by (after truncation or masking)",
    "is/ratio_mean": "mean per-token ratio exp(trainer - engine log-prob), before the cap",
    "is/capped_fraction": "share of the correction's tokens (or sequences) whose ratio was above the cap: truncated "
                          "or masked",
    "is/mismatch_kl": "k1 estimate of KL(engine || trainer): mean of engine - trainer log-prob per token",
    "is/logp_abs_diff": "mean |trainer - engine log-prob| per token",
}
"""The importance-sampling names a run's ``metrics.jsonl`` carries on every backend (name -> meaning): each adapter's
metric table (``NORMALIZED``) maps the backend's own metric onto one of them where the backend logs that quantity, and
logs nothing under a name whose quantity the backend does not compute. The backends' source names
(``docs/concepts/runs.md`` has the table, with where each is computed):

* ``is/weight_mean``: TRL ``sampling/importance_sampling_ratio/mean``; veRL ``rollout_corr/rollout_is_mean``.
* ``is/ratio_mean``: slime ``train/tis`` (``--use-tis``, IcePop); ROLL ``actor/train_infer_ratio_token_mean``.
* ``is/capped_fraction``: veRL ``rollout_corr/rollout_is_ratio_fraction_high``; OpenRLHF ``is_filter_ratio``; slime
  ``train/tis_clipfrac``, its MIS helper's ``train/mis_tis_truncate_fraction`` / ``train/mis_tis_mask_fraction_high``;
  ROLL ``actor/is_weight_clipfrac`` (truncation only).
* ``is/mismatch_kl``: veRL ``rollout_corr/kl``; OpenRLHF ``vllm_kl``; slime's MIS helper ``train/mis_kl``.
* ``is/logp_abs_diff``: TRL ``sampling/sampling_logp_difference/mean``; RLinf ``train/actor/rollout_train_kl`` (its
  FSDP actor); slime ``train/train_rollout_logprob_abs_diff``.
"""


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def batch_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Normalized metrics of a batch of episodes (rewards, turns, tokens, tools, finish reasons)."""
    rewards = [t.reward for t in trajectories]
    m = _mean(rewards)
    out: dict[str, float] = {
        "reward/mean": m,
        "reward/std": math.sqrt(_mean([(r - m) ** 2 for r in rewards])),
        "episode/turns": _mean([len(t.turns) for t in trajectories]),
        "episode/response_tokens": _mean([len(t.response_ids) for t in trajectories]),
        "tools/calls": _mean([t.metrics.get("tools/calls", 0.0) for t in trajectories]),
        "tools/failures": _mean([t.metrics.get("tools/failures", 0.0) for t in trajectories]),
        "tools/parse_errors": _mean([t.metrics.get("tools/parse_errors", 0.0) for t in trajectories]),
        "reward/errors": _mean([t.metrics.get("reward/errors", 0.0) for t in trajectories]),
    }
    for name in sorted({k for t in trajectories for k in t.reward_components}):
        out[f"reward/{name}"] = _mean([t.reward_components.get(name, 0.0) for t in trajectories])
    n = max(1, len(trajectories))
    for reason in FINISH_REASONS:
        out[f"finish/{reason}"] = sum(t.finish_reason == reason for t in trajectories) / n
    return out


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
            n += 1
    return n


def one_line(text: str, limit: int = 80) -> str:
    """``text`` on one line, control characters escaped, cut to ``limit`` characters: safe to print in a problem
    line whatever a file held."""
    flat = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def shown(value: Any, limit: int = 40) -> str:
    """A JSON value as a problem line quotes it: short, on one line."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return one_line(text, limit)


def invalid(error: ValidationError) -> str:
    """A pydantic validation error as one line: where the first fault is, what was expected, what was found."""
    errors = error.errors(include_url=False)
    if not errors:
        return "invalid"
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"])
    what = first["msg"].removeprefix("Value error, ")
    msg = f"{one_line(where)}: {what}" if where else what
    if "input" in first and first["type"] not in ("missing", "value_error"):  # a value error names what it saw
        msg += f" (got {shown(first['input'])})"
    return msg + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")


def read_jsonl(path: Path, problems: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each JSON object line of ``path``; a line that is not one (not UTF-8, not
    JSON, cut short, a list, a number, null) adds a problem line (``path:N: ...; skipped``) and is skipped, so a
    partial write or a stray line never stops a reader. An unreadable file is one problem line and no rows."""
    try:
        data = path.read_bytes()
    except OSError as e:
        problems.append(f"{path}: cannot be read ({one_line(e.strerror or str(e))}); skipped")
        return []
    rows = []
    for n, raw in enumerate(data.removeprefix(b"\xef\xbb\xbf").splitlines(), 1):  # \n, \r\n or \r: as written
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            problems.append(f"{path}:{n}: not UTF-8 text; skipped")
            continue
        except json.JSONDecodeError:
            problems.append(f"{path}:{n}: not valid JSON (a partial write?); skipped")
            continue
        except (ValueError, RecursionError):  # an integer of thousands of digits, nesting past Python's stack
            problems.append(f"{path}:{n}: not valid JSON (a number too long or nesting too deep); skipped")
            continue
        if not isinstance(row, dict):
            problems.append(f"{path}:{n}: not a JSON object (a {_json_type(row)}); skipped")
            continue
        rows.append((n, row))
    return rows


def _json_type(value: Any) -> str:
    return {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def read_json_object(path: Path, problems: list[str], consequence: str) -> dict[str, Any] | None:
    """The JSON object in the file ``path``; None (and one problem line ending in ``consequence``) when it cannot
    be read or is not JSON, or not an object."""
    try:
        loaded = json.loads(path.read_bytes().removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except OSError as e:
        problems.append(f"{path}: cannot be read ({one_line(e.strerror or str(e))}); {consequence}")
        return None
    except UnicodeDecodeError:
        problems.append(f"{path}: not UTF-8 text; {consequence}")
        return None
    except json.JSONDecodeError as e:
        problems.append(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); {consequence}")
        return None
    except (ValueError, RecursionError):
        problems.append(f"{path}: not valid JSON; {consequence}")
        return None
    if not isinstance(loaded, dict):
        problems.append(f"{path}: not a JSON object (a {_json_type(loaded)}); {consequence}")
        return None
    return loaded


MAX_PROBLEMS_PER_FILE = 200
_LINE = re.compile(r"^(.+?):\d+: ")


def limit_problems(problems: list[str], per_file: int = MAX_PROBLEMS_PER_FILE) -> list[str]:
    """``problems`` with at most ``per_file`` line-numbered ones (``path:N: ...``) per file, then one line saying
    how many more that file has: a file of garbage stays readable in a terminal and a page."""
    seen: dict[str, int] = {}
    out = []
    for line in problems:
        match = _LINE.match(line)
        if match is None:
            out.append(line)
            continue
        seen[match[1]] = seen.get(match[1], 0) + 1
        if seen[match[1]] <= per_file:
            out.append(line)
    out += [f"{path}: {n - per_file} more malformed lines not listed" for path, n in seen.items() if n > per_file]
    return out


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def package_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def text_hash(text: str) -> str:
    """sha256 of a text (chat templates, specs) as recorded in manifests."""
    return hashlib.sha256(text.encode()).hexdigest()


def spec_chat_template_hash(spec: Any) -> str | None:
    """The hash of the chat template a spec renders with (its override, else its tokenizer's); None when the
    tokenizer cannot be loaded here (e.g. a hub model that is not downloaded)."""
    try:
        if spec.model.chat_template:
            from agentbridge.rollout.agent import load_chat_template

            return text_hash(load_chat_template(spec.model.chat_template))
        from agentbridge.models import load_tokenizer, saved_chat_template

        # the model's files first: loading its tokenizer imports transformers (seconds, at every compile)
        template = saved_chat_template(spec.model.path) or load_tokenizer(spec.model.path).chat_template
    except Exception:  # noqa: BLE001 - a manifest field, never a failure
        return None
    return text_hash(template) if isinstance(template, str) else None


def manifest(*, kind: str, spec_hash: str, seed: int, command: list[str] | None = None,
             chat_template_hash: str | None = None, backend: str | None = None,
             versions: dict[str, str | None] | None = None, **extra: Any) -> dict[str, Any]:
    """What makes a job or run reproducible and comparable."""
    return {
        "kind": kind,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "backend": backend,
        "spec_hash": spec_hash,
        "chat_template_hash": chat_template_hash,
        "seed": seed,
        "command": command if command is not None else sys.argv,
        "versions": {"agentbridge": __version__, "python": platform.python_version(), **(versions or {})},
        **extra,
    }


RUN_JOB = "job"  # the job `agentbridge train` compiles for a run, inside its run directory


def manifest_kind(directory: Path) -> str | None:
    """``"run"`` or ``"job"`` when ``directory`` holds agentbridge's ``manifest.json`` of one, else None."""
    try:
        info = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return info.get("kind") if isinstance(info, dict) and info.get("kind") in ("run", "job") else None


def run_dir_problem(run_dir: Path) -> str | None:
    """Why ``run_dir`` cannot take a new run (one line), else None: it is free (missing, empty, or holding only the
    run's own job) or holds a run that may be kept aside or deleted. Only a run is ever moved or deleted."""
    if not run_dir.exists():
        return None
    if not run_dir.is_dir():
        return f"{run_dir}: not a directory; the run directory must be a new or empty directory"
    if not any(p.name != RUN_JOB for p in run_dir.iterdir()):
        return None
    if manifest_kind(run_dir) != "run":
        return (f"{run_dir}: not a run directory (it holds files but no run's manifest.json); nothing was moved or "
                "deleted: choose a new or empty directory")
    here, target = Path.cwd().resolve(), run_dir.resolve()
    if target == here or target in here.parents:
        return (f"{run_dir}: holds the current directory; nothing was moved or deleted: run from elsewhere or "
                "choose another run directory")
    return None


def keep_earlier_run(run_dir: Path, *, overwrite: bool = False) -> Path | None:
    """Make ``run_dir`` free for a new run without losing the one it holds: that run moves to
    ``<run_dir>@<its start time>`` (returned); with ``overwrite`` it is deleted instead. None when it was free
    (missing, empty, or holding only the run's own job). ValueError with :func:`run_dir_problem`'s line when
    ``run_dir`` holds anything but a run."""
    import shutil

    if problem := run_dir_problem(run_dir):
        raise ValueError(problem)
    if not run_dir.exists() or not any(p.name != RUN_JOB for p in run_dir.iterdir()):
        return None
    if overwrite:
        shutil.rmtree(run_dir)
        return None
    started = run_dir / "manifest.json"
    stamp = datetime.fromtimestamp(started.stat().st_mtime, UTC)
    kept = run_dir.with_name(f"{run_dir.name}@{stamp:%Y%m%dT%H%M%S}")
    n = 1
    while kept.exists():
        n += 1
        kept = run_dir.with_name(f"{run_dir.name}@{stamp:%Y%m%dT%H%M%S}-{n}")
    run_dir.rename(kept)
    return kept


RUN_DIR_ENV = "AGENTBRIDGE_RUN_DIR"  # set by a job's launch.sh: where a backend's workers record episodes
EPISODES_WITH_TOKENS = 8  # per worker process: full token-level records for the trajectory viewer
_recorded = 0


def record_episode(traj: Trajectory, backend: str) -> None:
    """Append one episode to ``$AGENTBRIDGE_RUN_DIR/episodes.jsonl``, from inside a backend's own rollout workers
    (veRL's agent loop, OpenRLHF's executor): the run format every backend writes. Nothing when the variable is
    unset. Backends do not tell their workers the step, so records carry the time; the first
    :data:`EPISODES_WITH_TOKENS` of each process keep their tokens."""
    global _recorded
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return
    import time

    record = {"backend": backend, "time": time.time(), **traj.to_dict(tokens=_recorded < EPISODES_WITH_TOKENS)}
    append_jsonl(Path(run_dir) / "episodes.jsonl", record)
    _recorded += 1

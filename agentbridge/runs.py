"""Run directories, normalized metrics and manifests."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from agentbridge import __version__
from agentbridge.rollout.trajectory import FINISH_REASONS, Trajectory

METRIC_NAMES = ("step", "reward/mean", "reward/std", "episode/turns", "episode/response_tokens", "tools/calls",
                "tools/failures", "time/step_s", "time/generate_s", "time/env_s", "throughput/tokens_per_s",
                "memory/peak_gb")


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def episode_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
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


def read_jsonl(path: Path, problems: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each JSON object line of ``path``; a line that is not one adds a problem line
    (``path:N: ...; skipped``) and is skipped, so a partial write or a stray line never stops a reader."""
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            problems.append(f"{path}:{n}: not valid JSON (a partial write?); skipped")
            continue
        if not isinstance(row, dict):
            problems.append(f"{path}:{n}: not a JSON object; skipped")
            continue
        rows.append((n, row))
    return rows


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
        from agentbridge.models import load_tokenizer

        template = load_tokenizer(spec.model.path).chat_template
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


def keep_earlier_run(run_dir: Path, *, overwrite: bool = False) -> Path | None:
    """Make ``run_dir`` free for a new run without losing the one it holds: that run moves to
    ``<run_dir>@<its start time>`` (returned); with ``overwrite`` it is deleted instead. None when it was free."""
    import shutil

    if not run_dir.exists() or (run_dir.is_dir() and not any(run_dir.iterdir())):
        return None
    if overwrite:
        shutil.rmtree(run_dir) if run_dir.is_dir() else run_dir.unlink()
        return None
    started = run_dir / "manifest.json"
    stamp = datetime.fromtimestamp((started if started.exists() else run_dir).stat().st_mtime, UTC)
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

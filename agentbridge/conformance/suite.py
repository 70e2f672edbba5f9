"""Run the golden episodes through a backend and compare what it ends up with against the driver alone.

A backend takes part by implementing ``conformance(kind, workdir) -> list[EpisodeRecord]``: compile the golden
spec (:func:`golden_spec`) into its own job (for the ``lengths`` kind, with its own sequence-length settings at
:data:`~agentbridge.conformance.golden.BACKEND_LENGTHS`), push the golden tasks through its real rollout path with
:func:`~agentbridge.conformance.golden.golden_turn` as the inference engine, and read each episode back from the
backend's own training batch. When the backend's package does not import here, the suite runs that method in the
backend's environment (``python -m agentbridge.conformance records``).

A field the backend does not hold under that job is None in its records (OpenRLHF's default job keeps no rollout
log-probs); the suite reports it as a note, never as a pass, and as a difference unless the backend declares it in
its ``rollout_not_held`` (field -> why; :func:`not_held`). A backend may add records read from another job of the
golden spec (``EpisodeRecord.job`` naming its settings) to check those fields there: each note then says under which
job the field was checked (:func:`agentbridge.conformance.records.notes`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentbridge.conformance.golden import (
    BACKEND_LENGTHS,
    KIND_SETS,
    KINDS,
    LENGTHS,
    VLM,
    GoldenPolicy,
    cases,
    enable_golden,
    golden_spec_path,
)
from agentbridge.conformance.records import EpisodeRecord, compare, notes, record_of
from agentbridge.spec import Spec, load_spec


class ConformanceError(ValueError):
    """The suite could not run for a backend (one line saying why)."""


@dataclass
class SuiteResult:
    """One backend on one kind of golden episodes: the records, one line per difference, and one note per field
    the backend's default job does not hold (neither a pass nor a difference)."""

    backend: str
    kind: str
    problems: list[str] = field(default_factory=list)
    records: list[EpisodeRecord] = field(default_factory=list)
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def case_fields(self) -> dict[str, list[str]]:
        """For each golden case, the fields that differ (empty when the case conforms)."""
        out: dict[str, list[str]] = {c: [] for c in cases(self.kind)}
        for line in self.problems:
            for case in out:
                if f"case {case}:" in line or f"case {case}[" in line:
                    words = line.split("]: ", 1)[-1].split(": ", 1)[-1].split()
                    out[case].append(words[0] if words else "?")
        return out


def golden_spec(kind: str, sets: list[str] | None = None) -> Spec:
    """The golden spec of one kind (``text`` or ``vlm``), with optional ``--set`` overrides; enables the golden
    plugin (:func:`~agentbridge.conformance.golden.enable_golden`), which its ids need."""
    enable_golden()
    path = golden_spec_path(kind)
    return load_spec(str(path), [*KIND_SETS.get(kind, []), *(sets or [])])


def reference_records(kind: str, turn_credit: bool = True) -> list[EpisodeRecord]:
    """The golden episodes run by agentbridge's driver alone, as every backend must train on them (an empty
    episode as the core's fallback sample, :func:`agentbridge.rollout.training.training_sequence`). For the
    ``lengths`` kind the driver's budgets are cut to :data:`~agentbridge.conformance.golden.BACKEND_LENGTHS` by
    the one budget rule (:func:`~agentbridge.rollout.agent_edge.fit_limits`). Rewards sit on the tokens by the
    spec's ``algorithm.credit``, or on each episode's last token for a backend without ``turn_credit``."""
    from agentbridge.rollout.agent import Agent
    from agentbridge.rollout.agent_edge import fit_limits
    from agentbridge.rollout.training import task_prompt_ids, training_sequence

    agent = Agent.from_spec(golden_spec(kind))
    if kind == LENGTHS:
        agent.limits = fit_limits(agent.limits, **BACKEND_LENGTHS)
    tasks = agent.tasks("train")
    trajectories = asyncio.run(agent.run(tasks, GoldenPolicy(agent.tokenizer)))
    records = []
    for task, traj in zip(tasks, trajectories, strict=True):
        seq = training_sequence(traj, agent.renderer.eos_token_id,
                                task_prompt_ids(agent.renderer, task, agent.spec.agent.system_prompt))
        credit = agent.spec.algorithm.credit if turn_credit else "episode"
        records.append(replace(record_of(traj, credit=credit), prompt_ids=seq.prompt_ids, response_ids=seq.response_ids,
                               response_mask=seq.response_mask, logprobs=seq.logprobs))
    return records


def _backend(name: str) -> Any:
    from agentbridge.plugins import get_plugins

    registry = get_plugins().backends
    if name not in registry:
        raise ConformanceError(f"--backend: {registry.unknown(name)} (installed: {', '.join(registry.ids())})")
    return registry.get(name)


def not_held(backend: Any) -> dict[str, str]:
    """The record fields a backend declares its default job does not hold (``rollout_not_held``: field -> why)."""
    return dict(getattr(backend, "rollout_not_held", None) or {})


def backend_records(name: str, kind: str, workdir: Path) -> list[EpisodeRecord]:
    """A backend's records of the golden episodes: in this interpreter when its package imports here, else in the
    backend's own environment (see :func:`agentbridge.backends.backend_python`)."""
    from agentbridge.backends import backend_python

    backend = _backend(name)
    if not callable(getattr(backend, "conformance", None)):
        raise ConformanceError(f"backend {name} has no conformance(kind, workdir) method")
    enable_golden()  # here and in the backend's own environment (AGENTBRIDGE_PLUGINS)
    module = getattr(backend, "module", name)
    if importlib.util.find_spec(module) is not None:
        return list(backend.conformance(kind, workdir))
    python = backend_python(name, module)
    if python is None:
        from agentbridge.backend_envs import no_environment

        raise ConformanceError(f"backend {name}: {no_environment(name, module)}")
    cmd = [python, "-m", "agentbridge.conformance", "records", name, "--kind", kind, "--workdir", str(workdir)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    try:
        payload = json.loads(lines[-1])
    except (json.JSONDecodeError, IndexError):
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConformanceError(f"backend {name}: the conformance run in {python} failed: {tail}") from None
    if "error" in payload:
        raise ConformanceError(f"backend {name}: {payload['error']}")
    return [EpisodeRecord.from_dict(d) for d in payload["records"]]


def run_suite(name: str, kinds: tuple[str, ...] = KINDS, workdir: Path | None = None) -> list[SuiteResult]:
    """Run the golden episodes of each kind through backend ``name``; compare with the driver's reference."""
    backend = _backend(name)
    results = []
    for kind in kinds:
        result = SuiteResult(backend=name, kind=kind)
        results.append(result)
        if kind == VLM and not backend.capabilities().multimodal:
            result.skipped = f"{name} does not declare multimodal support"
            continue
        spec = golden_spec(kind)
        samples = spec.algorithm.group_size
        with tempfile.TemporaryDirectory(prefix=f"conformance-{name}-{kind}-") as tmp:
            try:
                result.records = backend_records(name, kind, Path(workdir or tmp) / kind)
            except ConformanceError as e:
                result.problems = [str(e)]
                continue
        turn_credit = backend.capabilities().turn_credit
        result.problems = compare(reference_records(kind, turn_credit), result.records, name, samples=samples,
                                  not_held=not_held(backend))
        result.notes = notes(result.records, name)
        held = [r for r in result.records if not r.job and r.token_rewards is not None]
        if spec.algorithm.credit == "turn" and not turn_credit and held:
            result.notes.append(f"{name}: algorithm.credit turn: per-turn rewards checked summed on each episode's "
                                "last token (the backend trains on one reward per episode)")
    return results

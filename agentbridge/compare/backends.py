"""``agentbridge compare``: one spec through several backends, side by side.

For each backend: compile the spec, validate the job with the backend's own validators in its own environment,
optionally run the conformance suites (rollouts, algorithms, one optimizer step), and train where this machine
can (a backend that trains on CPU, and a spec that asks for no GPUs). The report then draws every run next to
the others, with a table of what each backend did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agentbridge.spec import Spec

if TYPE_CHECKING:
    from agentbridge.conformance.algorithms import Cell


@dataclass
class Outcome:
    """What happened to one backend: a short status per stage, the problem lines, and its run directory."""

    backend: str
    compile: str = "-"
    validate: str = "-"
    conformance: str = "not asked"
    run: str = "-"
    run_dir: Path | None = None
    problems: list[str] = field(default_factory=list)
    semantics: dict[str, str] = field(default_factory=dict)  # what the job will do, by the backend's own config
    algorithms: list[Cell] = field(default_factory=list)  # its column of the algorithm x backend table

    def row(self) -> dict[str, str]:
        return {"backend": self.backend, "compile": self.compile, "validate": self.validate,
                "conformance": self.conformance, "run": self.run}


def _one(spec: Spec, name: str, out: Path, *, conformance: bool, train: bool, say: Callable[[str], None]) -> Outcome:
    from agentbridge.backends import BackendNotInstalled, compile_job, get_backend
    from agentbridge.spec import SpecError

    result = Outcome(name)
    try:
        backend = get_backend(name)
    except BackendNotInstalled as e:
        result.compile = "not installed"
        result.problems.append(f"{name}: {e}")
        return result
    say(f"[{name}] compile")
    try:
        job = compile_job(spec, backend, out / "jobs" / name)
    except SpecError as e:
        result.compile = "rejected"
        result.problems += [f"{name}: {p}" for p in e.problems]
        return result
    result.compile = f"ok: {job.path}"
    say(f"[{name}] validate")
    report = backend.validate(job)
    result.semantics = dict(report.details.get("semantics") or {})
    result.validate = "ok" if report.ok else f"{len(report.problems)} problem(s)"
    result.problems += [f"{name}: validate: {p}" for p in report.problems]
    if conformance:
        from agentbridge.conformance import run_suite

        say(f"[{name}] conformance")
        suite = run_suite(name)
        failed = [line for r in suite for line in r.problems]
        ran = [r.kind for r in suite if not r.skipped]
        result.conformance = (f"identical ({', '.join(ran)})" if not failed else f"{len(failed)} difference(s)")
        # a field the backend's job does not hold is neither identical nor a difference: say where it was checked
        kinds_of: dict[str, list[str]] = {}  # each note once, with the kinds it came from
        for r in suite:
            for note in r.notes:
                kinds_of.setdefault(note, []).append(r.kind)
        result.conformance += "".join(f"; {note} ({', '.join(kinds)})" for note, kinds in kinds_of.items())
        result.problems += failed
        from agentbridge.conformance.algorithms import problem_lines, run_algorithms

        say(f"[{name}] algorithm conformance")
        try:
            cells = run_algorithms(name)
        except Exception as e:  # noqa: BLE001 - one line in the report, the other backends go on
            result.problems.append(f"{name}: algorithms: {e}")
        else:  # the backend's column of the algorithm x backend table (see `agentbridge conformance --algorithms`)
            result.algorithms = cells
            result.conformance += "; algorithms: " + ", ".join(
                f"{c.algorithm} {c.status}" + (f" {','.join(c.unexpected() if c.status == '✘' else c.differing())}"
                                               if c.status in ("≠", "✘") else "")
                for c in cells if c.status != "n/a")
            result.problems += [f"{name}: algorithms: {line}" for line in problem_lines(cells)
                                if "(undocumented)" in line or "yet equal" in line]
        from agentbridge.conformance.step import ALGORITHM, run_step, step_lines

        say(f"[{name}] one optimizer step")
        try:
            step = run_step(name)
        except Exception as e:  # noqa: BLE001 - one line in the report, the other backends go on
            result.problems.append(f"{name}: one step: {e}")
        else:  # the backend's row of the one-step table
            result.conformance += f"; one step ({ALGORITHM}): " + (
                f"not run on CPU ({step.stopped})" if step.status == "stopped" else
                f"{step.status} " + ", ".join(f"{q} {d:.2g}" for q, d in step.deltas.items()))
            if step.status == "✘":
                result.problems += [f"{name}: {line}" for line in step_lines([step])]
    caps = backend.capabilities()
    if not report.ok:
        result.run = "not run: the job did not validate"
    elif not train:
        result.run = "not asked"
    elif not caps.cpu_training:
        result.run = f"not run here: {name} trains on GPUs (submit.sh in the job)"
    elif spec.resources.gpus_per_node > 0:
        result.run = f"not run here: the spec asks for {spec.resources.gpus_per_node} GPU(s) per node"
    else:
        say(f"[{name}] train")
        run_dir = backend.launch(job, None, run_dir=out / "runs" / name)
        result.run, result.run_dir = f"ok: {run_dir}", Path(run_dir)
    return result


def compare_backends(spec: Spec, names: list[str], out: Path, *, conformance: bool = False, train: bool = True,
                     say: Callable[[str], None] = print) -> tuple[Path, list[Outcome], list[str]]:
    """Run ``spec`` through each backend in ``names``; returns ``report.html``, the outcomes and problem lines."""
    from agentbridge.backends import JobError
    from agentbridge.compare.report import write_comparison

    outcomes = []
    for name in names:
        try:
            outcomes.append(_one(spec, name, out, conformance=conformance, train=train, say=say))
        except (JobError, ValueError) as e:  # one backend failing never hides the others
            failed = Outcome(name, problems=[f"{name}: {e}"])
            failed.run = "failed"
            outcomes.append(failed)
    runs = [o.run_dir for o in outcomes if o.run_dir is not None]
    semantics = {o.backend: o.semantics for o in outcomes if o.semantics}
    algorithms = {o.backend: o.algorithms for o in outcomes if o.algorithms}
    path, report_problems = write_comparison(runs, out / "report", backends=[o.row() for o in outcomes],
                                         semantics=semantics, algorithms=algorithms)
    return path, outcomes, [p for o in outcomes for p in o.problems] + report_problems

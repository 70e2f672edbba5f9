"""The ``mini`` backend: the Backend protocol (capabilities, check, compile, validate, launch, conformance)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentbridge.backends import (
    Capabilities,
    Job,
    JobError,
    Problem,
    Report,
    algorithm_problem,
    known_capabilities,
)
from agentbridge.runs import manifest, write_jsonl
from agentbridge.spec import Spec, SpecError, dump_spec, load_spec, spec_hash
from agentbridge_mini import __version__

OPTIONS = {"policy": ("model", "expert")}  # backend.options this backend understands, with their allowed values
JOB_FILES = ("spec.yaml", "mini.json", "data", "launch.sh")


class MiniBackend:
    """Collects GRPO rollout batches with agentbridge's driver and writes them to the run directory.

    It does not update weights: it is the smallest backend that shows an adapter's parts (the policy, the task
    codec, the trajectory-to-batch conversion and the config mapping) and passes the conformance suite.
    """

    name = "mini"
    module = "agentbridge_mini"  # what must import for this backend to run here

    def capabilities(self) -> Capabilities:
        return Capabilities(algorithms=["grpo"], multimodal=False, cpu_training=False,
                            notes=["collects batches only: no weight updates"])

    def options(self, spec: Spec) -> dict[str, Any]:
        """The backend options of ``spec`` that apply here (another backend's options are not ours)."""
        return dict(spec.backend.options) if spec.backend.name == self.name else {}

    def check(self, spec: Spec) -> list[Problem]:
        """What in ``spec`` this backend cannot run, one line each."""
        problems = []
        bad_algo = algorithm_problem(spec, self.name, self.capabilities(), known_capabilities())
        if bad_algo is not None:
            problems.append(bad_algo)
        for key, value in self.options(spec).items():
            if key not in OPTIONS:
                problems.append(Problem(f"backend.options.{key}", f"unknown mini option; known: {', '.join(OPTIONS)}"))
            elif value not in OPTIONS[key]:
                problems.append(Problem(f"backend.options.{key}", f"must be one of {', '.join(OPTIONS[key])}"))
        return problems

    def config(self, spec: Spec) -> dict[str, Any]:
        """The spec mapped to this backend's own configuration (``mini.json``)."""
        algo = spec.algorithm
        return {"steps": algo.steps, "batch_size": algo.batch_size, "group_size": algo.group_size,
                "policy": self.options(spec).get("policy", "model"), "seed": spec.seed}

    def compile(self, spec: Spec, out: Path) -> Job:
        """Write the job directory: spec, dataset rows, ``mini.json``, ``launch.sh`` and the manifest."""
        from agentbridge.rollout.agent import load_tasks
        from agentbridge_mini.batch import encode_task

        out = Path(out)
        (out / "data").mkdir(parents=True, exist_ok=True)
        train = load_tasks(spec, "train")
        write_jsonl(out / "data" / "train.jsonl", (encode_task(t) for t in train))
        (out / "spec.yaml").write_text(dump_spec(spec))
        (out / "mini.json").write_text(json.dumps(self.config(spec), indent=2) + "\n")
        launch = out / "launch.sh"
        launch.write_text('#!/usr/bin/env bash\nset -euo pipefail\nJOB="$(cd "$(dirname "$0")" && pwd)"\n'
                          'exec "${PYTHON:-python}" -m agentbridge_mini.run "$JOB" "${RUN_DIR:-runs/mini}"\n')
        launch.chmod(0o755)
        job = Job(backend=self.name, path=out, manifest=manifest(
            kind="job", backend=self.name, spec_hash=spec_hash(spec), seed=spec.seed,
            versions={"agentbridge-mini": __version__}, files=sorted(p.name for p in out.iterdir()),
            tasks={"train": len(train)}))
        job.write_manifest()
        return job

    def validate(self, job: Job) -> Report:
        """The job's files are there, its spec loads and this backend can run it."""
        missing = [f for f in JOB_FILES if not (job.path / f).exists()]
        if missing:
            return Report(ok=False, problems=[Problem(str(job.path), f"missing {', '.join(missing)}; compile again")])
        try:
            spec = load_spec(job.path / "spec.yaml")
        except SpecError as e:
            return Report(ok=False, problems=[Problem(str(job.path / "spec.yaml"), p) for p in e.problems])
        problems = self.check(spec)
        return Report(ok=not problems, problems=problems)

    def launch(self, job: Job, runner: Any = None, run_dir: Path | None = None) -> Path:
        """Run the job with ``runner``'s interpreter (this one by default); returns the run directory."""
        run_dir = Path(run_dir or Path("runs") / job.path.name)
        env = {**os.environ, "RUN_DIR": str(run_dir), "PYTHON": getattr(runner, "python", sys.executable)}
        result = subprocess.run(["bash", str(job.path / "launch.sh")], env=env)
        if result.returncode != 0:
            raise JobError(f"the mini job failed (exit {result.returncode}); see the output above")
        return run_dir

    def conformance(self, kind: str, workdir: Path) -> list[Any]:
        """The golden episodes of ``kind`` through this backend's path: task rows in, batch rows out, read back."""
        from agentbridge.conformance import GoldenPolicy, golden_spec
        from agentbridge.rollout.agent import Agent
        from agentbridge_mini.batch import encode_task, records_of
        from agentbridge_mini.run import collect_batch, read_jsonl

        spec = golden_spec(kind)
        agent = Agent.from_spec(spec)
        rows = [encode_task(t) for t in agent.tasks("train")]
        batch = collect_batch(agent, rows, GoldenPolicy(agent.tokenizer), spec.algorithm.group_size)
        write_jsonl(Path(workdir) / "batch.jsonl", batch)
        return records_of(read_jsonl(Path(workdir) / "batch.jsonl"))

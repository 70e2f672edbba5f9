"""The ``mini`` backend: the Backend protocol (capabilities, check, compile, validate, launch, conformance)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentbridge import adapter_kit as kit
from agentbridge.backends import Capabilities, Job, Problem, Report
from agentbridge.runs import write_jsonl
from agentbridge.spec import Spec, SpecError, dump_spec
from agentbridge_mini import __version__

POLICIES = ("model", "expert")
# backend.options this backend understands; max_len: the tokens a batch row keeps (prompt + response)
OPTIONS = ("policy", "max_len")
JOB_FILES = ("spec.yaml", "mini.json", "data", "launch.sh")


class MiniBackend:
    """Collects GRPO rollout batches with agentbridge's driver and writes them to the run directory.

    It does not update weights: it is the smallest backend that shows an adapter's parts (the policy, the task
    codec, the trajectory-to-batch conversion and the config mapping) and passes the conformance suite.
    """

    name = "mini"
    module = "agentbridge_mini"  # what must import for this backend to run here
    # the episode record fields its batches do not keep (the conformance suite fails on any other that is None)
    rollout_not_held = {"token_rewards": "a GRPO batch keeps one reward per episode, no per-token rewards"}

    def capabilities(self) -> Capabilities:
        return Capabilities(algorithms=["grpo"], multimodal=False, cpu_training=False,
                            notes=["collects batches only: no weight updates"])

    def options(self, spec: Spec) -> dict[str, Any]:
        """The backend options of ``spec`` that apply here (another backend's options are not ours)."""
        return dict(spec.backend.options) if spec.backend.name == self.name else {}

    def check(self, spec: Spec) -> list[Problem]:
        """What in ``spec`` this backend cannot run, one line each."""
        problems = [*kit.algorithm_check(self, spec), *kit.unknown_options(self, spec, OPTIONS, "mini")]
        opts = self.options(spec)
        if opts.get("policy", "model") not in POLICIES:
            problems.append(Problem("backend.options.policy", f"must be one of {', '.join(POLICIES)}"))
        max_len = opts.get("max_len", 1)
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
            problems.append(Problem("backend.options.max_len", f"must be a positive number of tokens, not {max_len!r}"))
        return problems

    def config(self, spec: Spec) -> dict[str, Any]:
        """The spec mapped to this backend's own configuration (``mini.json``)."""
        algo, opts = spec.algorithm, self.options(spec)
        return {"steps": algo.steps, "batch_size": algo.batch_size, "group_size": algo.group_size,
                "policy": opts.get("policy", "model"), "seed": spec.seed,
                "max_len": opts.get("max_len", spec.agent.max_prompt_tokens + spec.agent.max_response_tokens)}

    def compile(self, spec: Spec, out: Path) -> Job:
        """Write the job's files (spec, dataset rows, ``mini.json``, ``launch.sh``); return the Job with its manifest
        filled (``agentbridge.backends.compile_job`` completes and writes it)."""
        from agentbridge.rollout.agent import load_tasks
        from agentbridge_mini.batch import encode_task

        out = Path(out)
        (out / "data").mkdir(parents=True, exist_ok=True)
        train = load_tasks(spec, "train")
        write_jsonl(out / "data" / "train.jsonl", (encode_task(t) for t in train))
        (out / "spec.yaml").write_text(dump_spec(spec))
        (out / "mini.json").write_text(json.dumps(self.config(spec), indent=2) + "\n")
        run = 'exec "${PYTHON:-python}" -m agentbridge_mini.run "$JOB" "${RUN_DIR:-runs/mini}"'
        kit.write_script(out / "launch.sh", [run])
        note = kit.foreign_note(self, spec, "mini")  # another backend's options: said, not applied
        return kit.new_job(self, spec, out, version=__version__, tasks={"train": len(train)},
                           notes=[note] if note else [])

    def validate(self, job: Job) -> Report:
        """The job's files are there, its spec loads and this backend can run it."""
        missing = [f for f in JOB_FILES if not (job.path / f).exists()]
        if missing:
            return Report(ok=False, problems=[Problem(str(job.path), f"missing {', '.join(missing)}; compile again")])
        try:
            spec = kit.job_spec(job)
        except SpecError as e:
            return Report(ok=False, problems=[Problem(str(job.path / "spec.yaml"), p) for p in e.problems])
        problems = self.check(spec)
        return Report(ok=not problems, problems=problems)

    def launch(self, job: Job, runner: Any = None, run_dir: Path | None = None) -> Path:
        """Run the job with ``runner``'s interpreter (this one by default); returns the run directory."""
        return kit.launch_job(job, runner, run_dir, self, label="mini")

    def conformance(self, kind: str, workdir: Path) -> list[Any]:
        """The golden episodes of ``kind`` through this backend's path: task rows in, batch rows out, read back."""
        from agentbridge.conformance import BACKEND_LENGTHS, LENGTHS, GoldenPolicy, golden_spec
        from agentbridge_mini.batch import encode_task, records_of
        from agentbridge_mini.run import collect_batch, make_agent, read_jsonl

        # the lengths kind: this backend's own length (max_len) below the spec's budgets
        total = BACKEND_LENGTHS["max_prompt"] + BACKEND_LENGTHS["max_response"]
        spec = golden_spec(kind, ["backend.name=mini", f"backend.options={{max_len: {total}}}"] if kind == LENGTHS
                           else [])
        agent = make_agent(spec, self.config(spec)["max_len"])
        rows = [encode_task(t) for t in agent.tasks("train")]
        batch = collect_batch(agent, rows, GoldenPolicy(agent.tokenizer), spec.algorithm.group_size)
        write_jsonl(Path(workdir) / "batch.jsonl", batch)
        return records_of(read_jsonl(Path(workdir) / "batch.jsonl"))

"""The ``mini`` backend, declared on agentbridge's adapter base: what it is, its options, its config table, its
job's data and launch line. The base (``agentbridge.adapter.Adapter``) runs check, compile, validate, launch and
conformance from these."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentbridge import adapter as kit
from agentbridge.adapter import Job, Problem, Report, write_jsonl
from agentbridge.spec import Spec, SpecError
from agentbridge_mini import __version__

POLICIES = ("model", "expert")
JOB_FILES = ("spec.yaml", "mini.json", "data", "launch.sh")


class MiniBackend(kit.Adapter):
    """Collects GRPO rollout batches with agentbridge's driver and writes them to the run directory.

    It does not update weights: it is the smallest backend that shows an adapter's parts (the policy, the task
    codec, the trajectory-to-batch conversion and the config mapping) and passes the conformance suite.
    """

    name, label, version = "mini", "mini", __version__
    module = "agentbridge_mini"  # what must import for this backend to run here
    algorithms = {"grpo": {}}
    # backend.options it understands; max_len: the tokens a batch row keeps (prompt + response)
    known_options = {"policy": "model", "max_len": None}
    conformance_module = "agentbridge_mini.conformance"
    # the episode record fields its batches do not keep (the conformance suite fails on any other that is None)
    rollout_not_held = {"token_rewards": "a GRPO batch keeps one reward per episode, no per-token rewards"}
    config_file = "mini.json"
    # what it runs beside its algorithms (Capabilities' fields; the base's capabilities() returns them), and how
    # `agentbridge backends setup mini` builds its environment: the package has no extras, its dependencies bring
    # everything it runs
    capability_fields = {"notes": ["collects batches only: no weight updates"]}
    environment = kit.EnvironmentRecipe(adapter="agentbridge-mini", extra=None)

    def options(self, spec: Spec) -> dict[str, Any]:
        """The backend options of ``spec`` that apply here (another backend's options are not ours)."""
        return dict(spec.backend.options) if spec.backend.name == self.name else {}

    def spec_problems(self, spec: Spec) -> list[Problem]:
        problems = []
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

    def write_data(self, draft: kit.Draft) -> None:
        from agentbridge_mini.batch import encode_task

        write_jsonl(draft.out / "data" / "train.jsonl", (encode_task(t) for t in draft.train))

    def job_config(self, draft: kit.Draft) -> dict[str, Any]:
        return self.config(draft.spec)

    def write_config(self, draft: kit.Draft) -> None:
        (draft.out / self.config_file).write_text(json.dumps(draft.config, indent=2) + "\n")

    def launch_lines(self, draft: kit.Draft) -> list[str]:
        return ['exec "${PYTHON:-python}" -m agentbridge_mini.run "$JOB" "${RUN_DIR:-runs/mini}"']

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

    def launch(self, job: Job, runner: Any = None, run_dir: Path | None = None,
               extra_args: list[str] | None = None) -> Path:
        """Run the job with ``runner``'s interpreter (this one by default); returns the run directory."""
        return kit.launch_job(job, runner, run_dir, self, label="mini", extra_args=extra_args or ())

"""Validate a compiled TRL job in the TRL environment: every problem is one line, nothing is trained.

Run in the TRL environment: ``python -m agentbridge_trl.validate JOB [--json]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agentbridge import adapter_kit as kit
from agentbridge.backends import Problem
from agentbridge.spec import Spec


def validate_job(job_dir: Path, skipped: list[str] | None = None, *, spec: Spec | None = None) -> list[Problem]:
    """GRPOConfig builds, the model path resolves, the tokenizer's chat template renders tool calls."""
    from agentbridge_trl.backend import TRL_PIN, TrlBackend

    job_dir = Path(job_dir)
    start = kit.begin_validation(job_dir, TrlBackend(), pin=TRL_PIN, spec=spec,
                                 install="install agentbridge-trl[backend] or run `agentbridge check --runner env`")
    problems = start.problems
    if skipped is not None:
        skipped += start.skipped
    if not start.ready or start.spec is None:
        return problems
    from agentbridge_trl.config import make_grpo_config

    kwargs = json.loads((job_dir / "grpo_config.json").read_text())
    kwargs["output_dir"] = str(job_dir / "validate-trainer")
    try:
        make_grpo_config(kwargs)
    except (TypeError, ValueError) as e:
        problems.append(Problem("grpo_config.json", f"GRPOConfig rejects it: {str(e).splitlines()[0]}"))
    return problems + kit.agent_check(start.spec, start.tokenizer)[1]


if __name__ == "__main__":
    sys.exit(kit.validator_main(validate_job, "python -m agentbridge_trl.validate"))

"""Validate a compiled TRL job in the TRL environment: every problem is one line, nothing is trained."""

from __future__ import annotations

import json
from pathlib import Path

from agentbridge.backends import Problem, begin_validation


def validate_job(job_dir: Path) -> list[Problem]:
    """GRPOConfig builds, the model path resolves, the tokenizer's chat template renders tool calls."""
    from agentbridge_trl.backend import TRL_PIN, TrlBackend

    job_dir = Path(job_dir)
    start = begin_validation(job_dir, TrlBackend(), module="trl", pin=TRL_PIN,
                             install="install agentbridge-trl[backend] or run `agentbridge check --runner env`")
    problems, spec = start.problems, start.spec
    if not start.ready or spec is None:
        return problems
    from agentbridge_trl.config import make_grpo_config

    kwargs = json.loads((job_dir / "grpo_config.json").read_text())
    kwargs["output_dir"] = str(job_dir / "validate-trainer")
    try:
        make_grpo_config(kwargs)
    except (TypeError, ValueError) as e:
        problems.append(Problem("grpo_config.json", f"GRPOConfig rejects it: {str(e).splitlines()[0]}"))
    from agentbridge.models import ModelError, load_tokenizer
    from agentbridge.rollout.agent import Agent

    try:
        tokenizer = load_tokenizer(spec.model.path)
    except (ModelError, OSError, ValueError) as e:
        return [*problems, Problem("model.path", str(e).splitlines()[0].removeprefix("model.path: "))]
    try:
        agent = Agent(spec, tokenizer)
    except ValueError as e:
        return [*problems, Problem("spec", str(e).splitlines()[0])]
    problems += [Problem("model.chat_template", p) for p in agent.renderer.check()]
    return problems

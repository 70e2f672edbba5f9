"""Validate a compiled TRL job in the TRL environment: every problem is one line, nothing is trained."""

from __future__ import annotations

import json
from pathlib import Path

from agentbridge.backends import Problem
from agentbridge.spec import SpecError, load_spec


def validate_job(job_dir: Path) -> list[Problem]:
    """GRPOConfig builds, the model path resolves, the tokenizer's chat template renders tool calls."""
    job_dir = Path(job_dir)
    problems: list[Problem] = []
    try:
        spec = load_spec(job_dir / "spec.yaml")
    except SpecError as e:
        return [Problem(str(job_dir / "spec.yaml"), line) for line in e.problems]
    from agentbridge_trl.backend import TrlBackend

    problems += TrlBackend().check(spec)
    try:
        import trl
    except ImportError:
        return [*problems, Problem("trl", "TRL is not installed in this interpreter; install agentbridge-trl[backend] "
                                          "or run `agentbridge check` with the TRL environment's python")]
    if trl.__version__ != "1.16.0":
        problems.append(Problem("trl", f"version {trl.__version__} is installed; this adapter is built for 1.16.0"))
    kwargs = json.loads((job_dir / "grpo_config.json").read_text())
    kwargs["output_dir"] = str(job_dir / "validate-trainer")
    try:
        trl.GRPOConfig(**kwargs)
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

"""The compiled job makes exactly ``algorithm.steps`` RL steps: OpenRLHF has no step cap, it passes over
``data.max_samples`` prompts ``train.num_episodes`` times, one step per ``rollout.batch_size`` prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbridge.spec import load_spec
from agentbridge_openrlhf.backend import OpenRLHFBackend
from agentbridge_openrlhf.validate import job_argv, parse_args


def openrlhf_steps(job: Path) -> tuple[int, int]:
    """The RL steps OpenRLHF runs for ``job`` (its own parser on launch.sh; its trainer's loop: a step per
    ``rollout.batch_size`` prompts of the first ``max_samples`` training prompts, each pass), and the prompts used."""
    args = parse_args(job_argv(job, "/m"))
    prompts = min(args.data.max_samples, len((job / "data" / "train.jsonl").read_text().splitlines()))
    return prompts // args.rollout.batch_size * args.train.num_episodes, prompts


@pytest.mark.parametrize(("example", "sets", "prompts"), [
    ("examples/gui.gpu.yaml", ["data.train.size=2048"], 1600),  # 200 steps of 32: 4 passes over 1,600 (not 256 steps)
    ("examples/calculator.yaml", [], 240),                        # 30 steps of 8 from 2,000 tasks: one pass
    ("examples/calculator.yaml", ["algorithm.steps=10", "algorithm.batch_size=8", "data.train.size=64"], 40),
    ("examples/calculator.yaml", ["algorithm.steps=12", "algorithm.batch_size=4", "data.train.size=20"], 16),
])
def test_the_job_runs_the_specs_steps(tmp_path: Path, example: str, sets: list[str], prompts: int) -> None:
    spec = load_spec(example, ["backend.name=openrlhf", "data.eval.size=4", *sets])
    job = OpenRLHFBackend().compile(spec, tmp_path / "job")
    assert openrlhf_steps(job.path) == (spec.algorithm.steps, prompts)


def test_a_plan_that_leaves_tasks_out_says_so(tmp_path: Path) -> None:
    """7 steps of 2 prompts over 8 tasks: exact only as 7 passes over 2 prompts; the job says so in a note."""
    job = OpenRLHFBackend().compile(load_spec("examples/calculator.yaml", [
        "backend.name=openrlhf", "data.eval.size=4", "algorithm.steps=7", "algorithm.batch_size=2",
        "data.train.size=8"]), tmp_path / "job")
    assert openrlhf_steps(job.path) == (7, 2)
    [note] = [n for n in job.manifest["notes"] if n.startswith("algorithm.steps:")]
    assert "7 steps of 2 prompts run as 7 passes over 2 of the 8 training tasks" in note
    whole = OpenRLHFBackend().compile(load_spec("examples/calculator.yaml", ["backend.name=openrlhf"]),
                                      tmp_path / "whole")
    assert not [n for n in whole.manifest["notes"] if n.startswith("algorithm.steps:")]

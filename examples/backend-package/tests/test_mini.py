"""The mini backend: the Backend protocol, its checks, compile -> validate -> launch, and the conformance suite."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from agentbridge.backends import Backend
from agentbridge.conformance.pytest_plugin import conformance_tests
from agentbridge.plugins import get_plugins
from agentbridge.spec import load_spec
from agentbridge_mini.backend import MiniBackend
from agentbridge_mini.batch import group_advantages

SPEC = Path(__file__).resolve().parents[1] / "spec.yaml"

# one test per golden case: the episodes this backend trains on are the driver's, token for token, also when its
# own length (max_len) is below the spec's budgets
test_conformance = conformance_tests("mini", kinds=("text", "lengths"))


def test_registered_and_implements_the_protocol() -> None:
    backend = get_plugins().backends.get("mini")
    assert isinstance(backend, MiniBackend) and isinstance(backend, Backend)
    assert backend.capabilities().algorithms == ["grpo"] and not backend.capabilities().multimodal


@pytest.mark.parametrize(("sets", "expected"), [
    ([], []),
    (["algorithm.name=ppo"], ["algorithm.name: mini cannot run 'ppo' (it runs grpo)"]),
    (["backend.options.policy=oracle"], ["backend.options.policy: must be one of model, expert"]),
    (["backend.options.lr_warmup=3"], ["backend.options.lr_warmup: unknown mini option; known: max_len, policy"]),
    (["backend.options.max_len=0"], ["backend.options.max_len: must be a positive number of tokens, not 0"]),
    (["backend.name=trl", "backend.options.lr_warmup=3"], []),  # another backend's options are not checked here
])
def test_check(sets: list[str], expected: list[str]) -> None:
    problems = [str(p) for p in MiniBackend().check(load_spec(SPEC, sets))]
    # the hint after the refusal names the installed backends that can, or says that none can
    assert [re.sub(r"; (backends that can: .*|no installed backend can)$", "", p) for p in problems] == expected


def test_group_advantages() -> None:
    assert group_advantages([1.0, 0.0, 0.5, 0.5], 2) == [1.0, -1.0, 0.0, 0.0]


def test_compile_validate_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the job runs in a new interpreter: let it import this source tree even when the package is not installed
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SPEC.parent), os.environ.get("PYTHONPATH", "")]))
    backend = MiniBackend()
    job = backend.compile(load_spec(SPEC), tmp_path / "job")
    assert json.loads((job.path / "mini.json").read_text()) == {"steps": 2, "batch_size": 3, "group_size": 2,
                                                                "policy": "expert", "seed": 0, "max_len": 768}
    assert job.manifest["backend"] == "mini" and job.manifest["tasks"] == {"train": 16, "eval": 0}
    assert backend.validate(job).ok
    run_dir = backend.launch(job, run_dir=tmp_path / "run")
    steps = sorted((run_dir / "batches").iterdir())
    assert [p.name for p in steps] == ["step_00000.jsonl", "step_00001.jsonl"]
    rows = [json.loads(line) for line in steps[1].read_text().splitlines()]
    assert len(rows) == 6 and len({len(r["input_ids"]) for r in rows}) == 1  # 3 tasks x 2 samples, padded
    for row in rows:
        p, n = row["prompt_len"], row["length"]
        assert len(row["loss_mask"]) == len(row["logprobs"]) == len(row["input_ids"])
        assert set(row["loss_mask"][:p]) == {0} and 0 < sum(row["loss_mask"][p:n]) < n - p  # tool output: mask 0
        assert row["reward"] == pytest.approx(1.1)  # the expert: right answer, right format
        assert row["advantage"] == 0.0  # a group that all succeeds teaches nothing
    (job.path / "mini.json").unlink()
    report = backend.validate(job)
    assert not report.ok and "missing mini.json" in str(report.problems[0])

"""OpenRLHF passes the conformance suite (through the pytest plugin), and the suite fails when the path is broken.

Both kinds run in this process (OpenRLHF imports here): ``agentbridge_openrlhf.conformance.golden_records`` on
OpenRLHF's own rollout path, each kind on a local Ray cluster of its own: the job compiled with the default options
(every field but the log-probs, which OpenRLHF does not keep there) and the ``is_correction: token`` job (the
log-probs).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from agentbridge.conformance import pytest_plugin, reference_records, run_suite
from agentbridge.conformance.golden import cases
from agentbridge.conformance.pytest_plugin import conformance_tests
from agentbridge_openrlhf.backend import OpenRLHFBackend
from agentbridge_openrlhf.conformance import LOGPROB_JOB

NOTE = "openrlhf: logprobs checked under backend.options.is_correction=token; the default job keeps none"


def test_the_records_come_from_the_default_job_and_the_logprobs_from_the_token_job(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The text run of the plugin's tests below (run here first, then cached for them): the records it compares on
    every field come from the job compiled with OpenRLHF's default options (``is_correction`` off: no rollout
    log-probs in its micro-batches, logprobs None in its records); the log-probs are checked under
    ``is_correction: token``, and the suite says so."""
    from agentbridge_openrlhf import rollout_path
    from agentbridge_openrlhf.validate import job_argv, parse_args

    seen: list[tuple[list[tuple[str, Any]], list[Any]]] = []
    honest = rollout_path.run_rollouts

    def spy(jobs: list[Any], model: str, **kwargs: Any) -> list[Any]:
        rollouts = honest(jobs, model, **kwargs)
        seen.append(([((j / "launch.sh").read_text(), parse_args(job_argv(j, model))) for j in jobs], rollouts))
        return rollouts

    monkeypatch.setattr(rollout_path, "run_rollouts", spy)
    pytest_plugin.suite_result.cache_clear()
    result = pytest_plugin.suite_result("openrlhf", "text")  # the plugin's own run, cached for its tests
    assert result.ok, result.problems
    (jobs, (default, token)), = seen
    (default_launch, default_args), (token_launch, token_args) = jobs
    assert default_args.algo.advantage.is_correction_level == "off"  # OpenRLHF's default, as compiled by default
    assert "is_correction" not in default_launch and "--algo.advantage.is_correction_level token" in token_launch
    assert token_args.algo.advantage.is_correction_level == "token"
    assert all(e.rollout_log_probs is None for e in default.experiences)
    assert all(e.rollout_log_probs is not None for e in token.experiences)
    samples = 2 * len(cases("text"))
    mine = [r for r in result.records if not r.job]
    assert len(mine) == samples and all(r.logprobs is None for r in mine)
    checked = [r for r in result.records if r.job]
    assert len(checked) == samples and {r.job for r in checked} == {LOGPROB_JOB}
    assert all(r.logprobs is not None for r in checked)
    assert result.notes == [NOTE]


test_openrlhf_conforms = conformance_tests("openrlhf")


def test_the_backend_declares_its_module_and_conformance() -> None:
    backend = OpenRLHFBackend()
    assert backend.module == "openrlhf" and callable(backend.conformance)


def test_the_suite_reports_broken_experience_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenRLHF's Experience building is handed each action range one token too long, the reward plus one and,
    where it keeps them (the token job), the last rollout log-prob minus one half: the suite must say exactly that,
    one response_mask line, one reward line and (where OpenRLHF places the reward on an action token) one
    token_rewards line per episode of the default job and one logprobs line per episode of the token job (whose
    other fields are the default job's to check), and nothing else."""
    from agentbridge_openrlhf.standins import use_vllm_standin

    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # restored after the test
    use_vllm_standin()  # samples_generator imports vllm
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    honest = SamplesGenerator._process_response_into_experience

    def broken(self: Any, response: dict[str, Any], **kwargs: Any) -> Any:
        lps = response["rollout_log_probs"]
        response = {**response, "action_ranges": [(s, e + 1) for s, e in response["action_ranges"]],
                    "reward": response["reward"] + 1.0,
                    "rollout_log_probs": None if lps is None else [*lps[:-1], lps[-1] - 0.5]}
        return honest(self, response, **kwargs)

    monkeypatch.setattr(SamplesGenerator, "_process_response_into_experience", broken)
    (result,) = run_suite("openrlhf", ("text",))
    assert not result.ok
    want = set()
    for ref in reference_records("text"):
        first_env = ref.response_mask.index(0)  # the token after the first turn's end: now inside the range
        for i in range(2):
            if 1 in ref.response_mask:  # the empty-episode fallback has no action range to lengthen
                want.add(f"openrlhf: case {ref.case}[{i}]: response_mask differs at {first_env} of "
                         f"{len(ref.response_mask)} (driver 0, backend 1)")
            want.add(f"openrlhf: case {ref.case}[{i}]: reward is {ref.reward + 1:g}, the driver's is {ref.reward:g}")
    placed = sorted(f"openrlhf: case {ref.case}[{i}]: token_rewards differs at {len(ref.response_ids) - 1} of "
                    f"{len(ref.response_ids)} (driver {ref.token_rewards[-1]}, backend "
                    for ref in reference_records("text") if 1 in ref.response_mask for i in range(2))
    moved = sorted(p for p in result.problems if ": token_rewards " in p)  # the reward plus one, on the last token
    assert len(moved) == len(placed) and [p[:len(q)] for p, q in zip(moved, placed, strict=True)] == placed
    default = [p for p in result.problems if p.startswith("openrlhf: ") and ": token_rewards " not in p]
    assert set(default) == want and len(default) == len(want), result.problems
    lasts = [(ref.case, len(ref.logprobs) - 1) for ref in reference_records("text")]  # the last log-prob differs
    prefixes = sorted(f"openrlhf ({LOGPROB_JOB}): case {c}[{i}]: logprobs differs at {n} of {n + 1} (driver "
                      for c, n in lasts for i in range(2))
    token = sorted(p for p in result.problems if not p.startswith("openrlhf: "))
    assert len(token) == len(prefixes) and [p[:len(q)] for p, q in zip(token, prefixes, strict=True)] == prefixes
    assert result.notes == [NOTE]
    assert result.case_fields() == {c: (["reward"] if c == "early_error" else ["response_mask", "reward",
                                                                               "token_rewards"]) * 2
                                    + ["logprobs"] * 2 for c in cases("text")}

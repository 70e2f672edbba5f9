"""A rollout field a backend's default job does not hold (None in its records) fails the conformance suite unless the
backend's adapter declares it (``rollout_not_held``, with the reason); a declared field that is held is stale."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbridge.conformance import EpisodeRecord, cases, compare, reference_records, run_suite
from agentbridge.conformance.records import notes
from agentbridge.conformance.suite import _backend, not_held


def _ref() -> list[EpisodeRecord]:
    return [EpisodeRecord(case="tools", prompt_ids=[1, 2], response_ids=[3, 4, 5], response_mask=[1, 0, 1],
                          logprobs=[-0.5, 0.0, -0.25], reward=1.5, token_rewards=[0.0, 0.0, 1.5]),
            EpisodeRecord(case="early_error", prompt_ids=[1, 9], response_ids=[7], response_mask=[0],
                          logprobs=[0.0], reward=0.0, token_rewards=[0.0])]


def test_an_undeclared_none_is_a_difference_naming_case_and_field() -> None:
    ref = _ref()
    got = [dataclasses.replace(r, logprobs=None) for r in ref]
    assert compare(ref, got, "b", not_held={}) == [
        "b: case tools[0]: logprobs is not held (None), and b does not declare it not held (rollout_not_held)",
        "b: case early_error[0]: logprobs is not held (None), and b does not declare it not held (rollout_not_held)"]
    declared = {"logprobs": "the actor recomputes them"}
    assert compare(ref, got, "b", not_held=declared) == []  # declared: a note, as before
    assert notes(got, "b") == ["b: logprobs not held by the default job; not compared"]
    assert compare(ref, ref, "b", not_held=declared) == [
        "b: logprobs is declared not held by the default job (the actor recomputes them), yet every record holds it"]


def test_the_adapters_declare_what_their_default_jobs_do_not_hold() -> None:
    assert set(not_held(_backend("trl"))) == {"token_rewards"}
    assert set(not_held(_backend("openrlhf"))) == {"logprobs"}
    assert not_held(_backend("verl")) == {} and not_held(_backend("roll")) == {}
    assert all(why for name in ("trl", "openrlhf", "rlinf", "slime") for why in not_held(_backend(name)).values())


@pytest.fixture
def trl_records(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """TRL's records stood in by the driver's own (a backend that conforms; TRL keeps no per-token rewards),
    with the fields named in the returned list set to None."""
    from agentbridge.conformance import suite

    fields: list[str] = []
    driver: dict[str, list[EpisodeRecord]] = {}

    def records(name: str, kind: str, workdir: Path) -> list[EpisodeRecord]:
        if kind not in driver:
            driver[kind] = reference_records(kind, turn_credit=False)
        samples = suite.golden_spec(kind).algorithm.group_size
        return [dataclasses.replace(r, token_rewards=None, **dict.fromkeys(fields))
                for r in driver[kind] for _ in range(samples)]

    monkeypatch.setattr(suite, "backend_records", records)
    return fields


def test_a_kept_field_set_to_none_fails_the_suite_and_the_cli(trl_records: list[str]) -> None:
    from agentbridge.cli import main

    (result,) = run_suite("trl", ("text",))
    assert result.ok, result.problems
    assert result.notes == ["trl: token_rewards not held by the default job; not compared"]
    trl_records.append("logprobs")  # TRL keeps its rollout log-probs: None is a failure
    broken = CliRunner().invoke(main, ["conformance", "--backend", "trl", "--kind", "text"])
    assert broken.exit_code == 1, broken.output
    assert broken.output.count("differs: logprobs") == len(cases("text")), broken.output
    assert "logprobs is not held (None), and trl does not declare it not held (rollout_not_held)" in broken.output

"""A field a backend does not hold under its job (None in its records): a note naming backend and field, never a
pass and never a difference; records of another job check only such fields (agentbridge/conformance/records.py)."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
from click.testing import CliRunner

from agentbridge.conformance import EpisodeRecord, SuiteResult, compare
from agentbridge.conformance.golden import cases
from agentbridge.conformance.records import compare_record, not_held, notes

JOB = "backend.options.is_correction=token"


def _ref() -> list[EpisodeRecord]:
    return [EpisodeRecord(case="tools", prompt_ids=[1, 2], response_ids=[3, 4, 5], response_mask=[1, 0, 1],
                          logprobs=[-0.5, 0.0, -0.25], reward=1.5, token_rewards=[0.0, 0.0, 1.5]),
            EpisodeRecord(case="early_error", prompt_ids=[1, 9], response_ids=[7], response_mask=[0],
                          logprobs=[0.0], reward=0.0, token_rewards=[0.0])]


def _no_logprobs(records: list[EpisodeRecord], **changes: Any) -> list[EpisodeRecord]:
    return [dataclasses.replace(r, logprobs=None, **changes) for r in records]


def _under(records: list[EpisodeRecord], job: str = JOB) -> list[EpisodeRecord]:
    return [dataclasses.replace(r, job=job) for r in records]


def test_a_field_the_backend_does_not_hold_is_a_note_not_a_difference() -> None:
    ref = _ref()
    got = _no_logprobs(ref)
    assert not_held(got[0]) == ["logprobs"] and not_held(ref[0]) == []
    assert compare_record(ref[0], got[0]) == []
    assert compare(ref, got, "b") == []  # not a difference ...
    assert notes(got, "b") == ["b: logprobs not held by the default job; not compared"]  # ... and not a pass
    assert notes(ref, "b") == []


def test_the_other_fields_of_a_record_without_logprobs_are_still_compared() -> None:
    ref = _ref()
    got = _no_logprobs(ref)
    got[0] = dataclasses.replace(got[0], reward=2.5, response_mask=[1, 1, 1])
    assert compare(ref, got, "b") == ["b: case tools[0]: response_mask differs at 1 of 3 (driver 0, backend 1)",
                                      "b: case tools[0]: reward is 2.5, the driver's is 1.5"]


def test_a_field_the_drivers_reference_does_not_hold_fails() -> None:
    ref = _ref()
    broken = [dataclasses.replace(ref[0], logprobs=None), ref[1]]
    assert compare(broken, ref, "b") == ["b: case tools[0]: logprobs is not held by the driver's reference"]
    assert compare(broken, _no_logprobs(ref), "b") == [
        "b: case tools[0]: logprobs is not held by the driver's reference"]


def test_a_mismatch_in_a_held_field_still_fails() -> None:
    ref = _ref()
    got = [dataclasses.replace(ref[0], logprobs=[-0.5, 0.0, -0.3]), ref[1]]
    assert compare(ref, got, "b") == ["b: case tools[0]: logprobs differs at 2 of 3 (driver -0.25, backend -0.3)"]
    assert notes(got, "b") == []


def test_another_jobs_records_check_only_the_fields_the_default_job_does_not_hold() -> None:
    ref = _ref()
    default = _no_logprobs(ref)
    assert compare(ref, default + _under(ref), "b") == []
    assert notes(default + _under(ref), "b") == [f"b: logprobs checked under {JOB}; the default job keeps none"]
    # the other job's log-probs are compared (its line names the job) ...
    bad = _under([dataclasses.replace(ref[0], logprobs=[-0.5, 0.0, -0.3]), ref[1]])
    assert compare(ref, default + bad, "b") == [
        f"b ({JOB}): case tools[0]: logprobs differs at 2 of 3 (driver -0.25, backend -0.3)"]
    # ... its other fields are the default job's business
    assert compare(ref, default + _under([dataclasses.replace(ref[0], reward=9.0), ref[1]]), "b") == []
    # it must hold what it is there for, and have every episode
    assert compare(ref, default + _under(_no_logprobs(ref)), "b") == [
        f"b ({JOB}): case tools[0]: logprobs is not held under this job either",
        f"b ({JOB}): case early_error[0]: logprobs is not held under this job either"]
    assert notes(default + _under(_no_logprobs(ref)), "b") == ["b: logprobs not held by the default job; not compared"]
    assert compare(ref, default + _under(ref[1:]), "b") == [
        f"b ({JOB}): case tools: 0 episodes reached the batch, expected 1"]
    # records of another job when the default job holds everything: nothing for them to check
    assert compare(ref, ref + _under(ref), "b") == [
        f"b ({JOB}): records of another job, but the default job's records hold every field"]


def test_the_default_jobs_episodes_are_counted_without_the_other_jobs() -> None:
    ref = _ref()
    assert compare(ref, _no_logprobs(ref[1:]) + _under(ref), "b") == [
        "b: case tools: 0 episodes reached the batch, expected 1"]


def test_a_record_without_logprobs_or_of_another_job_round_trips_through_json() -> None:
    for record in (*_no_logprobs(_ref()), *_under(_ref())):
        assert EpisodeRecord.from_dict(record.to_dict()) == record
    old = {k: v for k, v in _ref()[0].to_dict().items() if k != "job"}  # a record from before ``job``
    assert EpisodeRecord.from_dict(old) == _ref()[0]


def test_the_suite_result_names_the_field_of_another_jobs_line() -> None:
    line = f"b ({JOB}): case tools[0]: logprobs differs at 2 of 3 (driver -0.25, backend -0.3)"
    result = SuiteResult("b", "text", problems=[line])
    assert result.case_fields()["tools"] == ["logprobs"] and not result.ok


def test_the_cli_prints_each_note(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentbridge.conformance as conformance
    from agentbridge.cli import main

    note = f"trl: logprobs checked under {JOB}; the default job keeps none"
    monkeypatch.setattr(conformance, "run_suite", lambda name, kinds, workdir=None: [
        SuiteResult(name, kind, notes=[note]) for kind in kinds])  # an installed backend's suite, not run
    result = CliRunner().invoke(main, ["conformance", "--backend", "trl", "--kind", "text"])
    assert result.exit_code == 0, result.output
    assert f"note: text: {note}" in result.output and "identical" in result.output


def test_the_pytest_plugin_warns_each_note_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbridge.conformance import pytest_plugin

    note = "notes-backend: logprobs not held by the default job; not compared"
    monkeypatch.setattr(pytest_plugin, "suite_result", lambda backend, kind: SuiteResult(backend, kind, notes=[note]))
    test = pytest_plugin.conformance_tests("notes-backend", ("text",))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for case in cases("text"):
            test("text", case)  # every case passes ...
    assert [str(w.message) for w in seen if issubclass(w.category, pytest_plugin.ConformanceNote)] == [
        f"text: {note}"]  # ... and the note is said once

"""The conformance suite itself: golden episodes cover what they claim, and the comparison catches each kind of
difference with one line naming the case and the field."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from click.testing import CliRunner

from agentbridge.cli import main
from agentbridge.conformance import CASES, EpisodeRecord, cases, compare, golden_turn, reference_records


@pytest.fixture(scope="module")
def text_reference() -> dict[str, EpisodeRecord]:
    return {r.case: r for r in reference_records("text")}


@pytest.fixture(scope="module")
def vlm_reference() -> dict[str, EpisodeRecord]:
    return {r.case: r for r in reference_records("vlm")}


def test_golden_cases_cover_tools_errors_truncation_and_images(
        text_reference: dict[str, EpisodeRecord], vlm_reference: dict[str, EpisodeRecord],
        qwen_tokenizer: Any) -> None:
    assert sorted(text_reference) == sorted(cases("text")) and sorted(vlm_reference) == ["image"]
    ref = text_reference
    # exact answer 1.0 + format 0.1 + the environment's process reward 0.25 + the fragile reward 0.5
    assert ref["tools"].reward == pytest.approx(1.85)
    assert ref["tool_error"].reward == pytest.approx(0.6)  # wrong answer, well formed
    assert ref["parse_error"].reward == pytest.approx(1.75)  # a malformed tool call costs the format reward
    assert ref["truncation"].reward == pytest.approx(0.5)
    assert ref["reward_error"].reward == pytest.approx(1.35)  # the raising reward scores 0, the others count
    assert ref["max_turns"].reward == pytest.approx(0.5)  # four tool calls, no answer
    assert qwen_tokenizer.decode(ref["max_turns"].response_ids).count("<tool_call>") == 4
    eos = qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")
    early = ref["early_error"]  # failed before its first token: the core's fallback sample, nothing trained on
    assert (early.response_ids, early.response_mask, early.logprobs, early.reward) == ([eos], [0], [0.0], 0.0)
    assert "[golden:early_error]" in qwen_tokenizer.decode(early.prompt_ids)
    errors = qwen_tokenizer.decode(ref["tool_error"].response_ids)
    assert "unknown tool 'golden_divide'" in errors and "bad arguments for golden_add" in errors
    assert "not valid JSON" in qwen_tokenizer.decode(ref["parse_error"].response_ids)
    truncated = ref["truncation"]
    assert truncated.response_ids[-1] != eos and truncated.response_mask[-48:] == [1] * 48  # cut at the turn budget
    for record in (r for r in ref.values() if r.case != "early_error"):  # policy and environment tokens
        assert 0 in record.response_mask and record.response_mask[0] == 1
        policy = [lp for lp, m in zip(record.logprobs, record.response_mask, strict=True) if m]
        assert all(-1.0 < lp < 0.0 for lp in policy)
        assert all(lp == 0.0 for lp, m in zip(record.logprobs, record.response_mask, strict=True) if not m)
    image = vlm_reference["image"]
    assert len(image.images) == 2 and len(set(image.images)) == 2  # the prompt's screen and the tool's screenshot
    assert image.reward == pytest.approx(1.35)


def test_golden_generator_follows_the_turns_and_the_budget(qwen_tokenizer: Any) -> None:
    prompt = qwen_tokenizer.apply_chat_template([{"role": "user", "content": "[golden:tools] x"}],
                                                add_generation_prompt=True, tokenize=False)
    ids, lps = golden_turn(qwen_tokenizer, qwen_tokenizer.encode(prompt), 1000)
    assert qwen_tokenizer.decode(ids).startswith(CASES["tools"][3][0])
    assert len(lps) == len(ids) and len(set(lps)) > 1
    cut, _ = golden_turn(qwen_tokenizer, qwen_tokenizer.encode(prompt), 5)
    assert cut == ids[:5]
    with pytest.raises(ValueError, match="no \\[golden:CASE\\] marker"):
        golden_turn(qwen_tokenizer, qwen_tokenizer.encode("hello"), 10)


def _mutated(record: EpisodeRecord, **changes: Any) -> EpisodeRecord:
    return dataclasses.replace(record, **changes)


def test_compare_names_the_case_and_field_of_every_difference(text_reference: dict[str, EpisodeRecord]) -> None:
    ref = list(text_reference.values())
    assert compare(ref, ref, "b") == []
    tools = text_reference["tools"]
    shifted = [0, *tools.response_mask[:-1]]  # a mask off by one
    cases_and_lines = {
        "response_mask": _mutated(tools, response_mask=shifted),
        "logprobs": _mutated(tools, logprobs=[*tools.logprobs[:-1], tools.logprobs[-1] - 0.01]),
        "reward": _mutated(tools, reward=tools.reward + 0.1),
        "prompt_ids": _mutated(tools, prompt_ids=tools.prompt_ids[1:]),
        "response_ids": _mutated(tools, response_ids=[*tools.response_ids[:-1], 0]),
        "images": _mutated(tools, images=["0" * 16]),
    }
    for field, bad in cases_and_lines.items():
        got = [bad if r.case == "tools" else r for r in ref]
        problems = compare(ref, got, "b")
        assert len(problems) == 1 and problems[0].startswith(f"b: case tools[0]: {field} "), problems
    assert compare(ref, ref[1:], "b") == ["b: case tools: 0 episodes reached the batch, expected 1"]
    assert compare(ref, ref + [_mutated(ref[0], case="other")], "b") == ["b: case other: not a golden case"]
    line = compare(ref, [_mutated(tools, response_mask=shifted)] + ref[1:], "b")[0]
    assert "differs at 0 of" in line and "(driver 1, backend 0)" in line


def test_record_round_trips_through_json(text_reference: dict[str, EpisodeRecord]) -> None:
    record = text_reference["tool_error"]
    assert EpisodeRecord.from_dict(record.to_dict()) == record


def test_cli_rejects_an_unknown_backend_in_one_line() -> None:
    result = CliRunner().invoke(main, ["conformance", "--backend", "nope", "--kind", "text"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [result.output.strip().splitlines()[0]]
    assert "nope" in result.output and "Traceback" not in result.output


def test_pytest_plugin_fails_every_case_when_the_suite_fails_outside_a_case() -> None:
    from agentbridge.conformance import SuiteResult
    from agentbridge.conformance.pytest_plugin import problems_of

    # a suite-level error whose text happens to contain " case " still fails every generated test
    broken = SuiteResult("b", "text", problems=["backend b: the run failed in case of a timeout"])
    for case in cases("text"):
        mine, general = problems_of(broken, case)
        assert general == broken.problems and mine == []
    one = SuiteResult("b", "text", problems=["b: case tools[0]: reward is 1, the driver's is 2"])
    assert problems_of(one, "tools") == (one.problems, []) and problems_of(one, "max_turns") == ([], [])


def test_empty_episode_fallback_is_one_masked_eos() -> None:
    from agentbridge.rollout.training import training_sequence
    from agentbridge.trajectory import Trajectory

    seq = training_sequence(Trajectory(task_id="t", prompt_ids=[], finish_reason="error"), 9, [1, 2])
    assert (seq.prompt_ids, seq.response_ids, seq.response_mask, seq.logprobs) == ([1, 2], [9], [0], [0.0])
    full = training_sequence(Trajectory(task_id="t", prompt_ids=[5], response_ids=[6, 9], response_mask=[1, 1],
                                        logprobs=[-0.1, -0.2]), 9)
    assert (full.prompt_ids, full.response_ids, full.response_mask) == ([5], [6, 9], [1, 1])

"""The protocol the adapter speaks to ROLL, checked without ROLL: the trajectory row its env manager writes (ROLL's
``TrajEnvManager.formulate_rollouts`` layout) holds the driver's episode exactly, and reads back to it.

Under ROLL (``test_roll.py``) the same rows go through ROLL's own queue and batch; here the golden episodes are the
driver's alone (agentbridge's conformance reference), written with :func:`agentbridge_roll.layout.rows` as the env
manager writes them, and read back with :func:`agentbridge_roll.layout.record` as the conformance suite reads ROLL's
batch.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from agentbridge.conformance.golden import BACKEND_LENGTHS, LENGTHS, TEXT, GoldenPolicy
from agentbridge.conformance.records import compare
from agentbridge.conformance.suite import golden_spec, reference_records
from agentbridge.rollout.agent import Agent
from agentbridge.rollout.agent_edge import fit_limits
from agentbridge.rollout.training import TrainingSequence, episode_sample, token_rewards
from agentbridge_roll.config import sequence_length
from agentbridge_roll.layout import FIELDS, EqualScoresFilter, LayoutError, record, rows


@pytest.mark.parametrize("kind", [TEXT, LENGTHS])
def test_rows_hold_the_drivers_golden_episodes(kind: str) -> None:
    """Every golden case (tool calls, errors, the empty-episode fallback, a cut turn, max_turns) survives the row."""
    spec = golden_spec(kind, ["backend.name=roll"])
    length = sequence_length(spec)
    agent = Agent.from_spec(spec)
    if kind == LENGTHS:  # ROLL's one length: prompt plus response
        length = BACKEND_LENGTHS["max_prompt"] + BACKEND_LENGTHS["max_response"]
    agent.limits = fit_limits(agent.limits, max_total=length)  # what the env manager does
    tasks = agent.tasks("train")
    trajectories = asyncio.run(agent.run(tasks, GoldenPolicy(agent.tokenizer)))
    got = []
    for task, traj in zip(tasks, trajectories, strict=True):
        row = rows(episode_sample(traj, task, agent.renderer, spec.agent.system_prompt), token_rewards(traj),
                   length, pad_id=agent.tokenizer.pad_token_id)
        assert sorted(row) == sorted(FIELDS) and all(len(row[k]) == length for k in FIELDS if k != "infer_logprobs")
        assert len(row["infer_logprobs"]) == length - 1
        got.append(record(row, task.id))
    assert compare(reference_records(kind, turn_credit=False), got, "roll", samples=1) == []
    assert {r.case for r in got} >= {"early_error", "truncation", "max_turns"}


def test_the_row_is_rolls_layout() -> None:
    seq = TrainingSequence(prompt_ids=[11, 12, 13], response_ids=[21, 22, 30, 31, 23],
                           response_mask=[1, 1, 0, 0, 1], logprobs=[-0.1, -0.2, 0.0, 0.0, -0.3])
    row = rows(seq, [0.0, 0.0, 0.0, 0.0, 1.5], 10, pad_id=0)
    assert row["input_ids"] == [11, 12, 13, 21, 22, 30, 31, 23, 0, 0]
    assert row["attention_mask"] == [1] * 8 + [0, 0] and row["position_ids"] == [0, 1, 2, 3, 4, 5, 6, 7, 0, 0]
    assert row["prompt_mask"] == [1, 1, 1] + [0] * 7
    assert row["response_mask"] == [0, 0, 0, 1, 1, 0, 0, 1, 0, 0]
    assert row["scores"][7] == 1.5 and sum(row["scores"]) == 1.5  # the episode's reward on its last token
    # shifted by one: entry j is token j + 1's log-prob, so ROLL's response_mask[:, 1:] selects them
    assert row["infer_logprobs"] == [0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3, 0.0, 0.0]
    masked = [lp for lp, m in zip(row["infer_logprobs"], row["response_mask"][1:], strict=True) if m]
    assert masked == [-0.1, -0.2, -0.3]
    back = record(row, "c")
    assert (back.prompt_ids, back.response_ids, back.response_mask) == ([11, 12, 13], seq.response_ids,
                                                                        seq.response_mask)
    assert back.logprobs == seq.logprobs and back.reward == 1.5 and back.token_rewards == [0, 0, 0, 0, 1.5]


def test_what_does_not_fit_is_refused_never_cut() -> None:
    seq = TrainingSequence(prompt_ids=[1, 2, 3], response_ids=[4, 5], response_mask=[1, 1], logprobs=[-0.1, -0.2])
    with pytest.raises(LayoutError, match="5 tokens does not fit sequence_length 4"):
        rows(seq, [0.0, 1.0], 4, pad_id=0)
    with pytest.raises(LayoutError, match="1 rewards for 2 response tokens"):
        rows(seq, [1.0], 8, pad_id=0)
    row = rows(seq, [0.0, 1.0], 8, pad_id=0)
    with pytest.raises(LayoutError, match="scores outside the response"):
        record({**row, "scores": [1.0] + row["scores"][1:]}, "c")
    with pytest.raises(LayoutError, match="not one prompt followed by one response"):
        record({**row, "prompt_mask": [0] * 8}, "c")


def test_dapos_group_filter_drops_only_groups_without_signal() -> None:
    def group(*scores: float) -> list[SimpleNamespace]:
        return [SimpleNamespace(non_tensor_batch={"episode_scores": [s]}) for s in scores]

    train = EqualScoresFilter(config=None, env_manager_config=None, mode="train")
    assert train.filter(0, 0, group(1.0, 1.0, 1.0)) and train.filter(0, 0, group(0.0, 0.0))
    assert not train.filter(0, 0, group(1.0, 0.0, 1.0)) and not train.filter(0, 0, group(1.0))
    assert not EqualScoresFilter(None, None, mode="val").filter(0, 0, group(1.0, 1.0))

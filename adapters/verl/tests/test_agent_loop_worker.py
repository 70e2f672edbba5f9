"""veRL's own AgentLoopWorker drives agentbridge's agent loop: the padded batch is exactly what the driver produced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import compile_job
from worker_harness import (
    HFServerStandIn,
    calculator_script,
    compose_worker_config,
    generate,
    input_batch,
    record_trajectories,
    unpadded_rows,
)

from agentbridge.backends import Job
from agentbridge.rewards import PROCESS
from agentbridge.rollout.agent import load_tasks
from agentbridge.spec import load_spec

PROMPTS = 2


def key(prompt: list[int], response: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(prompt), tuple(response)


def by_tokens_list(trajectories: list[Any]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [key(t.prompt_ids, t.response_ids) for t in trajectories]


def check_batch_matches_driver(gen: Any, trajectories: list[Any], cfg: Any) -> list[dict[str, Any]]:
    """Every batch row equals one driver trajectory: ids, mask, log-probs, reward on the last response token."""
    rows = unpadded_rows(gen)
    assert len(rows) == len(trajectories) == PROMPTS * cfg.actor_rollout_ref.rollout.n
    by_tokens = {key(t.prompt_ids, t.response_ids): t for t in trajectories}
    assert sorted(key(r["prompt_ids"], r["response_ids"]) for r in rows) == sorted(by_tokens_list(trajectories))
    for row in rows:
        traj = by_tokens[key(row["prompt_ids"], row["response_ids"])]
        assert row["response_mask"] == traj.response_mask
        assert row["logprobs"] == pytest.approx(traj.logprobs, abs=1e-6)
        assert row["reward"] == pytest.approx(traj.reward)
        assert row["reward_at"] == row["n_resp"] - 1
    b = gen.batch
    assert b["prompts"].shape[1] == cfg.actor_rollout_ref.rollout.prompt_length
    assert b["responses"].shape[1] == cfg.actor_rollout_ref.rollout.response_length
    assert b["input_ids"].shape == b["attention_mask"].shape == b["position_ids"].shape
    return rows


def test_sampled_rollout_batch_equals_the_driver(tmp_path: Path, tiny_model: tuple[Any, Any]) -> None:
    model, tokenizer = tiny_model
    job = compile_job(tmp_path / "job", "agent.max_tokens_per_turn=12")  # short turns: sampling on CPU is slow
    cfg = compose_worker_config(job.path)
    recorder = record_trajectories()
    server = HFServerStandIn(model, tokenizer)
    gen = generate(cfg, server, input_batch(cfg, tokenizer, PROMPTS))
    check_batch_matches_driver(gen, recorder.trajectories, cfg)
    # one sticky request id per episode, veRL's sampling settings plus the driver's per-turn budget
    ids = {rid for rid, _, _ in server.requests}
    assert len(ids) == len(recorder.trajectories)
    temperature = load_spec(job.path / "spec.yaml").agent.sampling.temperature  # the spec's, through veRL's config
    assert all(p["max_tokens"] <= 12 and p["temperature"] == temperature and p["logprobs"]
               for _, _, p in server.requests)


def test_scripted_tool_episodes_keep_masks_rewards_and_metrics(scripted_rollout: dict[str, Any]) -> None:
    gen, trajectories, cfg = scripted_rollout["gen"], scripted_rollout["trajectories"], scripted_rollout["cfg"]
    rows = check_batch_matches_driver(gen, trajectories, cfg)
    for row in rows:  # tool observations are in the response with mask 0, between generated turns
        mask = row["response_mask"]
        assert mask[0] == 1 and mask[-1] == 1 and 0 in mask
    assert sorted(round(r["reward"], 3) for r in rows) == [0.1] * 4 + [1.1] * 4  # format 0.1 (+ exact 1.0)
    spec = load_spec(small_job_spec(scripted_rollout))
    keys = gen.meta_info["reward_extra_keys"]
    assert keys == ["score", *(r.id for r in spec.reward), PROCESS]
    scores = gen.non_tensor_batch["score"].tolist()
    assert scores == pytest.approx([r["reward"] for r in rows])
    assert sorted(gen.non_tensor_batch["math/exact_answer"].tolist()) == [0.0] * 4 + [1.0] * 4
    metrics = gen.meta_info["metrics"]
    assert all(m["episode/turns"] == 2.0 and m["tools/calls"] == 1.0 for m in metrics)
    assert all(m["generate_sequences"] > 0 for m in metrics)
    infos = gen.non_tensor_batch["agentbridge"].tolist()
    tasks = {t.id for t in load_tasks(spec, "train")}
    assert all(i["finish_reason"] == "done" and i["task_id"] in tasks and not i["truncated"] for i in infos)


def small_job_spec(rollout: dict[str, Any]) -> str:
    return str(rollout["job"].path / "spec.yaml")


def test_responses_are_cut_to_verls_response_length(small_job: Job, tiny_model: tuple[Any, Any]) -> None:
    """veRL does not truncate: the loop caps the driver's budgets to rollout.response_length."""
    from omegaconf import open_dict

    model, tokenizer = tiny_model
    cfg = compose_worker_config(small_job.path)
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.response_length = 40
    spec = load_spec(small_job.path / "spec.yaml")
    recorder = record_trajectories()
    server = HFServerStandIn(model, tokenizer, calculator_script(load_tasks(spec, "train")))
    gen = generate(cfg, server, input_batch(cfg, tokenizer, PROMPTS))
    assert gen.batch["responses"].shape[1] == 40
    assert all(len(t.response_ids) <= 40 for t in recorder.trajectories)
    assert {t.finish_reason for t in recorder.trajectories} == {"length"}
    check_batch_matches_driver(gen, recorder.trajectories, cfg)

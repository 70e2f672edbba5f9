"""The protocol the adapter speaks, checked without slime: SGLang's ``/generate`` request and reply (over the
loopback stand-in for slime's router, through real HTTP) and the ``Sample`` fields each episode becomes. The golden
episodes run through the generate function's own pieces (its runner built from the compiled job's flags, its policy,
its sample fields) must give the driver's reference records: prompt ids, response ids, loss mask, log-probs, reward."""

from __future__ import annotations

import asyncio
import json
from argparse import Namespace
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from agentbridge.adapter import TASK_KEY, decode_task
from agentbridge.conformance.golden import BACKEND_LENGTHS, LENGTHS, cases
from agentbridge.conformance.records import EpisodeRecord, compare
from agentbridge.conformance.suite import golden_spec, reference_records
from agentbridge.rollout.training import TrainingSequence, episode_sample
from agentbridge.trajectory import Trajectory
from agentbridge_slime.backend import SlimeBackend
from agentbridge_slime.protocol import (
    EngineAborted,
    RouterPolicy,
    generation_of,
    request_payload,
    sample_fields,
    spans,
    status_of,
)
from agentbridge_slime.rollout import runner_for, spec_path
from agentbridge_slime.standin import GoldenRouterStandIn


async def http_post(url: str, payload: dict[str, Any]) -> dict[str, Any]:
    """What slime's ``http_utils.post`` does for one request: POST JSON, raise on an error status, the JSON reply."""
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        reply = await client.post(url, json=payload)
        reply.raise_for_status()
        return dict(reply.json())


def test_request_and_reply() -> None:
    payload = request_payload([1, 2, 3], {"temperature": 0.7, "top_k": -1, "max_new_tokens": 999}, 48)
    assert payload == {"input_ids": [1, 2, 3], "return_logprob": True,
                       "sampling_params": {"temperature": 0.7, "top_k": -1, "max_new_tokens": 48}}
    gen = generation_of({"text": "ab", "meta_info": {"output_token_logprobs": [[-0.5, 7, None], [-0.25, 9, None]],
                                                     "finish_reason": {"type": "length", "length": 2}}})
    assert (gen.token_ids, gen.logprobs, gen.finish_reason) == ([7, 9], [-0.5, -0.25], "length")
    assert generation_of({"meta_info": {"finish_reason": {"type": "stop"}}}).token_ids == []
    with pytest.raises(EngineAborted):
        generation_of({"meta_info": {"output_token_logprobs": [], "finish_reason": {"type": "abort"}}})


def test_spans_and_fields() -> None:
    seq = TrainingSequence([1, 2], [5, 6, 7, 8, 9], [1, 1, 0, 0, 1], [-0.1, -0.2, 0.0, 0.0, -0.3])
    assert spans(seq) == [(0, 2, True), (2, 4, False), (4, 5, True)]
    traj = Trajectory(task_id="t", prompt_ids=[1, 2], reward=0.75, finish_reason="length")
    fields = sample_fields(traj, seq)
    assert fields == {"tokens": [1, 2, 5, 6, 7, 8, 9], "response_length": 5, "loss_mask": [1, 1, 0, 0, 1],
                      "rollout_log_probs": [-0.1, -0.2, 0.0, 0.0, -0.3], "reward": 0.75, "status": "truncated"}
    reasons = ("done", "max_turns", "error")
    assert [status_of(Trajectory(task_id="t", prompt_ids=[], finish_reason=r)) for r in reasons] == [
        "completed", "completed", "failed"]
    assert spans(TrainingSequence([1], [2], [0], [0.0])) == [(0, 1, False)]  # the empty-episode fallback


def job_args(job_dir: Path) -> Namespace:
    """The ``args`` fields the generate function reads, from the compiled job's flags (slime would parse them)."""
    flags = yaml.safe_load((job_dir / "slime_job.yaml").read_text())
    return Namespace(agentbridge_spec=yaml.safe_load((job_dir / "agentbridge.yaml").read_text())["agentbridge_spec"],
                     custom_config_path=str(job_dir / "agentbridge.yaml"),
                     **{k.replace("-", "_"): flags[k] for k in ("rollout-max-prompt-len", "rollout-max-response-len",
                                                                "rollout-max-context-len", "rollout-temperature")})


def protocol_records(kind: str, workdir: Path) -> tuple[list[EpisodeRecord], list[dict[str, Any]]]:
    """The golden episodes of the compiled job's rows through the generate function's runner and policy over HTTP,
    each read back from its ``Sample`` fields; also the requests the stand-in received."""
    sets = ["backend.name=slime"]
    if kind == LENGTHS:
        prompt, response = BACKEND_LENGTHS["max_prompt"], BACKEND_LENGTHS["max_response"]
        sets.append(f"backend.overrides={{rollout-max-prompt-len: {prompt}, rollout-max-response-len: {response}, "
                    f"rollout-max-context-len: {prompt + response}}}")
    job = SlimeBackend().compile(golden_spec(kind, sets), workdir / kind)
    args = job_args(job.path)
    assert spec_path(args) == job.path.resolve() / "spec.yaml"
    agent = runner_for(args).agent
    rows = [json.loads(line) for line in (job.path / "data" / "train.jsonl").read_text().splitlines()]
    tasks = [decode_task(row["metadata"].get(TASK_KEY), "slime") for row in rows]
    with GoldenRouterStandIn(agent.tokenizer) as router:
        policy = RouterPolicy(f"{router.url}/generate", {"temperature": args.rollout_temperature,
                                                        "max_new_tokens": args.rollout_max_response_len}, http_post)
        trajectories = asyncio.run(agent.run(tasks, policy, concurrency=4))
    records = []
    for task, traj in zip(tasks, trajectories, strict=True):
        fields = sample_fields(traj, episode_sample(traj, task, agent.renderer, agent.spec.agent.system_prompt))
        n = fields["response_length"]
        assert len(fields["loss_mask"]) == len(fields["rollout_log_probs"]) == n > 0
        records.append(EpisodeRecord(case=task.id, prompt_ids=fields["tokens"][:-n], response_ids=fields["tokens"][-n:],
                                     response_mask=fields["loss_mask"], logprobs=fields["rollout_log_probs"],
                                     reward=fields["reward"]))
    return records, router.requests


@pytest.mark.parametrize("kind", ["text", LENGTHS])
def test_golden_episodes_through_the_protocol(tmp_path: Path, kind: str) -> None:
    records, requests = protocol_records(kind, tmp_path)
    assert sorted(r.case for r in records) == sorted(cases(kind))
    assert compare(reference_records(kind, turn_credit=False), records, "slime (protocol)") == []
    limit = BACKEND_LENGTHS["max_response"] if kind == LENGTHS else 48  # each turn's budget reached SGLang
    assert requests and all(r["return_logprob"] is True and 0 < r["sampling_params"]["max_new_tokens"] <= limit
                            for r in requests)
    assert all(r["sampling_params"]["temperature"] == 1.0 for r in requests)


def test_the_stand_in_speaks_sglangs_protocol(tmp_path: Path) -> None:
    from agentbridge.models import load_tokenizer

    tokenizer = load_tokenizer("builtin:tiny-qwen2.5")
    prompt = tokenizer.encode("<|im_start|>user\n[golden:tools] Add 2 and 3.<|im_end|>\n<|im_start|>assistant\n")
    with GoldenRouterStandIn(tokenizer) as router:
        reply = httpx.post(f"{router.url}/generate", json=request_payload(prompt, {}, 5), trust_env=False).json()
        workers = httpx.get(f"{router.url}/workers", trust_env=False).json()
        missing = httpx.post(f"{router.url}/generate", json={"sampling_params": {}}, trust_env=False)
    assert workers == {"workers": []} and missing.status_code == 400
    pairs = reply["meta_info"]["output_token_logprobs"]
    assert len(pairs) == 5 and reply["meta_info"]["finish_reason"] == {"type": "length"}
    assert tokenizer.decode([p[1] for p in pairs]) == reply["text"] and all(-1 < p[0] < 0 for p in pairs)

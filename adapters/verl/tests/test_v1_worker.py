"""veRL's V1 trainer (the default, ``trainer.use_v1=true``) drives agentbridge's agent loop through
``AgentLoopWorkerTQ``: what its replay buffer samples from TransferQueue is exactly what the driver produced, grouped
the way its GRPO advantage reads it (``agentbridge_verl.inprocess_v1``; a local Ray and TransferQueue)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import transfer_queue as tq
from conftest import compile_job
from worker_harness import ScriptedServer, calculator_script, compose_worker_config, record_trajectories

from agentbridge.models import load_tokenizer
from agentbridge.rewards import PROCESS
from agentbridge.rollout.agent import load_tasks
from agentbridge.spec import load_spec
from agentbridge_verl.inprocess import ActorStandIn, RewardLoopWorkerStandIn
from agentbridge_verl.inprocess_v1 import V1RolloutError, v1_rollout_step

PROMPTS, N = 2, 4  # conftest.SMALL: algorithm.batch_size=2, group_size=4


@pytest.fixture(scope="module")
def v1_step(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The calculator expert's episodes (every second one answers wrong) through the V1 trainer's step."""
    job = compile_job(tmp_path_factory.mktemp("verl-v1") / "job", "backend.options={agent_workers: 2}")
    cfg = compose_worker_config(job.path)
    spec = load_spec(job.path / "spec.yaml")
    recorder = record_trajectories()
    server = ScriptedServer(load_tokenizer("builtin:tiny"), calculator_script(load_tasks(spec, "train")))
    step = v1_rollout_step(cfg, server, [ActorStandIn(RewardLoopWorkerStandIn())])
    extra = tq.kv_batch_get(keys=step.batch.keys, partition_id="train", select_fields=["extra_fields"])
    return {"cfg": cfg, "spec": spec, "step": step, "trajectories": list(recorder.trajectories),
            "extra_fields": list(extra["extra_fields"])}


def test_sampled_trajectories_equal_the_driver(v1_step: dict[str, Any]) -> None:
    step, trajectories = v1_step["step"], v1_step["trajectories"]
    data = step.data
    assert len(step.batch.keys) == len(trajectories) == PROMPTS * N
    def row(prompt: list[int], response: list[int], mask: list[int], logprobs: list[float], reward: float) -> Any:
        return prompt, response, mask, [round(x, 5) for x in logprobs], round(reward, 5)

    got = []
    for i, tag in enumerate(step.batch.tags):
        prompt, response = data["prompts"][i].tolist(), data["responses"][i].tolist()
        scores = data["rm_scores"][i]
        assert not scores[:-1].any()  # the reward sits on the last response token
        got.append(row(prompt, response, data["response_mask"][i].tolist(), data["rollout_log_probs"][i].tolist(),
                       scores[-1].item()))
        assert data["input_ids"][i].tolist() == prompt + response  # the sequence the actor trains on
        # the lengths the V1 trainer balances data-parallel ranks by
        assert (tag["prompt_len"], tag["response_len"], tag["seq_len"]) == (
            len(prompt), len(response), len(prompt) + len(response))
    assert sorted(got) == sorted(row(t.prompt_ids, t.response_ids, t.response_mask, t.logprobs, t.reward)
                                 for t in trajectories)


def test_episodes_are_grouped_by_prompt_for_the_advantage(v1_step: dict[str, Any]) -> None:
    """Keys are ``{uid}_{session}_{index}``: one uid per prompt, rollout.n sessions each, one output per session;
    veRL's own V1 GRPO advantage over the stored rows rewards the right answers and penalises the wrong ones."""
    step = v1_step["step"]
    keys = [k.rsplit("_", 2) for k in step.batch.keys]
    uids = list(step.data["uid"])
    assert [uid for uid, _, _ in keys] == uids
    assert sorted((uid, int(s), int(i)) for uid, s, i in keys) == sorted(
        (uid, s, 0) for uid in set(uids) for s in range(N))
    tasks = {uid: {e["agentbridge"]["task_id"] for e, u in zip(v1_step["extra_fields"], uids, strict=True)
                   if u == uid} for uid in set(uids)}
    assert len(tasks) == PROMPTS and all(len(t) == 1 for t in tasks.values())

    # old_log_probs as veRL's rollout-correction bypass mode sets them (the actor's log-prob pass needs a GPU)
    logprobs = tq.kv_batch_get(keys=step.batch.keys, partition_id="train", select_fields=["rollout_log_probs"])
    logprobs["old_log_probs"] = logprobs.pop("rollout_log_probs")
    tq.kv_batch_put(keys=step.batch.keys, partition_id="train", fields=logprobs)
    step.trainer._compute_advantage(step.batch, {})
    adv = tq.kv_batch_get(keys=step.batch.keys, partition_id="train", select_fields=["advantages"])["advantages"]
    for i in range(len(step.batch.keys)):
        a, reward = adv[i], step.data["rm_scores"][i].sum().item()
        generated = step.data["response_mask"][i].bool()
        assert len(a) == len(generated) and not a[~generated].any()  # observation tokens get none
        assert (a[generated] == a[0]).all()
        assert (a[0].item() > 0) == (reward > 1.0)  # 1.1 (exact answer + format) vs 0.1 (format only)


def test_reward_extra_info_and_driver_metadata_reach_the_store(v1_step: dict[str, Any]) -> None:
    spec, extra = v1_step["spec"], v1_step["extra_fields"]
    rewards = [v1_step["step"].data["rm_scores"][i].sum().item() for i in range(len(extra))]
    for e, reward in zip(extra, rewards, strict=True):
        info = e["reward_extra_info"]
        assert list(info) == ["score", *(r.id for r in spec.reward), PROCESS]
        assert info["score"] == pytest.approx(reward)
        assert e["agentbridge"]["finish_reason"] == "done" and not e["agentbridge"]["truncated"]
    assert sorted(e["reward_extra_info"]["math/exact_answer"] for e in extra) == [0.0] * 4 + [1.0] * 4


class BrokenServer:
    """A vLLM server that is gone: every request fails."""

    async def generate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("vLLM server went away")


def test_episodes_whose_server_fails_at_once_still_reach_the_sample(v1_step: dict[str, Any]) -> None:
    """The driver turns the failure into an error episode with no response; the agent loop hands veRL one EOS with
    mask 0 for it (veRL's V1 worker needs a last response token for the reward), so the groups stay whole."""
    cfg = copy.deepcopy(v1_step["cfg"])
    cfg.algorithm.filter_groups.enable = False  # dapo's group filter would evict these all-zero groups (by design)
    step = v1_rollout_step(cfg, BrokenServer(), [ActorStandIn(RewardLoopWorkerStandIn())], timeout_s=120)
    eos = load_tokenizer("builtin:tiny").eos_token_id
    assert len(step.batch.keys) == PROMPTS * N
    for i in range(PROMPTS * N):
        assert step.data["responses"][i].tolist() == [eos] and step.data["response_mask"][i].tolist() == [0]
        assert step.data["rollout_log_probs"][i].tolist() == [0.0]
    extra = tq.kv_batch_get(keys=step.batch.keys, partition_id="train", select_fields=["extra_fields"])
    assert all(e["agentbridge"]["finish_reason"] == "error" and "vLLM server went away" in e["agentbridge"]["error"]
               for e in extra["extra_fields"])


def test_a_failing_agent_loop_fails_the_step_instead_of_hanging(monkeypatch: pytest.MonkeyPatch,
                                                                v1_step: dict[str, Any]) -> None:
    """veRL only logs an agent loop's exception and refills the prompt group; the step stops with the error."""
    from agentbridge_verl.rollout import AgentBridgeAgentLoop

    async def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the agent loop broke")

    monkeypatch.setattr(AgentBridgeAgentLoop, "run", broken)
    with pytest.raises(V1RolloutError, match=r"episode\(s\) failed in veRL's AgentLoopWorkerTQ; the first: "
                       "RuntimeError: the agent loop broke"):
        v1_rollout_step(v1_step["cfg"], BrokenServer(), [ActorStandIn(RewardLoopWorkerStandIn())], timeout_s=120)

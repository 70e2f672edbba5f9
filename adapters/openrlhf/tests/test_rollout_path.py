"""OpenRLHF 0.11.2's own rollout path on a local Ray cluster runs agentbridge's executor.

Real: OpenRLHF's parser (on the compiled launch.sh), ``get_tokenizer``, ``blending_datasets``, ``PromptDataset``,
``SamplesGenerator`` (dispatch, engine load balancing, Experience building), the ``RolloutRayActor`` Ray actor
(``__init__``, ``_load_agent_executor`` on the job's agent file, ``generate``, ``generate_responses``) and
``RemoteExperienceMaker`` (advantages). Stand-ins: vLLM (``standins/vllm``: a scripted engine) and DeepSpeed
(``standins/deepspeed_standin.py``) only.
"""

from __future__ import annotations

import json
import os
import types
from typing import Any

import pytest
from conftest import SMALL, standins_on_path

from agentbridge.spec import load_spec
from agentbridge_openrlhf.backend import OpenRLHFBackend
from agentbridge_openrlhf.validate import job_argv, parse_args

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "%s"}}\n</tool_call>'
SCRIPT = [[CALL % "2 + 3", CALL % "7 * 6", "I do not know."],      # turn 1: a tool call, or a direct non-answer
          ["<answer>5</answer>", "<answer>42</answer>", "The result is in."]]  # turn 2: answers or not


@pytest.fixture(scope="module")
def rollout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    standins_on_path()
    os.environ["VLLM_STANDIN_SCRIPT"] = json.dumps(SCRIPT)
    os.environ["AGENTBRIDGE_OPENRLHF_KEEP"] = "64"
    import ray
    import torch
    from torch.utils.data import DataLoader

    from agentbridge.models import resolve_model_path

    spec = load_spec("examples/calculator.yaml", [*SMALL, "algorithm.name=grpo",
                                                  "backend.options={is_correction: token}"])
    job = OpenRLHFBackend().compile(spec, tmp_path_factory.mktemp("rollout") / "job").path
    model = str(resolve_model_path(spec.model.path))
    args = parse_args(job_argv(job, model))
    assert args.reward.remote_url == ["agent"]  # OpenRLHF's agent mode

    from openrlhf.datasets import PromptDataset
    from openrlhf.datasets.utils import blending_datasets
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from openrlhf.trainer.ray.vllm_engine import RolloutRayActor
    from openrlhf.utils.utils import get_tokenizer

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        strategy = types.SimpleNamespace(args=args, is_rank_0=lambda: True, print=lambda *a, **k: None)
        tokenizer = get_tokenizer(model, None, "left", strategy)
        data = blending_datasets(args.data.prompt_dataset, args.data.prompt_probs, strategy,
                                 dataset_split=args.data.prompt_split, max_count=args.data.max_samples)
        dataset = PromptDataset(data, tokenizer, strategy, input_template=args.data.input_template)
        loader = DataLoader(dataset, batch_size=args.rollout.batch_size, shuffle=False, collate_fn=dataset.collate_fn)
        engines = [RolloutRayActor.options(num_cpus=0, num_gpus=0).remote(
            model, seed=i, num_gpus=0, agent_func_path=args.train.agent_func_path, remote_rm_url=None,
            mm_pad_token_ids=set()) for i in range(2)]
        generator = SamplesGenerator(strategy, loader, None, tokenizer, engines)
        generate_kwargs = {"max_len": args.data.max_len, "max_new_tokens": args.rollout.max_new_tokens,
                           "temperature": args.rollout.temperature, "top_p": args.rollout.top_p,
                           "n_samples_per_prompt": args.rollout.n_samples_per_prompt}
        experiences, _, consumed, _ = generator.generate_samples(**generate_kwargs)
        episodes = [t for e in engines for t in ray.get(e.__ray_call__.remote(lambda self: list(
            self.executor.recent)))]
        requests = ray.get([e.__ray_call__.remote(lambda self: self.llm.requests) for e in engines])

        from deepspeed_standin import install

        install()
        from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
        from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

        maker = RemoteExperienceMaker(None, None, None, None, FixedKLController(0.0), strategy, tokenizer)
        batches = maker.split_rollout_samples(experiences)
        for b in batches:
            b.kl, b.values = torch.zeros_like(b.action_mask, dtype=torch.float32), None
        advantaged = maker.compute_advantages_and_returns(batches)
    finally:
        ray.shutdown()
    return {"args": args, "experiences": experiences, "episodes": episodes, "consumed": consumed,
            "advantaged": advantaged, "requests": requests, "tokenizer": tokenizer}


def test_every_sample_ran_through_the_driver(rollout: dict[str, Any]) -> None:
    args, exps, episodes = rollout["args"], rollout["experiences"], rollout["episodes"]
    assert rollout["consumed"] == args.rollout.batch_size == 2
    assert len(exps) == len(episodes) == args.rollout.batch_size * args.rollout.n_samples_per_prompt == 8
    assert all(n > 0 for n in map(len, rollout["requests"]))  # both engines got work
    assert {t.finish_reason for t in episodes} <= {"done", "max_turns"}
    assert any(len(t.turns) == 2 for t in episodes)  # tool call, tool result, answer


def test_ids_masks_rewards_and_logprobs_equal_the_drivers(rollout: dict[str, Any]) -> None:
    unmatched = list(rollout["episodes"])
    for exp in rollout["experiences"]:
        task_id, seq = json.loads(exp.labels[0])["id"], exp.sequences[0].tolist()
        got_logprobs = exp.rollout_log_probs[0].tolist()
        # samples of one prompt can share tokens; their (random) rollout log-probs tell them apart
        traj = next(t for t in unmatched if t.task_id == task_id and t.prompt_ids + t.response_ids == seq
                    and ([0.0] * len(t.prompt_ids) + t.logprobs)[1:] == pytest.approx(got_logprobs, abs=1e-6))
        unmatched.remove(traj)
        mask = [0] * len(traj.prompt_ids) + traj.response_mask
        assert exp.action_mask[0].tolist() == mask[1:]  # OpenRLHF's action mask is shifted by one
        assert exp.rewards.tolist() == [pytest.approx(traj.reward)]
        assert exp.scores.tolist() == [pytest.approx(traj.reward)]
        assert exp.truncated.tolist() == [traj.finish_reason == "length"]
        assert exp.info["episode/turns"].tolist() == [len(traj.turns)]
        assert exp.info["reward/math/exact_answer"].tolist() == [traj.reward_components["math/exact_answer"]]
    assert unmatched == []  # a bijection
    rewards = {round(t.reward, 3) for t in rollout["episodes"]}
    assert len(rewards) > 1, rewards  # the script yields different rewards, so advantages are not all zero


def test_tool_results_are_context_not_trained(rollout: dict[str, Any]) -> None:
    tok = rollout["tokenizer"]
    traj = next(t for t in rollout["episodes"] if len(t.turns) == 2)
    context = [i for i, m in zip(traj.response_ids, traj.response_mask, strict=True) if m == 0]
    trained = [i for i, m in zip(traj.response_ids, traj.response_mask, strict=True) if m == 1]
    assert "<tool_response>" in tok.decode(context) and "<tool_response>" not in tok.decode(trained)
    assert tok.decode(trained).count("<|im_end|>") == 2


def test_group_norm_advantages_from_the_drivers_rewards(rollout: dict[str, Any]) -> None:
    import torch

    n = rollout["args"].rollout.n_samples_per_prompt
    rows = sorted(((b.index[j], float(b.rewards[j]), b.advantages[j], b.action_mask[j])
                   for b in rollout["advantaged"] for j in range(len(b.index))), key=lambda r: r[0])
    assert [r[0] for r in rows] == list(range(len(rollout["episodes"])))
    rewards = torch.tensor([r[1] for r in rows]).reshape(-1, n)
    expected = ((rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9)).reshape(-1)
    assert expected.abs().sum() > 0
    for (_, _, advantages, mask), want in zip(rows, expected.tolist(), strict=True):
        adv = advantages[mask.bool()]
        assert adv.numel() == int(mask.sum()) > 0
        assert adv.tolist() == pytest.approx([want] * adv.numel(), abs=1e-5)


def test_engine_budgets_come_from_the_driver(rollout: dict[str, Any]) -> None:
    """Each vLLM call gets the driver's per-turn budget, never OpenRLHF's max_len - context."""
    per_turn = 48
    calls = [r for engine in rollout["requests"] for r in engine]
    assert calls and all(r["max_tokens"] <= per_turn for r in calls)
    assert max(r["max_tokens"] for r in calls) == per_turn

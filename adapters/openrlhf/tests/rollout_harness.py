"""OpenRLHF 0.11.2's own rollout path on a local Ray cluster, for any compiled job (reusable by other tests).

Real: OpenRLHF's parser (on the job's launch.sh), ``get_tokenizer`` (an ``AutoProcessor`` for a VLM),
``blending_datasets``, ``PromptDataset`` (the image key included), ``create_vllm_engines`` (VLM pad-token detection,
``limit_mm_per_prompt``, placement group; Ray is given as many logical GPUs as engines), the ``RolloutRayActor``
(``_load_agent_executor`` on the job's agent file, ``generate`` with its pad-token dedup, ``generate_responses``),
``SamplesGenerator`` (dispatch, load balancing, Experience building) and ``RemoteExperienceMaker`` (split,
advantages). Stand-ins: vLLM (``standins/vllm``: a scripted engine), DeepSpeed (``standins/deepspeed_standin.py``)
and, without torchvision, the VLM processor's video part (``standins/torchvision_gap.py``).
"""

from __future__ import annotations

import json
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STANDINS = Path(__file__).resolve().parent / "standins"


@dataclass
class Rollout:
    """What one ``generate_samples`` call produced, seen from OpenRLHF and from agentbridge's driver."""

    args: Any                               # OpenRLHF's parsed args for the job
    experiences: list[Any]                  # SamplesGenerator's Experiences, one per episode
    consumed: int                           # prompts consumed
    advantaged: list[Any]                   # RemoteExperienceMaker's micro-batches with advantages
    episodes: list[Any]                     # the driver's Trajectories (every engine's executor kept them)
    requests: list[list[dict[str, Any]]]    # per engine: what the scripted vLLM engine was asked
    tokenizer: Any                          # OpenRLHF's tokenizer (a processor for a VLM)


def on_path(*dirs: Path) -> None:
    """Put ``dirs`` on this process's ``sys.path`` and on ``PYTHONPATH`` (inherited by Ray workers)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for d in reversed([str(d) for d in dirs]):
        if d not in sys.path:
            sys.path.insert(0, d)
        if d not in paths:
            paths.insert(0, d)
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)


def run_rollout(job: Path, model: str, script: list[list[str]], *, engines: int = 2,
                keep: int = 64) -> Rollout:
    """One rollout batch of ``job`` through OpenRLHF's rollout path, the vLLM stand-in playing ``script``.

    ``script``: per assistant turn, the texts the scripted engine picks from (seeded per engine). The job's
    executors keep their last ``keep`` episodes for comparison.
    """
    on_path(STANDINS)
    os.environ["VLLM_STANDIN_SCRIPT"] = json.dumps(script)
    os.environ["AGENTBRIDGE_OPENRLHF_KEEP"] = str(keep)
    import torchvision_gap

    torchvision_gap.install()
    import ray
    import torch
    from torch.utils.data import DataLoader

    from agentbridge_openrlhf.validate import job_argv, parse_args

    args = parse_args(job_argv(job, model))
    assert args.reward.remote_url == ["agent"]  # OpenRLHF's agent mode

    from openrlhf.datasets import PromptDataset
    from openrlhf.datasets.utils import blending_datasets
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from openrlhf.trainer.ray.vllm_engine import create_vllm_engines
    from openrlhf.utils.utils import get_tokenizer

    ray.init(num_cpus=2, num_gpus=engines, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        strategy = types.SimpleNamespace(args=args, is_rank_0=lambda: True, print=lambda *a, **k: None)
        tokenizer = get_tokenizer(model, None, "left", strategy)
        data = blending_datasets(args.data.prompt_dataset, args.data.prompt_probs, strategy,
                                 dataset_split=args.data.prompt_split, max_count=args.data.max_samples)
        dataset = PromptDataset(data, tokenizer, strategy, input_template=args.data.input_template)
        loader = DataLoader(dataset, batch_size=args.rollout.batch_size, shuffle=False, collate_fn=dataset.collate_fn)
        vllm_engines = create_vllm_engines(
            engines, args.vllm.tensor_parallel_size, model, args.train.seed, args.train.full_determinism_enable,
            args.vllm.enable_prefix_caching, args.vllm.enforce_eager, args.data.max_len, None,
            args.vllm.gpu_memory_utilization, args.vllm.enable_sleep,
            "processed_logprobs" if args.algo.advantage.is_correction_level != "off" else None,
            agent_func_path=args.train.agent_func_path, remote_rm_url=args.reward.remote_url,
            max_images_per_prompt=getattr(args.data, "max_images_per_prompt", 0))
        generator = SamplesGenerator(strategy, loader, None, tokenizer, vllm_engines)
        experiences, _, consumed, _ = generator.generate_samples(
            max_len=args.data.max_len, max_new_tokens=args.rollout.max_new_tokens,
            temperature=args.rollout.temperature, top_p=args.rollout.top_p,
            n_samples_per_prompt=args.rollout.n_samples_per_prompt)
        episodes = [t for e in vllm_engines
                    for t in ray.get(e.__ray_call__.remote(lambda self: list(self.executor.recent)))]
        requests = ray.get([e.__ray_call__.remote(lambda self: self.llm.requests) for e in vllm_engines])

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
    return Rollout(args=args, experiences=experiences, consumed=consumed, advantaged=advantaged,
                   episodes=episodes, requests=requests, tokenizer=tokenizer)


def match_episodes(rollout: Rollout) -> list[tuple[Any, Any]]:
    """Pair each Experience with the driver's Trajectory it came from (a bijection, or AssertionError).

    Samples of one prompt can share tokens; their rollout log-probs (random per call when the job asks vLLM for
    them) or, failing that, their order tell them apart.
    """
    unmatched = list(rollout.episodes)
    pairs = []
    for exp in rollout.experiences:
        task_id, seq = json.loads(exp.labels[0])["id"], exp.sequences[0].tolist()
        got = exp.rollout_log_probs[0].tolist() if exp.rollout_log_probs is not None else None

        def same(t: Any, task_id: str = task_id, seq: list[int] = seq, got: list[float] | None = got) -> bool:
            if t.task_id != task_id or t.prompt_ids + t.response_ids != seq:
                return False
            want = ([0.0] * len(t.prompt_ids) + t.logprobs)[1:]
            return got is None or all(abs(a - b) <= 1e-6 for a, b in zip(want, got, strict=True))

        traj = next((t for t in unmatched if same(t)), None)
        assert traj is not None, f"an Experience of task {task_id} matches no driver episode"
        unmatched.remove(traj)
        pairs.append((exp, traj))
    assert unmatched == [], f"{len(unmatched)} driver episodes reached no Experience"
    return pairs

"""OpenRLHF 0.11.2's own rollout path on a local Ray cluster, for any compiled job, with vLLM and DeepSpeed stood in.

Used by the conformance run (:mod:`agentbridge_openrlhf.conformance`: two jobs side by side on one cluster,
:func:`run_rollouts`) and the adapter's tests; a real job runs ``openrlhf.cli.train_ppo_ray`` instead, on GPUs.

Real: OpenRLHF's parser (on the job's launch.sh), ``get_tokenizer`` (an ``AutoProcessor`` for a VLM),
``blending_datasets``, ``PromptDataset`` (the image key included), ``create_vllm_engines`` (VLM pad-token detection,
``limit_mm_per_prompt``, placement group; Ray is given as many logical GPUs as engines, over all jobs), the
``RolloutRayActor`` (``_load_agent_executor`` on the job's agent file, ``generate`` with its pad-token dedup,
``generate_responses``), ``SamplesGenerator`` (dispatch, load balancing, Experience building) and
``RemoteExperienceMaker`` (``split_rollout_samples``: the padded micro-batches; ``compute_advantages_and_returns``:
length penalties, advantages). Stand-ins (:mod:`agentbridge_openrlhf.standins`): vLLM (an engine without a model),
DeepSpeed (so the experience maker imports; the actor/reference forward passes of ``make_experience`` are not run,
their KL is zero) and, without torchvision, the VLM processor's video part.
"""

from __future__ import annotations

import contextlib
import json
import os
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbridge_openrlhf.standins import ENGINES, on_path, use_vllm_standin

ENV = ("PYTHONPATH", "VLLM_STANDIN_ENGINE", "VLLM_STANDIN_SCRIPT", "AGENTBRIDGE_OPENRLHF_KEEP")

__all__ = ["Rollout", "on_path", "run_rollout", "run_rollouts"]


@dataclass
class Rollout:
    """What one ``generate_samples`` call produced, seen from OpenRLHF (and, for tests, from agentbridge's driver)."""

    args: Any                               # OpenRLHF's parsed args for the job
    experiences: list[Any]                  # SamplesGenerator's Experiences, one per episode
    consumed: int                           # prompts consumed
    advantaged: list[Any]                   # RemoteExperienceMaker's micro-batches with advantages
    episodes: list[Any]                     # the driver's Trajectories, when the executors kept them (keep > 0)
    requests: list[list[dict[str, Any]]]    # per engine: what the vLLM stand-in was asked
    tokenizer: Any                          # OpenRLHF's tokenizer (a processor for a VLM)
    images: dict[str, Any] = field(default_factory=dict)  # every image the vLLM stand-in was given, by digest


@contextlib.contextmanager
def _environment(values: dict[str, str | None]) -> Iterator[None]:
    """Set (or unset, for None) environment variables; restore every one of ``ENV`` afterwards."""
    saved = {k: os.environ.get(k) for k in ENV}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_rollout(job: Path, model: str, *, engine: str = "golden", script: list[list[str]] | None = None,
                engines: int = 1, keep: int = 0) -> Rollout:
    """One rollout batch of ``job`` through OpenRLHF's rollout path, then its training micro-batches with advantages.

    ``engine``: the vLLM stand-in's engine, ``golden`` (the conformance generator) or ``scripted`` (plays
    ``script``: per assistant turn, the texts it picks from, seeded per engine). ``engines``: how many engine
    actors OpenRLHF creates. ``keep``: how many episodes each executor keeps for inspection (tests). Starts a
    local Ray cluster of its own and shuts it down before returning.
    """
    return run_rollouts([job], model, engine=engine, script=script, engines=engines, keep=keep)[0]


def run_rollouts(jobs: list[Path], model: str, *, engine: str = "golden", script: list[list[str]] | None = None,
                 engines: int = 1, keep: int = 0) -> list[Rollout]:
    """:func:`run_rollout` for each of ``jobs`` (of the same model), on one local Ray cluster, the jobs side by
    side (a thread each): every job gets its own engine actors, tokenizer, dataset, ``SamplesGenerator`` and
    experience maker; only the cluster (and this process) is shared. One :class:`Rollout` per job, in order.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine == "scripted" and script is None:
        raise ValueError("the scripted engine needs a script")
    import ray

    if ray.is_initialized():
        raise RuntimeError("this process is already connected to a Ray cluster; OpenRLHF's rollout path here "
                           "starts (and shuts down) a local one of its own")
    from agentbridge_openrlhf.standins import torchvision_gap

    torchvision_gap.install()
    with _environment({"VLLM_STANDIN_ENGINE": engine, "VLLM_STANDIN_SCRIPT": json.dumps(script) if script else None,
                       "AGENTBRIDGE_OPENRLHF_KEEP": str(keep)}):
        use_vllm_standin()  # PYTHONPATH is restored afterwards; sys.path keeps the stand-in (vllm is imported)
        return _run([Path(job).resolve() for job in jobs], str(model), engines)


def _run(jobs: list[Path], model: str, engines: int) -> list[Rollout]:
    import ray

    from agentbridge_openrlhf.validate import job_argv, parse_args

    all_args = [parse_args(job_argv(job, model)) for job in jobs]
    for job, args in zip(jobs, all_args, strict=True):
        if args.reward.remote_url != ["agent"]:  # OpenRLHF's agent mode
            raise ValueError(f"{job}: not an agent-mode job (--reward.remote_url is {args.reward.remote_url})")
    _imports()  # here, before the jobs' threads import anything
    total = engines * len(jobs)
    ray.init(address="local", num_cpus=max(2, total), num_gpus=total, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    try:
        # tokenizers and datasets here: ``datasets`` lends tqdm's class lock out and deletes it afterwards
        # (tqdm.contrib.concurrent), which breaks a progress bar another thread draws meanwhile
        prepared = [_prepare(args, model) for args in all_args]
        if len(jobs) == 1:
            return [_generate(all_args[0], *prepared[0], _engines(all_args[0], model, engines))]
        # one thread per job: most of a job's time is the driver waiting on its Ray workers (the placement group's
        # readiness, the engine actor starting, the episodes), and those of different jobs overlap
        from concurrent.futures import ThreadPoolExecutor

        def one(args: Any, tokenizer: Any, loader: Any) -> Rollout:
            return _generate(args, tokenizer, loader, _engines(args, model, engines))

        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            runs = [pool.submit(one, args, *parts) for args, parts in zip(all_args, prepared, strict=True)]
            return [run.result() for run in runs]
    finally:
        ray.shutdown()


def _imports() -> None:
    """OpenRLHF's modules of the rollout path, in the order the single-job path first imported them."""
    import openrlhf.datasets
    import openrlhf.datasets.utils
    import openrlhf.trainer.ppo_utils.samples_generator
    import openrlhf.trainer.ray.vllm_engine
    import openrlhf.utils.utils  # noqa: F401

    from agentbridge_openrlhf.standins import deepspeed

    deepspeed.install()
    import openrlhf.trainer.ppo_utils.experience_maker
    import openrlhf.trainer.ppo_utils.kl_controller  # noqa: F401
    from tqdm import tqdm

    tqdm.get_lock()  # a class lock from the start: tqdm.contrib.concurrent then restores it instead of deleting it


def _prepare(args: Any, model: str) -> tuple[Any, Any]:
    """A job's tokenizer and prompt loader."""
    from openrlhf.datasets import PromptDataset
    from openrlhf.datasets.utils import blending_datasets
    from openrlhf.utils.utils import get_tokenizer
    from torch.utils.data import DataLoader

    strategy = types.SimpleNamespace(args=args, is_rank_0=lambda: True, print=lambda *a, **k: None)
    tokenizer = get_tokenizer(model, None, "left", strategy)
    data = blending_datasets(args.data.prompt_dataset, args.data.prompt_probs, strategy,
                             dataset_split=args.data.prompt_split, max_count=args.data.max_samples)
    dataset = PromptDataset(data, tokenizer, strategy, input_template=args.data.input_template)
    loader = DataLoader(dataset, batch_size=args.rollout.batch_size, shuffle=False, collate_fn=dataset.collate_fn)
    return tokenizer, loader


def _engines(args: Any, model: str, engines: int) -> list[Any]:
    """A job's vLLM engine actors (OpenRLHF's ``create_vllm_engines``: waits for their placement group)."""
    from openrlhf.trainer.ray.vllm_engine import create_vllm_engines

    return create_vllm_engines(
        engines, args.vllm.tensor_parallel_size, model, args.train.seed, args.train.full_determinism_enable,
        args.vllm.enable_prefix_caching, args.vllm.enforce_eager, args.data.max_len, None,
        args.vllm.gpu_memory_utilization, args.vllm.enable_sleep,
        "processed_logprobs" if args.algo.advantage.is_correction_level != "off" else None,
        agent_func_path=args.train.agent_func_path, remote_rm_url=args.reward.remote_url,
        max_images_per_prompt=getattr(args.data, "max_images_per_prompt", 0))


def _generate(args: Any, tokenizer: Any, loader: Any, vllm_engines: list[Any]) -> Rollout:
    """One ``generate_samples`` call on a started job, then its micro-batches with advantages."""
    import ray
    import torch
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    strategy = types.SimpleNamespace(args=args, is_rank_0=lambda: True, print=lambda *a, **k: None)
    generator = SamplesGenerator(strategy, loader, None, tokenizer, vllm_engines)
    experiences, _, consumed, _ = generator.generate_samples(
        max_len=args.data.max_len, max_new_tokens=args.rollout.max_new_tokens,
        temperature=args.rollout.temperature, top_p=args.rollout.top_p,
        n_samples_per_prompt=args.rollout.n_samples_per_prompt)
    episodes = [t for e in vllm_engines
                for t in ray.get(e.__ray_call__.remote(lambda self: list(self.executor.recent)))]
    requests = ray.get([e.__ray_call__.remote(lambda self: self.llm.requests) for e in vllm_engines])
    images: dict[str, Any] = {}
    for seen in ray.get([e.__ray_call__.remote(lambda self: self.llm.images) for e in vllm_engines]):
        images.update(seen)

    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    maker = RemoteExperienceMaker(None, None, None, None, FixedKLController(0.0), strategy, tokenizer)
    batches = maker.split_rollout_samples(experiences)
    for b in batches:  # what make_experience's DeepSpeed forward passes would add: no KL, no critic
        b.kl, b.values = torch.zeros_like(b.action_mask, dtype=torch.float32), None
    advantaged = maker.compute_advantages_and_returns(batches)
    return Rollout(args=args, experiences=experiences, consumed=consumed, advantaged=advantaged,
                   episodes=episodes, requests=requests, tokenizer=tokenizer, images=images)

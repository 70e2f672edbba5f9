"""slime's side of the conformance suite: the golden episodes through slime's own rollout path, read back from the
training data slime builds.

What runs is slime's own code, configured by the compiled job: the job's ``train.py`` arguments through slime's
parsers and ``slime_validate_args`` (:func:`agentbridge_slime.validate.parse_job`); a ``RolloutManager`` set up as
its ``__init__`` sets one up (``init_http_client``, the data source of ``--data-source-path`` over the job's rows,
the rollout function of ``--rollout-function-path``), minus ``start_rollout_servers``; then the manager's own
``_get_rollout_data`` (``generate_rollout`` -> ``generate_rollout_async`` -> ``generate_and_rm_group`` ->
``generate_and_rm`` -> the job's ``--custom-generate-function-path``, agentbridge's driver, posting through slime's
``http_utils.post``; ``abort``; the rollout-id contract) and ``_convert_samples_to_train_data``, whose
``tokens``, ``response_lengths``, ``loss_masks``, ``rollout_log_probs`` and ``raw_reward`` each episode is read from.

One stand-in: :class:`~agentbridge_slime.standin.GoldenRouterStandIn` for the SGLang router and engines that
``start_rollout_servers`` would start (SGLang needs a GPU).
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

from agentbridge import adapter as kit
from agentbridge.adapter.conformance import ConformanceError, EpisodeRecord, episode_record


def golden_job(kind: str, workdir: Path) -> tuple[Any, Any, Any]:
    """The golden spec of ``kind`` compiled into a slime job (for the ``lengths`` kind with slime's own lengths) and
    parsed by slime; returns ``(args, spec, tokenizer)``."""
    from agentbridge.adapter.conformance import golden_job as compile_golden
    from agentbridge.adapter.models import load_tokenizer, resolve_model_path
    from agentbridge_slime.backend import SlimeBackend
    from agentbridge_slime.validate import parse_job

    spec, job = compile_golden(SlimeBackend(), kind, workdir, "rollout-max-prompt-len: {max_prompt}, "
                               "rollout-max-response-len: {max_response}, rollout-max-context-len: {total}")
    level = logging.getLogger().level
    args = parse_job(job.resolve(), str(resolve_model_path(spec.model.path)), str(Path(workdir) / "run"))
    logging.getLogger().setLevel(level)
    return args, spec, load_tokenizer(spec.model.path)


def rollout_manager(args: Any) -> Any:
    """slime's ``RolloutManager`` (the plain class under its Ray actor) set up as its ``__init__`` does, without
    starting SGLang servers: the job's router address is the stand-in's."""
    from slime.ray.rollout import RolloutManager
    from slime.rollout.sglang_rollout import GenerateState
    from slime.utils.http_utils import init_http_client
    from slime.utils.misc import load_function

    cls = RolloutManager.__ray_actor_class__
    manager = cls.__new__(cls)
    manager.args, manager.pg, manager.servers = args, None, {}
    init_http_client(args)
    GenerateState.clear_instances()  # slime keeps one per process, built from the first job's args
    manager.data_source = load_function(args.data_source_path)(args)
    manager.generate_rollout = load_function(args.rollout_function_path)
    manager.eval_generate_rollout = load_function(args.eval_function_path)
    manager.custom_reward_post_process_func = (load_function(args.custom_reward_post_process_path)
                                               if args.custom_reward_post_process_path else None)
    manager.custom_convert_samples_to_train_data_func = (
        load_function(args.custom_convert_samples_to_train_data_path)
        if args.custom_convert_samples_to_train_data_path else None)
    return manager


def train_data(kind: str, workdir: Path) -> tuple[dict[str, Any], list[Any], Any]:
    """One rollout of the golden job through slime, and the training data slime builds from it; returns
    ``(train_data, samples, stand-in router)``."""
    from agentbridge_slime.standin import GoldenRouterStandIn

    args, _, tokenizer = golden_job(kind, workdir)
    with GoldenRouterStandIn(tokenizer) as router:
        args.sglang_router_ip, args.sglang_router_port = "127.0.0.1", router.port
        manager = rollout_manager(args)
        samples, _ = manager._get_rollout_data(rollout_id=0)
        data = manager._convert_samples_to_train_data(samples)
    return data, samples, router


def records_of(data: dict[str, Any], samples: list[Any]) -> list[EpisodeRecord]:
    """Each episode read back from slime's training data (one row per sample; the case from the sample's task)."""
    for key in ("tokens", "response_lengths", "loss_masks", "raw_reward"):
        if key not in data:
            raise ConformanceError(f"slime's training data carries no {key}")
    logprobs = data.get("rollout_log_probs")
    records = []
    for i, sample in enumerate(samples):
        tokens, n = list(data["tokens"][i]), int(data["response_lengths"][i])
        records.append(episode_record(
            kit.decode_task((sample.metadata or {}).get(kit.TASK_KEY), "slime").id, tokens[:len(tokens) - n],
            tokens[len(tokens) - n:], data["loss_masks"][i], logprobs[i] if logprobs is not None else None,
            data["raw_reward"][i]))
    return records


_RUNS = itertools.count()


def golden_records(kind: str, workdir: Path) -> list[EpisodeRecord]:
    """Run the golden ``kind`` episodes through slime's rollout path and read each back from its training data.

    slime trains on one reward per sample (``rewards``: ``raw_reward`` normalised within the group, as the
    algorithm asks): the records hold the raw reward and no per-token rewards (``token_rewards`` None), as for a
    backend without turn credit."""
    try:
        data, samples, _ = train_data(kind, Path(workdir) / f"run{next(_RUNS)}")
    except ImportError as e:  # slime's source is here, the packages its rollout path imports are not
        raise ConformanceError(f"slime imports here but its rollout path does not ({e}); install agentbridge-slime"
                               "[cpu] and sglang==0.5.23 --no-deps (adapters/slime/README.md)") from None
    return records_of(data, samples)

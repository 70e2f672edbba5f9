"""slime's ``--custom-generate-function-path``: agentbridge's rollout driver runs each sample's episode.

slime calls :func:`generate` once per sample from ``generate_and_rm`` (``slime/rollout/sglang_rollout.py``), inside
its rollout manager. The sample's metadata carries the task (``agentbridge_slime.data``); the driver runs the episode
with slime's SGLang router as its policy (:class:`~agentbridge_slime.protocol.RouterPolicy`, through slime's own
``http_utils.post``), and the episode is appended to the sample with slime's own ``Sample.append_response_tokens``
(trainable runs with their log-probs, environment runs with loss mask 0). The reward is the driver's, so slime calls
no reward model. The job's spec is found through ``args.agentbridge_spec``, which slime sets from the job's
``--custom-config-path`` (``agentbridge.yaml``, beside the spec).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentbridge import adapter as kit
from agentbridge.adapter.episode import EpisodeRunner
from agentbridge.adapter.rollout import TrainingSequence, Trajectory
from agentbridge.spec import load_spec
from agentbridge_slime.protocol import EngineAborted, RouterPolicy, sample_fields, spans

_RUNNERS: dict[str, EpisodeRunner] = {}


def spec_path(args: Any) -> Path:
    """The job's spec: ``args.agentbridge_spec`` (set by slime from ``agentbridge.yaml``), relative to that file."""
    name = getattr(args, "agentbridge_spec", None)
    config = getattr(args, "custom_config_path", None)
    if not name or not config:
        raise ValueError("slime's args carry no agentbridge_spec: launch the job with its --custom-config-path "
                         "agentbridge.yaml (agentbridge compile --backend slime writes it)")
    return Path(config).resolve().parent / str(name)


def runner_for(args: Any) -> EpisodeRunner:
    """The job's runner, built once per process (slime's rollout manager keeps one ``args``)."""
    path = str(spec_path(args))
    if path not in _RUNNERS:
        from agentbridge.adapter.models import load_tokenizer

        spec = load_spec(path)
        # slime's own tokenizer path (--hf-checkpoint: the model on this node) when it has one, else the spec's model;
        # slime keeps rollout_max_prompt_len prompt tokens and rollout_max_context_len in all: the driver cuts to them
        _RUNNERS[path] = EpisodeRunner(spec, load_tokenizer(getattr(args, "hf_checkpoint", None) or spec.model.path),
                                       "slime", max_prompt=getattr(args, "rollout_max_prompt_len", None),
                                       max_response=getattr(args, "rollout_max_response_len", None),
                                       max_total=getattr(args, "rollout_max_context_len", None))
    return _RUNNERS[path]


def fill_sample(args: Any, sample: Any, traj: Trajectory, seq: TrainingSequence, text: str) -> Any:
    """Put the episode on slime's ``sample``: its prompt tokens, then each response run through slime's own
    ``append_response_tokens`` (which keeps tokens, loss mask and log-probs aligned and checks them), the reward and
    the status."""
    from slime.utils.types import Sample

    fields = sample_fields(traj, seq)
    sample.tokens = list(seq.prompt_ids)
    sample.response, sample.response_length, sample.loss_mask, sample.rollout_log_probs = "", 0, None, None
    for start, end, trainable in spans(seq):
        sample.append_response_tokens(args, tokens=seq.response_ids[start:end], trainable=trainable,
                                      log_probs=seq.logprobs[start:end] if trainable else None)
    sample.response = text
    sample.reward = fields["reward"]
    sample.status = Sample.Status(fields["status"])
    return sample


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """One agentbridge episode for slime's ``sample`` (``--custom-generate-function-path``): the driver's tokens, loss
    mask, rollout log-probs and reward on the sample, which slime trains on as it is."""
    from slime.utils.http_utils import post
    from slime.utils.types import Sample

    runner = runner_for(args)
    agent = runner.agent
    task = kit.decode_task((sample.metadata or {}).get(kit.TASK_KEY), "slime")
    url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
    traj = await runner.play(task, RouterPolicy(url, sampling_params, post))
    if (traj.error or "").startswith(EngineAborted.__name__):  # slime aborted the engines: it drops this sample
        sample.status = Sample.Status.ABORTED
        return sample
    episode = runner.finish(task, traj, guard=not evaluation)
    text = agent.tokenizer.decode(episode.sample.response_ids) if traj.response_ids else ""
    fill_sample(args, sample, traj, episode.sample, text)
    sample.metadata["agentbridge"] = {**episode.info, "reward_components": dict(traj.reward_components),
                                      **episode.metrics}
    return sample

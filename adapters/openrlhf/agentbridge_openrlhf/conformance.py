"""OpenRLHF's side of the conformance suite: the golden episodes through OpenRLHF 0.11.2's own rollout path.

``golden_records(kind, workdir)`` compiles the golden spec with :class:`~agentbridge_openrlhf.backend.OpenRLHFBackend`
twice and runs one rollout batch of each job through :func:`agentbridge_openrlhf.rollout_path.run_rollouts` (both
on one local Ray cluster of its own, shut down before returning), reading every episode back from the training
micro-batches OpenRLHF built. Never from the driver's trajectories: the executors keep none.

- The job with the compiled job's default options (``backend.options.is_correction: off``): the records the suite
  compares on every field OpenRLHF holds there: prompt and response ids, response mask, reward, images. Their
  ``logprobs`` are None: this job does not ask vLLM for log-probs and OpenRLHF keeps no ``rollout_log_probs``
  (the actor recomputes the old log-probs), so the suite notes them as not held rather than passing them.
- The same spec with ``backend.options.is_correction: token`` (:data:`LOGPROB_JOB`): the setting under which
  OpenRLHF asks vLLM for log-probs and keeps them as ``rollout_log_probs``. Its records carry
  ``job="backend.options.is_correction=token"`` and are compared on the log-probs only; the suite's note says
  ``openrlhf: logprobs checked under backend.options.is_correction=token; the default job keeps none``.

Real: OpenRLHF's parser on the compiled launch.sh, ``get_tokenizer`` (an ``AutoProcessor`` for the VLM),
``blending_datasets`` and ``PromptDataset`` over the job's data, ``create_vllm_engines`` (one engine per job) and the
``RolloutRayActor`` (loading the job's agent file, i.e. agentbridge's executor and driver, pad-token dedup before
vLLM), ``SamplesGenerator`` (dispatch, ``_process_response_into_experience``) and ``RemoteExperienceMaker``
(``split_rollout_samples``: ``Experience.concat_experiences`` padding; ``compute_advantages_and_returns``: length
penalties). Stand-ins (:mod:`agentbridge_openrlhf.standins`): vLLM, whose engine is ``GoldenEngine`` answering with
:func:`agentbridge.conformance.golden.golden_turn`; DeepSpeed (so the experience maker imports; its model forward
passes are not run, KL is zero); and, without torchvision, the VLM processor's video part.

How each field is read from a micro-batch row (``index`` gives the episode, ``attention_mask`` its unpadded
length ``n``):

- prompt/response split: OpenRLHF keeps no prompt length; its ``action_mask`` marks the generated tokens shifted by
  one (``action_mask[i]`` is token ``i + 1``), and the driver's response starts with its first generated token, so
  the prompt is ``sequences[:first + 1]`` for the first 1 of ``action_mask`` at ``first`` (a row with no 1 is the
  core's empty-episode fallback: its response is its last token);
- ``response_mask``: ``action_mask[first:n - 1]`` (back to the driver's convention, one entry per response token);
- ``logprobs``: ``rollout_log_probs[first:n - 1]`` (0 where the environment wrote); None when the batch has no
  ``rollout_log_probs`` (the default job);
- ``reward``: ``rewards`` after ``compute_advantages_and_returns`` (what the advantages are computed from);
- ``token_rewards``: that reward where OpenRLHF's ``compute_reward`` places it (before its KL term) over
  ``[first:n - 1]``: OpenRLHF trains on one reward per episode, so under ``algorithm.credit: turn`` the suite
  expects the per-turn rewards summed on the last token;
- case: the ``id`` of the task the row's label carries;
- images: OpenRLHF holds no raw images for images the environment drew (its ``images`` field keeps only the
  dataset's image references), only ``mm_train_inputs`` (``pixel_values``, ``image_grid_thw``) as the executor's
  processor made them. Each image's slice of ``pixel_values`` is matched to the one image, among those the row's
  dataset references load to and those OpenRLHF handed vLLM, whose processor output is exactly that slice
  (:class:`~agentbridge.conformance.images.ImageIndex`); an image matching none (or several different ones), or a
  sequence whose image-token runs disagree with the grids, fails the run with an error naming the row.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from agentbridge.adapter.conformance import EpisodeRecord, ImageIndex, episode_record, golden_job

LOGPROB_JOB = "backend.options.is_correction=token"  # where OpenRLHF keeps rollout log-probs (records' ``job``)
LENGTHS = "data.max_len: {total}"  # the lengths kind: OpenRLHF's one length (prompt plus every turn)


def golden_records(kind: str, workdir: Path) -> list[EpisodeRecord]:
    """Run the golden ``kind`` episodes through OpenRLHF and read each one back from OpenRLHF's training batch:
    the default job's records (no log-probs: OpenRLHF keeps none there), then the log-prob job's (``job`` set)."""
    from agentbridge.adapter.models import resolve_model_path
    from agentbridge_openrlhf.backend import OpenRLHFBackend
    from agentbridge_openrlhf.rollout_path import run_rollouts

    root = Path(workdir).resolve()
    spec, job = golden_job(OpenRLHFBackend(), kind, root, LENGTHS)  # the default options: what a user's job trains on
    _, token_job = golden_job(OpenRLHFBackend(), kind, root, LENGTHS, ["backend.options={is_correction: token}"],
                              name="openrlhf-is_correction-token")
    default, token = run_rollouts([job, token_job], str(resolve_model_path(spec.model.path)), engine="golden",
                                  engines=1)
    records = batch_records(default.advantaged, default.tokenizer, default.images)
    if any(r.logprobs is not None for r in records):  # then this module's account of OpenRLHF is out of date
        raise ValueError("OpenRLHF kept rollout_log_probs under the default job (is_correction off)")
    # the suite compares these on the log-probs only, and says a record without them is not held there either
    return records + [replace(r, job=LOGPROB_JOB) for r in batch_records(token.advantaged, token.tokenizer,
                                                                         token.images)]


def batch_records(batches: list[Any], tokenizer: Any, handed: dict[str, Any]) -> list[EpisodeRecord]:
    """The records of every row of OpenRLHF's micro-batches, in episode order (``index``).

    ``tokenizer``: OpenRLHF's tokenizer or processor; ``handed``: the images OpenRLHF handed vLLM, by digest.
    """
    from openrlhf.utils.vlm_utils import load_images

    rows = sorted(((b.index[j], b, j) for b in batches for j in range(len(b.index))), key=lambda r: r[0])
    images = ImageIndex(tokenizer, handed, load_images, "OpenRLHF held or handed vLLM")
    return [row_record(b, j, images) for _, b, j in rows]


def row_record(b: Any, j: int, images: ImageIndex) -> EpisodeRecord:
    from agentbridge_openrlhf.rollout import task_from_label

    case = task_from_label(b.labels[j]).id
    n = int(b.attention_mask[j].sum())
    seq = [int(x) for x in b.sequences[j][:n].tolist()]
    actions = [int(x) for x in b.action_mask[j][: n - 1].tolist()]
    # no generated token: the core's empty-episode fallback, whose response is the last token (one masked EOS)
    first = actions.index(1) if 1 in actions else n - 2
    return episode_record(
        case, seq[: first + 1], seq[first + 1:], actions[first:],
        None if b.rollout_log_probs is None else b.rollout_log_probs[j][first: n - 1], b.rewards[j],
        token_rewards=placed_reward(b, j)[first: n - 1],
        images=images.digests(seq, (b.mm_train_inputs or [None] * len(b.index))[j],
                              (b.images or [None] * len(b.index))[j], f"OpenRLHF batch row {b.index[j]} (case {case})"))


def placed_reward(b: Any, j: int) -> list[float]:
    """Row ``j``'s reward on each action position as OpenRLHF places it before its KL term
    (``openrlhf.models.utils.compute_reward`` with no KL: the one scalar on the row's last action token)."""
    import torch
    from openrlhf.models.utils import compute_reward

    mask = b.action_mask[j: j + 1]
    reward = compute_reward(torch.as_tensor([float(b.rewards[j])]), 0.0, torch.zeros(mask.shape), action_mask=mask)
    return [float(x) for x in reward[0].tolist()]

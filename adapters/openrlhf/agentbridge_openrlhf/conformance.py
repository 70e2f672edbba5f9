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
  processor made them. Each image's slice of ``pixel_values`` (by its grid) is matched to the one image, among
  those the row's dataset references load to and those OpenRLHF handed vLLM, whose processor output is exactly that
  slice and grid; its digest is that image's. An image matching none (or several different ones), or a sequence
  whose image-token runs disagree with the grids, fails the run with an error naming the row.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentbridge.adapter.conformance import BACKEND_LENGTHS, LENGTHS, EpisodeRecord, image_digest

SETS = ["backend.name=openrlhf"]  # the compiled job's default options: what a user's job trains on
LOGPROB_JOB = "backend.options.is_correction=token"  # where OpenRLHF keeps rollout log-probs (records' ``job``)
LOGPROB_SETS = [*SETS, "backend.options={is_correction: token}"]


def length_override() -> str:
    """The ``lengths`` kind's job: OpenRLHF's one length, ``--data.max_len`` (prompt plus every turn), at
    :data:`~agentbridge.conformance.golden.BACKEND_LENGTHS`' total."""
    total = BACKEND_LENGTHS["max_prompt"] + BACKEND_LENGTHS["max_response"]
    return f"backend.overrides={{data.max_len: {total}}}"


def golden_records(kind: str, workdir: Path) -> list[EpisodeRecord]:
    """Run the golden ``kind`` episodes through OpenRLHF and read each one back from OpenRLHF's training batch:
    the default job's records (no log-probs: OpenRLHF keeps none there), then the log-prob job's (``job`` set)."""
    from agentbridge.adapter.conformance import golden_spec
    from agentbridge.adapter.models import resolve_model_path
    from agentbridge_openrlhf.backend import OpenRLHFBackend
    from agentbridge_openrlhf.rollout_path import run_rollouts

    root = Path(workdir).resolve()
    lengths = [length_override()] if kind == LENGTHS else []
    spec = golden_spec(kind, [*SETS, *lengths])
    jobs = [OpenRLHFBackend().compile(spec, root / "openrlhf").path,
            OpenRLHFBackend().compile(golden_spec(kind, [*LOGPROB_SETS, *lengths]),
                                      root / "openrlhf-is_correction-token").path]
    default, token = run_rollouts(jobs, str(resolve_model_path(spec.model.path)), engine="golden", engines=1)
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
    rows = sorted(((b.index[j], b, j) for b in batches for j in range(len(b.index))), key=lambda r: r[0])
    images = ImageIndex(tokenizer, handed)
    return [row_record(b, j, images) for _, b, j in rows]


def row_record(b: Any, j: int, images: ImageIndex) -> EpisodeRecord:
    from agentbridge_openrlhf.executor import task_from_label

    case = task_from_label(b.labels[j]).id
    n = int(b.attention_mask[j].sum())
    seq = [int(x) for x in b.sequences[j][:n].tolist()]
    actions = [int(x) for x in b.action_mask[j][: n - 1].tolist()]
    # no generated token: the core's empty-episode fallback, whose response is the last token (one masked EOS)
    first = actions.index(1) if 1 in actions else n - 2
    return EpisodeRecord(
        case=case, prompt_ids=seq[: first + 1], response_ids=seq[first + 1:], response_mask=actions[first:],
        logprobs=None if b.rollout_log_probs is None
        else [float(x) for x in b.rollout_log_probs[j][first: n - 1].tolist()],
        reward=float(b.rewards[j]), token_rewards=placed_reward(b, j)[first: n - 1],
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


class ImageIndex:
    """Maps each image's slice of a row's ``pixel_values`` back to the image it was made from (see the module doc)."""

    def __init__(self, tokenizer: Any, handed: dict[str, Any]) -> None:
        self.processor = getattr(tokenizer, "image_processor", None)
        self.image_token_id = getattr(tokenizer, "image_token_id", None)
        self.keys: dict[tuple[tuple[int, ...], str], set[str]] = {}
        for digest, image in handed.items():
            self.add(digest, image)

    def add(self, digest: str, image: Any) -> None:
        if self.processor is None:  # a text model: no image reaches its batch
            return
        out = self.processor(images=[image], return_tensors="pt")
        grid = tuple(int(x) for x in out["image_grid_thw"][0].tolist())
        self.keys.setdefault((grid, _pixels(out["pixel_values"])), set()).add(digest)

    def digests(self, seq: list[int], mm: dict[str, Any] | None, refs: Any, where: str) -> list[str]:
        if not mm or mm.get("pixel_values") is None:
            return []
        if self.processor is None or "image_grid_thw" not in mm:
            raise ValueError(f"{where}: pixel_values without image_grid_thw or an image processor to read them")
        if refs:  # the row's dataset images, as OpenRLHF loads them
            from openrlhf.utils.vlm_utils import load_images

            for image in load_images(refs):
                self.add(image_digest(image), image)
        grids = [tuple(int(x) for x in g) for g in mm["image_grid_thw"].tolist()]
        merge = int(getattr(self.processor, "merge_size", 1) or 1) ** 2
        if self.image_token_id is not None and _runs(seq, self.image_token_id) != [_prod(g) // merge for g in grids]:
            raise ValueError(f"{where}: the image-token runs of its sequence, {_runs(seq, self.image_token_id)}, "
                             f"disagree with image_grid_thw {grids}")
        out, start = [], 0
        for k, grid in enumerate(grids):
            rows = _prod(grid)
            found = self.keys.get((grid, _pixels(mm["pixel_values"][start:start + rows])), set())
            if len(found) != 1:
                what = "no image OpenRLHF held or handed vLLM" if not found else f"{len(found)} different images"
                raise ValueError(f"{where}: image {k} of its pixel_values (grid {list(grid)}) matches {what}")
            out.append(next(iter(found)))
            start += rows
        if start != len(mm["pixel_values"]):
            raise ValueError(f"{where}: pixel_values has {len(mm['pixel_values'])} rows, its grids {start}")
        return out


def _pixels(values: Any) -> str:
    return hashlib.sha256(values.contiguous().float().numpy().tobytes()).hexdigest()


def _prod(grid: tuple[int, ...]) -> int:
    p = 1
    for x in grid:
        p *= x
    return p


def _runs(ids: list[int], token: int) -> list[int]:
    """Lengths of the runs of ``token`` in ``ids``, in order."""
    runs, n = [], 0
    for t in [*ids, None]:
        if t == token:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs


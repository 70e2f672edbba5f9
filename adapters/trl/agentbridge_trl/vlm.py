"""Vision-language agents in TRL: images in the prompt and images returned by tools, same driver semantics.

TRL 1.16's ``rollout_func`` returns token ids only: the images the driver's episodes saw cannot reach the forward
pass that way. ``AgentVLMGRPOTrainer`` closes that gap with one small override. The rollout (the same
``AgentRollout`` and driver as for text) also returns each sample's images, in the order their placeholders appear
in ``prompt_ids + completion_ids``; the trainer hands them to TRL's own path for images that arrive during a rollout
(the one its built-in tool loop uses for tool screenshots). That path runs the image processor over each sample's
images, marks the visual ids (``mm_token_type_ids``) from the ids themselves, and passes ``pixel_values`` /
``image_grid_thw`` / ``num_images`` to every forward pass (old, reference and training log-probs). Ids, loss mask
(``env_mask`` = the driver's ``response_mask``) and rewards are exactly those of the text path.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from agentbridge.adapter.models import images_only_processor, is_vlm
from agentbridge_trl.rollout import IMAGES_KEY

# TRL takes its rollout-time image path when ``self.tools`` is truthy; set only between the rollout and the end of
# ``_generate_and_score_completions`` (after TRL's tool loop would have run), so no tool loop ever runs.
_DRIVER_IMAGES = ["agentbridge driver images"]


def is_vlm_model(model: Any) -> bool:
    """Whether ``model`` is a vision-language model: the core's rule (:func:`agentbridge.models.is_vlm`) on the
    directory it was loaded from."""
    path = getattr(model, "name_or_path", "")
    return bool(path) and is_vlm(path)


def make_processor(model: Any, tokenizer: Any, image_processor: Any) -> Any:
    """The model's transformers processor built from agentbridge's tokenizer and image processor (no video)."""
    return images_only_processor(model.config.model_type, tokenizer, image_processor)


def _trainer_class() -> type:
    from trl import GRPOTrainer

    class AgentVLMGRPOTrainer(GRPOTrainer):
        """GRPOTrainer for agentbridge rollouts whose prompts and tool results carry images."""

        processing_class: Any  # the model's processor; its tokenizer while _save runs

        def _generate(self, prompts: list[Any]) -> tuple[Any, ...]:
            out = list(super()._generate(prompts))
            prompt_ids, completion_ids, extra = out[0], out[1], out[5]
            images = extra.pop(IMAGES_KEY, None)
            if images is not None and any(images):
                check_image_tokens(prompt_ids, completion_ids, images, self.processing_class.image_processor,
                                   self._image_pad_token_id)
                out[6] = [list(ims) or None for ims in images]  # every image of each sample, in order
                out[7] = [list(ims) for ims in images]
                self.tools = _DRIVER_IMAGES
            return tuple(out)

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            tools = self.tools
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self.tools = tools

        def _save(self, output_dir: str | None = None, state_dict: Any = None) -> None:
            """A checkpoint's model with the tokenizer and image processor in place of the processor, whose absent
            video processor ``ProcessorMixin.save_pretrained`` cannot skip."""
            processor = self.processing_class
            self.processing_class = processor.tokenizer
            try:
                super()._save(output_dir, state_dict)
            finally:
                self.processing_class = processor
            if self.args.should_save:
                processor.image_processor.save_pretrained(output_dir or self.args.output_dir)

    return AgentVLMGRPOTrainer


@cache
def vlm_trainer_class() -> type:
    """``AgentVLMGRPOTrainer`` (built on first use so importing this module needs no TRL)."""
    return _trainer_class()


def check_image_tokens(prompt_ids: list[list[int]], completion_ids: list[list[int]], images: list[list[Any]],
                       image_processor: Any, image_token_id: int | None) -> None:
    """Each sample's visual ids must match its images exactly (TRL would otherwise drop the images silently)."""
    merge = int(getattr(image_processor, "merge_size", 1) or 1) ** 2
    count = getattr(image_processor, "get_number_of_image_patches", None)
    if count is None:  # TRL's own per-sample check still runs in the forward-pass preparation
        return
    for i, (p, c, ims) in enumerate(zip(prompt_ids, completion_ids, images, strict=True)):
        if not ims:
            continue
        want = sum(int(count(im.size[1], im.size[0], {})) // merge for im in ims)
        ids: list[int | None] = [*p, *c]
        got = ids.count(image_token_id)
        if want != got:
            raise ValueError(f"sample {i}: {got} image tokens for {len(ims)} images that need {want}; the "
                             "driver's ids and images disagree")

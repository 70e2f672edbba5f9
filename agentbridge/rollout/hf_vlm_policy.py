"""The ``hf`` policy for vision-language models: ``model.generate`` with the request's images.

The driver's ids already hold each image placeholder expanded to its visual tokens (``Renderer.expand_images``);
this policy adds the pixels (``pixel_values``, ``image_grid_thw``) and the token types that tell the model which
ids are visual (``mm_token_type_ids``, used by Qwen-VL's multimodal RoPE). Needs the ``hf`` extra and pillow.
"""

from __future__ import annotations

from typing import Any

from agentbridge.rollout.batching import cut_at_eos
from agentbridge.rollout.hf_policy import HFPolicy
from agentbridge.rollout.renderer import image_token_id_of
from agentbridge.trajectory import Generation, SamplingParams


class HFVLMPolicy(HFPolicy):
    """Sample from a vision-language model; requests without images are served exactly like ``HFPolicy``."""

    def __init__(self, model: Any, tokenizer: Any, image_processor: Any, *, max_batch: int = 64,
                 seed: int | None = None) -> None:
        super().__init__(model, tokenizer, max_batch=max_batch, seed=seed)
        self.image_processor = image_processor
        token_id = image_token_id_of(tokenizer)
        if token_id is None:
            raise ValueError("HFVLMPolicy: the tokenizer has no image placeholder token (<|image_pad|>)")
        self.image_token_id: int = token_id

    @classmethod
    def from_pretrained(cls, path: str, tokenizer: Any = None, **kwargs: Any) -> HFVLMPolicy:
        """Load a VLM directory or ``builtin:tiny-vl`` (model, tokenizer and image processor)."""
        from transformers import AutoModelForImageTextToText, AutoTokenizer

        from agentbridge.models import load_image_processor, resolve_model_path

        local = resolve_model_path(path)
        model = AutoModelForImageTextToText.from_pretrained(local)
        model.eval()
        return cls(model, tokenizer or AutoTokenizer.from_pretrained(local), load_image_processor(local), **kwargs)

    def vision_inputs(self, prompts: list[list[int]], images: list[list[Any] | None]) -> dict[str, Any]:
        """Pixels for every image of the batch, prompt after prompt; checks each prompt's placeholder count."""
        flat = [im for ims in images for im in (ims or [])]
        if not flat:
            return {}
        out = dict(self.image_processor(images=flat, return_tensors="pt"))
        merge = int(getattr(self.image_processor, "merge_size", 1) or 1) ** 2
        grid = out.get("image_grid_thw")
        if grid is not None:
            tokens = (grid.prod(-1) // merge).tolist()
            start = 0
            for prompt, ims in zip(prompts, images, strict=True):
                n = len(ims or [])
                want, got = sum(tokens[start:start + n]), prompt.count(self.image_token_id)
                if want != got:
                    raise ValueError(f"a prompt has {got} image tokens but its {n} images need {want}; render "
                                     "prompts with the driver's Renderer (it expands image placeholders)")
                start += n
        return out

    def generate_batch(self, prompts: list[list[int]], budgets: list[int], sampling: SamplingParams,
                       images: list[list[Any] | None] | None) -> list[Generation]:
        import torch

        if not images or not any(images):
            return super().generate_batch(prompts, budgets, sampling, None)
        vision = self.vision_inputs(prompts, images)
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        kwargs: dict[str, Any] = {"do_sample": sampling.temperature > 0}
        if sampling.temperature > 0:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
        device = next(self.model.parameters()).device
        vision = {k: v.to(device) for k, v in vision.items()}
        if "image_grid_thw" in vision:
            vision["mm_token_type_ids"] = (ids == self.image_token_id).int().to(device)
        with self._lock, torch.no_grad():
            out = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **vision,
                                      max_new_tokens=max(budgets), eos_token_id=self.eos_id, pad_token_id=self.pad_id,
                                      output_logits=True, return_dict_in_generate=True, **kwargs)
        new = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1).float()
        if sampling.temperature > 0:
            logits = logits / sampling.temperature
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return [cut_at_eos(row, lp, budget, self.eos_id)
                for row, lp, budget in zip(new.tolist(), logprobs.tolist(), budgets, strict=True)]

"""``AgentGRPOTrainer``: TRL's GRPOTrainer whose per-token log-probs run the batch's shared prompt prefix once.

Every episode of an agent starts with the same system prompt and tool schemas (here ~240 of ~330 tokens), and
TRL's loss runs the whole left-padded prompt + completion for every sample. This trainer computes the common
prefix's key/value cache once, repeats it over the batch and runs each sample's own tokens on top of it. Positions,
temperature and the tokens scored are TRL's; log-probs and entropies equal TRL's fused head's to float precision
(``tests/test_shared_prefix.py``). Batches with images, MoE auxiliary losses, logit scaling or no long shared
prefix go through TRL's own computation unchanged.
"""

from __future__ import annotations

from typing import Any

from agentbridge.adapter.rollout import cache_kwarg, output_cache

MIN_SHARED_PREFIX = 32  # shorter common prefixes are left to TRL's own forward


def prompt_starts(attention_mask: Any, prompt_width: int) -> Any:
    """Each row's first prompt column (TRL left-pads prompts)."""
    return (attention_mask[:, :prompt_width] == 0).sum(dim=1)


def common_prefix(input_ids: Any, starts: Any, prompt_width: int) -> int:
    """How many leading prompt tokens all rows share, leaving each row at least one prompt token of its own."""
    import torch

    shortest = int((prompt_width - starts).min().item())
    if shortest < 2:
        return 0
    cols = starts[:, None] + torch.arange(shortest, device=input_ids.device)[None, :]
    aligned = input_ids.gather(1, cols)
    same = (aligned == aligned[:1]).all(dim=0)
    return min(int(same.long().cumprod(0).sum().item()), shortest - 1)


def hf_model(model: Any) -> Any:
    """The transformers model inside a wrapper of the trainer's (DDP, a DeepSpeed engine, FSDP, torch.compile) and
    inside a PEFT model (``model.lora``: the base model, whose layers carry the adapter in place, so its forward is
    the adapted policy's, or the base policy's under ``disable_adapter()``); ``model`` itself when it is not wrapped.
    A DeepSpeed engine's own ``config`` is DeepSpeed's dict, so the model's config and layers are read from what
    this returns."""
    from accelerate.utils import extract_model_from_parallel, is_peft_model

    inner = extract_model_from_parallel(model)
    return inner.get_base_model() if is_peft_model(inner) else inner


def zero3_partitioned(model: Any) -> bool:
    """Whether DeepSpeed ZeRO-3 holds ``model``'s weights in shards (each layer gathers its own in its forward)."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def plain_head(model: Any) -> bool:
    """Whether the model's logits are its output layer's, unscaled (what this computation reproduces), and its parts
    may be called one by one. Not for a model wrapped for several processes (DDP, a DeepSpeed engine): calling its
    parts directly would skip the wrapper's forward (DDP's gradient sync); nor for weights ZeRO-3 shards, which
    its hooks gather around the whole model's forward. Those go through TRL's own forward."""
    from accelerate.utils import extract_model_from_parallel

    inner = hf_model(model)
    config = getattr(inner, "config", None)
    if config is None or not hasattr(config, "get_text_config"):
        return False
    text = config.get_text_config()
    scaled = any(getattr(text, k, None) is not None for k in ("final_logit_softcapping", "logit_scale",
                                                              "output_multiplier", "lm_head_multiplier",
                                                              "logits_scaling"))
    if scaled or extract_model_from_parallel(model) is not model or zero3_partitioned(inner):
        return False
    return hasattr(inner, "get_decoder") and inner.get_output_embeddings() is not None


def shared_prefix_logps(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, temperature: float,
                        compute_entropy: bool) -> tuple[Any, Any] | None:
    """Log-probs (and entropies) of the last ``logits_to_keep`` tokens of each row, or None when the rows share
    too short a prefix."""
    import torch

    rows, width = input_ids.shape
    prompt_width = width - logits_to_keep
    starts = prompt_starts(attention_mask, prompt_width)
    shared = common_prefix(input_ids, starts, prompt_width)
    if shared < MIN_SHARED_PREFIX or rows < 2:
        return None
    body, head = model.get_decoder(), model.get_output_embeddings()
    first = int(starts[0].item())
    prefix = body(input_ids=input_ids[:1, first:first + shared], use_cache=True)
    cache = output_cache(prefix)
    cache.batch_repeat_interleave(rows)
    # each row's own tokens, moved left to start right after the prefix; right-padded to a common width
    rest_width = width - int(starts.min().item()) - shared
    cols = starts[:, None] + shared + torch.arange(rest_width, device=input_ids.device)[None, :]
    inside = cols < width
    cols = cols.clamp(max=width - 1)
    rest_ids = input_ids.gather(1, cols).masked_fill(~inside, 0)
    rest_mask = attention_mask.gather(1, cols) * inside
    full_mask = torch.cat([rest_mask.new_ones(rows, shared), rest_mask], dim=1)
    hidden = body(input_ids=rest_ids, attention_mask=full_mask, **{cache_kwarg(body): cache}).last_hidden_state
    # the hidden state that predicts completion column c sits at rest column c - 1 - start - shared
    targets = torch.arange(prompt_width, width, device=input_ids.device)
    at = (targets[None, :] - 1 - starts[:, None] - shared).clamp(min=0)
    picked = hidden.gather(1, at[..., None].expand(-1, -1, hidden.size(-1)))
    logits = head(picked).float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logps = logp_all.gather(-1, input_ids[:, prompt_width:, None]).squeeze(-1)
    entropies = -(logp_all.exp() * logp_all).sum(-1) if compute_entropy else None
    return logps, entropies


def agent_trainer_class() -> type:
    """``AgentGRPOTrainer`` (built on first use, so importing this module needs no TRL)."""
    from trl import GRPOTrainer

    class AgentGRPOTrainer(GRPOTrainer):
        """GRPOTrainer with the shared prompt prefix computed once per batch (text models)."""

        def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, attention_mask: Any,
                                               logits_to_keep: int, batch_size: int | None = None,
                                               compute_entropy: bool = False, compute_aux_loss: bool = False,
                                               **media: Any) -> Any:
            if not compute_aux_loss and all(v is None for v in media.values()) and plain_head(model):
                with self.accelerator.autocast():
                    out = shared_prefix_logps(hf_model(model), input_ids, attention_mask, logits_to_keep,
                                              self.temperature, compute_entropy)
                if out is not None:
                    return out[0], out[1], None
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **media)

    return AgentGRPOTrainer

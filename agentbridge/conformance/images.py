"""The images of a backend's batch read back as the digests of the images they were made from (a record's
``images``). A backend keeps only what its processor made of them (``pixel_values`` and ``image_grid_thw``: one grid
row and its pixel rows per image, in order) and image tokens in the sequence; two ways back, for any processor:

- :func:`handed_image_digests`: the images handed to the backend for a row are known; the row must carry exactly
  its processor's output on them and one image token per visual token of them (veRL);
- :class:`ImageIndex`: candidate images are known; each image's slice of ``pixel_values`` must be the processor's
  output on exactly one of them, and the sequence's image-token runs must agree with the grids (OpenRLHF).

Reconstructing images from pixels would depend on one processor family's patch layout and resizing (a resized image
never matches the driver's digest); these checks say the same (the batch carries exactly those pixels) for any.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

from agentbridge.conformance.records import image_digest
from agentbridge.conformance.suite import ConformanceError


def handed_image_digests(where: str, images: Any, mm_inputs: dict[str, Any] | None, input_ids: Any, processor: Any,
                         who: str) -> list[str]:
    """Digests of the ``images`` handed to backend ``who`` for a row, after checking that the row carries exactly
    their pixels (``mm_inputs``: its ``pixel_values`` and ``image_grid_thw``) and, where the processor says its
    image token and merge size, one image token in ``input_ids`` per visual token; a ``ConformanceError`` naming
    ``where`` otherwise."""
    import torch

    images = list(images or [])
    mm_inputs = dict(mm_inputs or {})
    if not images:
        if mm_inputs.get("pixel_values") is not None:
            raise ConformanceError(f"{where}: the batch carries pixel_values, but the agent loop handed {who} no "
                                   "images")
        return []
    if processor is None:
        raise ConformanceError(f"{where}: the agent loop handed {who} {len(images)} images, but {who} built no "
                               "processor for the model: no pixel_values reach the batch")
    want = processor.image_processor(images=images, return_tensors="pt")
    pixels, grid = mm_inputs.get("pixel_values"), mm_inputs.get("image_grid_thw")
    if pixels is None or grid is None:
        raise ConformanceError(f"{where}: the batch carries no pixel_values/image_grid_thw for the {len(images)} "
                               f"images the agent loop handed {who}")
    if not (torch.equal(grid, want["image_grid_thw"]) and torch.equal(pixels, want["pixel_values"])):
        raise ConformanceError(f"{where}: the batch's pixel_values/image_grid_thw are not {who}'s processor output "
                               f"on the {len(images)} images the agent loop handed {who}")
    merge = getattr(processor.image_processor, "merge_size", None)
    image_token = getattr(processor, "image_token_id", None)
    if merge and image_token is not None:
        ids = input_ids.tolist() if hasattr(input_ids, "tolist") else list(input_ids)
        tokens = int(grid.prod(-1).sum()) // (merge * merge)
        if ids.count(image_token) != tokens:
            raise ConformanceError(f"{where}: the sequence holds {ids.count(image_token)} image tokens, "
                                   f"the batch's images have {tokens} visual tokens")
    return [image_digest(im) for im in images]


class ImageIndex:
    """Maps each image's slice of a row's ``pixel_values`` back to the candidate image it was made from.

    ``tokenizer``: the backend's tokenizer or processor (its ``image_processor`` and ``image_token_id``);
    ``handed``: candidate images by digest (those handed to the engine); ``load``: the backend's own loader of a
    row's dataset image references (each loaded image becomes a candidate); ``held``: what the candidates are, for
    the error naming an image that matches none (``ValueError``).
    """

    def __init__(self, tokenizer: Any, handed: dict[str, Any], load: Callable[[Any], list[Any]] | None = None,
                 held: str = "the candidates") -> None:
        self.processor = getattr(tokenizer, "image_processor", None)
        self.image_token_id = getattr(tokenizer, "image_token_id", None)
        self.load, self.held = load, held
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
        """The digests of the images of a row (``seq``: its ids, ``mm``: its ``pixel_values`` and
        ``image_grid_thw``, ``refs``: its dataset image references), in order."""
        if not mm or mm.get("pixel_values") is None:
            return []
        if self.processor is None or "image_grid_thw" not in mm:
            raise ValueError(f"{where}: pixel_values without image_grid_thw or an image processor to read them")
        if refs and self.load is not None:
            for image in self.load(refs):
                self.add(image_digest(image), image)
        grids = [tuple(int(x) for x in g) for g in mm["image_grid_thw"].tolist()]
        merge = int(getattr(self.processor, "merge_size", 1) or 1) ** 2
        if self.image_token_id is not None and token_runs(seq, self.image_token_id) != [math.prod(g) // merge
                                                                                         for g in grids]:
            raise ValueError(f"{where}: the image-token runs of its sequence, {token_runs(seq, self.image_token_id)}, "
                             f"disagree with image_grid_thw {grids}")
        out, start = [], 0
        for k, grid in enumerate(grids):
            rows = math.prod(grid)
            found = self.keys.get((grid, _pixels(mm["pixel_values"][start:start + rows])), set())
            if len(found) != 1:
                what = f"no image {self.held}" if not found else f"{len(found)} different images"
                raise ValueError(f"{where}: image {k} of its pixel_values (grid {list(grid)}) matches {what}")
            out.append(next(iter(found)))
            start += rows
        if start != len(mm["pixel_values"]):
            raise ValueError(f"{where}: pixel_values has {len(mm['pixel_values'])} rows, its grids {start}")
        return out


def _pixels(values: Any) -> str:
    return hashlib.sha256(values.contiguous().float().numpy().tobytes()).hexdigest()


def token_runs(ids: list[int], token: int) -> list[int]:
    """Lengths of the runs of ``token`` in ``ids``, in order."""
    runs, n = [], 0
    for t in [*ids, None]:
        if t == token:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs

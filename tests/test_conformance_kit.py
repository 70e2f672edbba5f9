"""The conformance kit adapters build their side of the suite from (``agentbridge.adapter.conformance``): the golden
job with a backend's own lengths, records from a backend's rows, the golden engine's reply, the image read-back
and the probes' reference advantages and step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentbridge.adapter import conformance as face
from agentbridge.conformance.golden import BACKEND_LENGTHS, CASES


def test_the_face_exports_each_kit_name_from_its_core_module() -> None:
    for name in face.__all__:
        assert getattr(face, name) is not None
    assert sorted(face.__all__) == sorted(face._CORE)


def test_golden_sets_fill_in_the_backends_own_lengths_for_the_lengths_kind_only() -> None:
    from agentbridge.conformance.kit import golden_sets

    template = "a: {max_prompt}, b: {max_response}, c: {total}"
    prompt, response = BACKEND_LENGTHS["max_prompt"], BACKEND_LENGTHS["max_response"]
    assert golden_sets("verl", "lengths", template, ["x=1"]) == [
        "backend.name=verl", "x=1", f"backend.overrides={{a: {prompt}, b: {response}, c: {prompt + response}}}"]
    for kind in ("text", "vlm", "credit"):
        assert golden_sets("verl", kind, template, ["x=1"]) == ["backend.name=verl", "x=1"]


class _Compiler:
    """A backend that records what it is asked to compile."""

    name = "verl"

    def __init__(self) -> None:
        self.seen: list[tuple[Any, Path]] = []

    def compile(self, spec: Any, out: Path) -> Any:
        self.seen.append((spec, out))
        return type("Job", (), {"path": out})()


def test_golden_job_compiles_the_golden_spec_for_the_backend(tmp_path: Path) -> None:
    from agentbridge.conformance.kit import golden_job

    backend = _Compiler()
    spec, job = golden_job(backend, "lengths", tmp_path, "data.max_prompt_length: {max_prompt}")
    assert job == tmp_path / "verl" and backend.seen == [(spec, job)]
    assert spec.backend.name == "verl" and spec.backend.overrides == {"data.max_prompt_length": 512}
    spec, job = golden_job(backend, "text", tmp_path, "data.max_prompt_length: {max_prompt}", name="other")
    assert job == tmp_path / "other" and not spec.backend.overrides


def test_episode_record_reads_tensors_and_lists_and_keeps_what_is_not_held() -> None:
    import torch

    from agentbridge.conformance.kit import episode_record

    record = episode_record("tools", torch.tensor([1, 2]), [3, 4], torch.tensor([1.0, 0.0]),
                            torch.tensor([-0.5, 0.0]), torch.tensor(1.5), token_rewards=[0, 1.5], images=["d"])
    assert (record.prompt_ids, record.response_ids, record.response_mask) == ([1, 2], [3, 4], [1, 0])
    assert all(type(x) is int for x in record.prompt_ids + record.response_mask)
    assert (record.logprobs, record.reward, record.token_rewards, record.images) == ([-0.5, 0.0], 1.5, [0.0, 1.5],
                                                                                       ["d"])
    bare = episode_record("tools", [1], [3], [1], None, 0, job="other")
    assert bare.logprobs is None and bare.token_rewards is None and bare.job == "other" and bare.images == []


def test_golden_reply_says_how_the_turn_ended(qwen_tokenizer: Any) -> None:
    from agentbridge.conformance.golden import golden_reply, golden_turn

    prompt = qwen_tokenizer.encode(qwen_tokenizer.apply_chat_template(
        [{"role": "user", "content": "[golden:tools] x"}], add_generation_prompt=True, tokenize=False))
    ids, lps, finish = golden_reply(qwen_tokenizer, prompt, 1000)
    assert (ids, lps) == golden_turn(qwen_tokenizer, prompt, 1000) and finish == "stop"
    assert qwen_tokenizer.decode(ids).startswith(CASES["tools"][3][0])
    cut, _, finish = golden_reply(qwen_tokenizer, prompt, 5)
    assert cut == ids[:5] and finish == "length"


class _Processor:
    """An image processor of the grid layout: one pixel row per pixel (its red value), a (1, h, w) grid; a
    merge size of 1, one image token (id 9) per pixel row."""

    merge_size = 1
    image_token_id = 9

    def __init__(self) -> None:
        self.image_processor = self

    def __call__(self, images: list[Any], return_tensors: str = "pt") -> dict[str, Any]:
        import torch

        rows = [torch.tensor([[float(r)] for r in im.convert("RGB").tobytes()[0::3]]) for im in images]
        grids = torch.tensor([[1, im.size[1], im.size[0]] for im in images])
        return {"pixel_values": torch.cat(rows), "image_grid_thw": grids}


def _image(red: int, size: tuple[int, int] = (2, 1)) -> Any:
    from PIL import Image

    return Image.new("RGB", size, (red, 0, 0))


def test_handed_image_digests_check_the_rows_pixels_and_image_tokens() -> None:
    from agentbridge.conformance.images import handed_image_digests
    from agentbridge.conformance.records import image_digest
    from agentbridge.conformance.suite import ConformanceError

    processor, images = _Processor(), [_image(10), _image(20, (1, 1))]
    mm = processor(images)
    ids = [1, 9, 9, 2, 9]
    assert handed_image_digests("row 0", images, mm, ids, processor, "X") == [image_digest(im) for im in images]
    assert handed_image_digests("row 0", None, None, [1], processor, "X") == []
    with pytest.raises(ConformanceError, match="row 0: the batch carries pixel_values, but the agent loop handed X"):
        handed_image_digests("row 0", [], mm, ids, processor, "X")
    with pytest.raises(ConformanceError, match="row 0: the batch's pixel_values/image_grid_thw are not X's"):
        handed_image_digests("row 0", images[::-1], mm, ids, processor, "X")
    with pytest.raises(ConformanceError, match="row 0: the sequence holds 2 image tokens, the batch's images have 3"):
        handed_image_digests("row 0", images, mm, ids[:-1], processor, "X")


def test_the_image_index_maps_each_pixel_slice_back_to_its_one_image() -> None:
    import torch

    from agentbridge.conformance.images import ImageIndex, token_runs
    from agentbridge.conformance.records import image_digest

    processor, handed, loaded = _Processor(), _image(10), _image(30, (1, 1))
    index = ImageIndex(processor, {image_digest(handed): handed}, load=lambda refs: [loaded], held="X held")
    mm = processor([handed, loaded])
    assert index.digests([9, 9, 1, 9], mm, ["ref"], "row 1") == [image_digest(handed), image_digest(loaded)]
    assert index.digests([1], None, None, "row 1") == []
    with pytest.raises(ValueError, match=r"row 1: the image-token runs of its sequence, \[2\], disagree"):
        index.digests([9, 9], mm, None, "row 1")
    other = {"pixel_values": torch.tensor([[99.0]]), "image_grid_thw": torch.tensor([[1, 1, 1]])}
    with pytest.raises(ValueError, match=r"row 1: image 0 of its pixel_values \(grid \[1, 1, 1\]\) matches no image X"):
        index.digests([9], other, None, "row 1")
    assert token_runs([9, 9, 1, 9, 2, 9, 9, 9], 9) == [2, 1, 3] and token_runs([1, 2], 9) == []


def test_the_golden_batch_gives_probes_the_reference_advantages_and_lengths() -> None:
    import torch

    from agentbridge.conformance.algorithms import Recipe, golden_batch, reference_advantages
    from agentbridge.conformance.step import step_spec

    batch = golden_batch()
    assert batch.lengths() == [3, 5, 8, 4, 6, 2, 7, 8, 5, 3, 8, 6]
    algorithm = step_spec("trl").algorithm
    want = reference_advantages("grpo", batch.tensors(16, torch.float64), algorithm.kl_coef, Recipe.of(algorithm))
    got = batch.advantages(algorithm, 16)
    assert got.dtype == torch.float32 and got.shape == (12, 16) and torch.equal(got, want.float())


def test_train_step_is_the_reference_step_on_the_reference_loss(tmp_path: Path) -> None:
    """The reference step is one ``train_step``; a probe's ``train_step`` with the reference's loss and optimizer
    gives the reference's loss, gradients and updates."""
    import torch

    from agentbridge.conformance.step import (
        ALGORITHM,
        KL_COEF,
        LR,
        adamw,
        policy_loss,
        reference_step,
        response_logp,
        step_batch,
        step_spec,
        train_step,
    )
    from agentbridge.models import resolve_model_path

    init = str(resolve_model_path(step_spec("trl").model.path))
    batch = step_batch(init)

    def loss_of(model: Any) -> Any:
        logp = response_logp(model, batch["input_ids"], batch["attention_mask"], batch["response_mask"].shape[1])
        loss, kl, _ = policy_loss(ALGORITHM, logp, batch["old_logp"], batch["ref_logp"], batch["advantages"],
                                  batch["response_mask"].float(), KL_COEF, int(batch["max_response_tokens"]))
        return loss + kl

    want, got = reference_step(init, batch, LR), train_step(init, loss_of, lambda m: adamw(list(m.parameters()), LR))
    assert got["loss"] == want["loss"]
    assert all(torch.equal(got["grad"][k], g) and torch.equal(got["update"][k], want["update"][k])
               for k, g in want["grad"].items())


def test_the_golden_plugin_is_enabled_once_when_suites_start_together() -> None:
    """``agentbridge conformance --backend a,b`` starts each backend's suite in a thread of one process: each enables
    the golden plugin at once, and it is registered once (not a "two plugins are named" error in all but one)."""
    import threading

    from agentbridge.conformance.golden import enable_golden
    from agentbridge.plugins import get_plugins

    enable_golden()
    get_plugins().unregister("agentbridge.conformance.golden")
    errors: list[BaseException] = []

    def enable() -> None:
        try:
            enable_golden()
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=enable) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and "conformance/golden" in get_plugins().environments.ids()

"""VLM path: veRL's own AgentLoopWorker drives agentbridge's loop for a tiny Qwen2-VL whose tool returns screenshots.

The only stand-in is ``ScriptedServer`` for vLLM (scripted turns, fixed log-probs). The processor is veRL's
``hf_processor`` output, built without its torchvision video processor where torchvision does not load.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import screens_env
import torch
from worker_harness import (
    ScriptedServer,
    capture_outputs,
    compose_worker_config,
    generate,
    input_batch,
    record_trajectories,
    unpadded_rows,
    use_verl_processor,
)

from agentbridge.env import Task
from agentbridge.rollout.agent import load_tasks
from agentbridge.spec import load_spec
from agentbridge_verl.backend import VerlBackend

PROMPTS, GROUP, IMAGES = 2, 2, 3  # 2 prompts x 2 episodes; each sees the prompt's screen + 2 screenshots


def same_pixels(a: Any, b: Any) -> bool:
    return a.size == b.size and np.array_equal(np.asarray(a.convert("RGB")), np.asarray(b.convert("RGB")))


def runs(ids: list[int], token: int) -> list[tuple[int, int]]:
    """(start, length) of each run of ``token`` in ``ids``."""
    out: list[tuple[int, int]] = []
    for i, t in enumerate(ids):
        if t == token and (i == 0 or ids[i - 1] != token):
            out.append((i, 0))
        if t == token:
            out[-1] = (out[-1][0], out[-1][1] + 1)
    return out


@pytest.fixture(scope="module")
def vlm_rollout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from agentbridge.models import load_tokenizer
    from agentbridge_verl.processor import verl_processor

    screens_env.register()
    root = tmp_path_factory.mktemp("verl-vlm")
    (root / "screens.yaml").write_text(screens_env.SPEC)
    spec = load_spec(root / "screens.yaml")
    job = VerlBackend().compile(spec, root / "job")
    tasks = load_tasks(spec, "train")
    tokenizer = load_tokenizer(spec.model.path)
    with pytest.MonkeyPatch.context() as mp:
        use_verl_processor(mp)
        outputs = capture_outputs(mp)
        cfg = compose_worker_config(job.path)
        processor, _ = verl_processor(cfg.actor_rollout_ref.model.path)
        recorder = record_trajectories()
        server = ScriptedServer(tokenizer, screens_env.script(tasks))
        gen = generate(cfg, server, input_batch(cfg, tokenizer, PROMPTS, processor))
    trajectories = list(recorder.trajectories)
    by_tokens = {(tuple(t.prompt_ids), tuple(t.response_ids)): t for t in trajectories}
    return {"gen": gen, "cfg": cfg, "server": server, "outputs": outputs, "trajectories": trajectories,
            "by_tokens": by_tokens, "tasks": {t.id: t for t in tasks}, "tokenizer": tokenizer,
            "processor": processor, "job": job}


def task_of(r: dict[str, Any], traj: Any) -> Task:
    return r["tasks"][traj.task_id]


def test_batch_rows_equal_the_driver_trajectories(vlm_rollout: dict[str, Any]) -> None:
    r = vlm_rollout
    rows = unpadded_rows(r["gen"])
    assert len(rows) == len(r["trajectories"]) == PROMPTS * GROUP
    assert {(tuple(x["prompt_ids"]), tuple(x["response_ids"])) for x in rows} == set(r["by_tokens"])
    for row in rows:
        traj = r["by_tokens"][(tuple(row["prompt_ids"]), tuple(row["response_ids"]))]
        assert row["response_mask"] == traj.response_mask
        assert row["logprobs"] == pytest.approx(traj.logprobs, abs=1e-6)
        assert row["reward"] == pytest.approx(traj.reward) and row["reward_at"] == row["n_resp"] - 1
        assert traj.finish_reason == "done" and len(traj.turns) == 3
    # one right and one wrong answer per prompt: exact_answer 1.0 (or 0) + format 0.1
    assert sorted(round(x["reward"], 3) for x in rows) == [0.1, 0.1, 1.1, 1.1]


def test_screenshots_reach_multi_modal_data_with_their_exact_pixels(vlm_rollout: dict[str, Any]) -> None:
    r = vlm_rollout
    assert len(r["outputs"]) == PROMPTS * GROUP
    for out in r["outputs"]:
        traj = r["by_tokens"][(tuple(out.prompt_ids), tuple(out.response_ids))]
        images = out.multi_modal_data["images"]
        expected = screens_env.expected_images(task_of(r, traj))
        assert len(images) == len(traj.images) == IMAGES
        assert all(same_pixels(a, b) for a, b in zip(images, traj.images, strict=True))
        assert all(same_pixels(a, b) for a, b in zip(images, expected, strict=True))
    # episodes differ in colour and clicks, so the check above tells their images apart
    firsts = [out.multi_modal_data["images"][1] for out in r["outputs"]]
    assert not all(same_pixels(firsts[0], f) for f in firsts[1:])


def test_batch_carries_the_multimodal_inputs_veRL_computes(vlm_rollout: dict[str, Any]) -> None:
    r = vlm_rollout
    gen, processor = r["gen"], r["processor"]
    b = gen.batch
    merge = processor.image_processor.merge_size ** 2
    pad = r["tokenizer"].convert_tokens_to_ids("<|image_pad|>")
    mm_inputs = gen.non_tensor_batch["multi_modal_inputs"]
    assert len(mm_inputs) == PROMPTS * GROUP
    prompt_len = b["prompts"].shape[1]
    for i, row in enumerate(unpadded_rows(gen)):
        traj = r["by_tokens"][(tuple(row["prompt_ids"]), tuple(row["response_ids"]))]
        expected = screens_env.expected_images(task_of(r, traj))
        mmi = mm_inputs[i]
        grid = mmi["image_grid_thw"]
        assert grid.shape == (IMAGES, 3)
        assert mmi["pixel_values"].shape[0] == int(grid.prod(-1).sum())
        # the pixels in the batch are exactly the processed screenshots the driver showed the policy
        ref = processor.image_processor(images=expected, return_tensors="pt")
        assert torch.equal(mmi["pixel_values"], ref["pixel_values"])
        assert torch.equal(grid, ref["image_grid_thw"])
        # the sequence holds one image-pad token per visual token of those images
        ids = b["input_ids"][i][b["attention_mask"][i].bool()].tolist()
        assert ids.count(pad) == int(grid.prod(-1).sum()) // merge
        # M-RoPE: veRL's get_rope_index gives a text row plus 3 vision rows, which differ at the images
        pos = b["position_ids"][i]
        assert pos.shape == (4, prompt_len + b["responses"].shape[1])
        assert not torch.equal(pos[0], pos[1])


def test_response_holds_the_screenshot_pads_at_the_observations(vlm_rollout: dict[str, Any]) -> None:
    r = vlm_rollout
    tok = r["tokenizer"]
    pad, start, end = (tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>"))
    for row in unpadded_rows(r["gen"]):
        prompt_runs, response_runs = runs(row["prompt_ids"], pad), runs(row["response_ids"], pad)
        assert [n for _, n in prompt_runs] == [4]  # 56x56 screen: 16 patches, 4 visual tokens
        assert [n for _, n in response_runs] == [6, 6]  # 84x56 screenshots: 6 visual tokens each
        ids, mask = row["response_ids"], row["response_mask"]
        for at, n in response_runs:  # inside the tool observation: env tokens, not trained on
            assert ids[at - 1] == start and ids[at + n] == end
            assert set(mask[at - 1: at + n + 1]) == {0}
        assert mask[0] == 1 and mask[-1] == 1


def test_generate_receives_every_image_seen_so_far(vlm_rollout: dict[str, Any]) -> None:
    r = vlm_rollout
    pad = r["tokenizer"].convert_tokens_to_ids("<|image_pad|>")
    episodes: dict[str, list[dict[str, Any]]] = {}
    for req in r["server"].requests:
        episodes.setdefault(req["request_id"], []).append(req)
    assert len(episodes) == PROMPTS * GROUP  # one sticky request id per episode
    for calls in episodes.values():
        assert len(calls) == IMAGES  # click, click, answer
        last = calls[-1]["prompt_ids"]  # the episode's sequence up to its final turn
        traj = next(t for t in r["trajectories"] if [*t.prompt_ids, *t.response_ids][:len(last)] == last)
        expected = screens_env.expected_images(task_of(r, traj))
        for k, call in enumerate(calls):
            assert len(call["image_data"]) == k + 1
            assert all(same_pixels(a, b) for a, b in zip(call["image_data"], expected, strict=False))
            assert call["prompt_ids"].count(pad) == 4 + 6 * k


def test_vlm_job_validates_with_veRLs_processor(vlm_rollout: dict[str, Any]) -> None:
    report = VerlBackend().validate(vlm_rollout["job"])
    assert report.ok, [str(p) for p in report.problems]
    processor = vlm_rollout["processor"]
    assert type(processor).__name__ == "Qwen2VLProcessor" and hasattr(processor, "get_rope_index")
    assert processor.image_token_id == vlm_rollout["tokenizer"].convert_tokens_to_ids("<|image_pad|>")


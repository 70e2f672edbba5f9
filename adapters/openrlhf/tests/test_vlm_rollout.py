"""The VLM path through OpenRLHF 0.11.2's own rollout code: builtin:tiny-vl (a tiny random-init Qwen2-VL).

Each task starts with a screenshot that travels in the dataset's image key (OpenRLHF loads it; the environment
never draws it) and its ``click`` tool returns a new screenshot of another size. The path and stand-ins are
``rollout_harness.run_rollout``'s; the vLLM stand-in takes ``multi_modal_data`` and checks placeholders and the
image limit as vLLM does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rollout_harness import Rollout, match_episodes, on_path, run_rollout

from agentbridge.spec import load_spec
from agentbridge_openrlhf.backend import OpenRLHFBackend

PLUGINS = Path(__file__).resolve().parent / "plugins"
SPEC = """
name: screens-vlm
model: {path: "builtin:tiny-vl", chat_template: qwen2_5_vl_tools, tool_call_format: hermes}
agent:
  system_prompt: Click the red square with the click tool, then answer.
  max_turns: 3
  max_prompt_tokens: 512
  max_response_tokens: 256
  max_tokens_per_turn: 48
  sampling: {temperature: 1.0, top_p: 1.0}
environment: {id: openrlhf-test/screens}
tools: []
reward: [{id: openrlhf-test/screens, weight: 1.0}]
data:
  train: {id: openrlhf-test/screens, split: train, size: 4, seed: 0}
algorithm: {name: grpo, group_size: 2, batch_size: 2, lr: 1.0e-5, warmup_steps: 0, kl_coef: 0.0, steps: 1}
resources: {nodes: 1, gpus_per_node: 0}
backend: {name: openrlhf, options: {is_correction: token}}
seed: 0
"""
ANSWER = "<answer>done</answer>"


def script() -> list[list[str]]:
    from screens_plugin import call

    # two clicks, then the answer: 3 images per episode (vLLM's limit for this job), in a known order
    return [[call(1, 2), call(3, 0)], [call(2, 2), call(0, 1)], [ANSWER]]


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    on_path(PLUGINS)  # the test plugin, for this process and the engine actors
    from agentbridge.models import resolve_model_path
    from agentbridge.plugins import get_plugins

    get_plugins.cache_clear()
    spec_file = tmp_path_factory.mktemp("vlm") / "screens.yaml"
    spec_file.write_text(SPEC)
    spec = load_spec(spec_file)
    job = OpenRLHFBackend().compile(spec, tmp_path_factory.mktemp("vlm") / "job").path
    model = str(resolve_model_path(spec.model.path))
    rollout = run_rollout(job, model, script())
    rows = [json.loads(line) for line in (job / "data" / "train.jsonl").read_text().splitlines()]
    return {"job": job, "model": model, "rollout": rollout, "pairs": match_episodes(rollout),
            "rows": {json.loads(r["label"])["id"]: r for r in rows}}


def pixels(image: Any) -> Any:
    import numpy as np

    return np.asarray(image.convert("RGB"))


def expected_images(traj: Any, row: dict[str, Any]) -> list[Any]:
    """What the driver should have seen, built independently: the row's screenshot, then one per click."""
    from openrlhf.utils.vlm_utils import load_images
    from screens_plugin import AFTER_CLICK, screen

    label = json.loads(row["label"])
    target = (label["data"]["x"], label["data"]["y"])
    images = load_images(row["images"])
    for turn in traj.turns:
        for c in turn.tool_calls:
            args = c["function"]["arguments"]
            images.append(screen(target, (args["x"], args["y"]), AFTER_CLICK))
    return images


def pad_runs(ids: list[int], pad: int) -> list[int]:
    """Lengths of the runs of ``pad`` in ``ids``, in order."""
    runs, n = [], 0
    for t in [*ids, None]:
        if t == pad:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs


def test_the_job_carries_images_the_way_openrlhf_reads_them(vlm: dict[str, Any]) -> None:
    from agentbridge_openrlhf.validate import validate_job

    args = vlm["rollout"].args
    assert args.data.image_key == "images"
    assert args.data.max_images_per_prompt == 3  # the task's screenshot + one per later turn (max_turns 3)
    for row in vlm["rows"].values():
        assert len(row["images"]) == 1 and row["images"][0].startswith("data:image/png;base64,")
        assert "images" not in json.loads(row["label"])["data"]  # not carried twice
        assert row["prompt"][-1]["content"].startswith("<image>")  # OpenRLHF renders the placeholder
    assert validate_job(vlm["job"]) == []


def test_every_episode_ran_with_its_screenshots(vlm: dict[str, Any]) -> None:
    r: Rollout = vlm["rollout"]
    assert r.consumed == 2 and len(r.experiences) == len(r.episodes) == 4
    assert all(t.finish_reason == "done" for t in r.episodes), [t.error for t in r.episodes]
    assert [len(t.turns) for t in r.episodes] == [3] * 4 and [len(t.images) for t in r.episodes] == [3] * 4


def test_the_driver_saw_the_dataset_screenshot_then_the_tools_in_order(vlm: dict[str, Any]) -> None:
    from openrlhf.utils.vlm_utils import load_images

    for exp, traj in vlm["pairs"]:
        row = vlm["rows"][traj.task_id]
        assert exp.images == [row["images"]]  # OpenRLHF's image field: the row's references, as loaded
        want = expected_images(traj, row)
        assert len(traj.images) == len(want)
        for got, image in zip(traj.images, want, strict=True):
            assert (pixels(got) == pixels(image)).all()
        assert (pixels(load_images(exp.images[0])[0]) == pixels(traj.images[0])).all()


def test_pixel_values_and_grids_are_the_drivers_images_in_order(vlm: dict[str, Any]) -> None:
    import torch

    proc = vlm["rollout"].tokenizer  # OpenRLHF's processor (AutoProcessor)
    merge = proc.image_processor.merge_size ** 2
    for exp, traj in vlm["pairs"]:
        one = [proc.image_processor(images=[im], return_tensors="pt") for im in expected_images(
            traj, vlm["rows"][traj.task_id])]
        mm = exp.mm_train_inputs[0]
        assert torch.equal(mm["pixel_values"], torch.cat([o["pixel_values"] for o in one]))
        grids = [o["image_grid_thw"][0].tolist() for o in one]
        assert mm["image_grid_thw"].tolist() == grids
        tokens = [int(torch.tensor(g).prod()) // merge for g in grids]
        assert tokens[0] == 4 and set(tokens[1:]) == {6}  # 56x56 first screen, 84x56 after each click
        seq = exp.sequences[0].tolist()
        assert pad_runs(seq, proc.image_token_id) == tokens  # the ids carry each image's pad tokens, in order


def test_ids_masks_rewards_equal_the_drivers(vlm: dict[str, Any]) -> None:
    for exp, traj in vlm["pairs"]:
        assert exp.sequences[0].tolist() == traj.prompt_ids + traj.response_ids
        assert exp.action_mask[0].tolist() == ([0] * len(traj.prompt_ids) + traj.response_mask)[1:]
        assert exp.rollout_log_probs[0].tolist() == pytest.approx(
            ([0.0] * len(traj.prompt_ids) + traj.logprobs)[1:], abs=1e-6)
        label = json.loads(exp.labels[0])["data"]
        last = traj.turns[-2].tool_calls[-1]["function"]["arguments"]
        hit = float((last["x"], last["y"]) == (label["x"], label["y"]))
        assert exp.rewards.tolist() == [traj.reward] == [hit]
        assert exp.info["reward/openrlhf-test/screens"].tolist() == [hit]


def test_vllm_got_one_placeholder_per_image_and_every_image_so_far(vlm: dict[str, Any]) -> None:
    """OpenRLHF collapses each image's pad run before vLLM; the driver re-sends all images each turn."""
    from vllm import image_digest

    pad = vlm["rollout"].tokenizer.image_token_id
    requests = [(tuple(q["prompt_ids"]), tuple(q["images"])) for engine in vlm["rollout"].requests for q in engine]
    for _, traj in vlm["pairs"]:
        context, mask = traj.prompt_ids + traj.response_ids, [0] * len(traj.prompt_ids) + traj.response_mask
        starts = [i for i in range(len(mask)) if mask[i] and not mask[i - 1]]
        assert len(starts) == len(traj.turns)
        for start in starts:  # each turn's generate call: the context so far and its images
            ids = context[:start]
            n = pad_runs(ids, pad)
            collapsed = [t for i, t in enumerate(ids) if not (t == pad and i and ids[i - 1] == pad)]
            assert collapsed.count(pad) == len(n)
            assert (tuple(collapsed), tuple(image_digest(im) for im in traj.images[:len(n)])) in requests


def test_the_vlm_forward_consumes_the_batches(vlm: dict[str, Any]) -> None:
    """What OpenRLHF's actor does with a micro-batch: merge mm_train_inputs, rebuild the token types, forward."""
    import torch
    from openrlhf.utils.vlm_utils import merge_mm_train_inputs
    from transformers import Qwen2VLForConditionalGeneration

    model = Qwen2VLForConditionalGeneration.from_pretrained(vlm["model"]).eval()
    for batch in vlm["rollout"].advantaged:
        mm = merge_mm_train_inputs(batch.mm_train_inputs, "cpu")
        seqs = batch.sequences
        mm["mm_token_type_ids"] = (seqs == model.config.image_token_id).to(torch.int32)
        with torch.no_grad():  # Qwen2-VL raises when image tokens and image features disagree
            out = model(seqs, attention_mask=batch.attention_mask, position_ids=None, **mm)
        assert out.logits.shape[:2] == seqs.shape
        assert torch.isfinite(out.logits).all()


def test_a_vlm_job_without_an_image_budget_is_reported(vlm: dict[str, Any], tmp_path: Path) -> None:
    from agentbridge_openrlhf.validate import validate_job

    spec = load_spec(vlm["job"] / "spec.yaml", ["backend.overrides={data.max_images_per_prompt: null}"])
    problems = validate_job(OpenRLHFBackend().compile(spec, tmp_path / "job").path)
    assert [p.where for p in problems] == ["data.max_images_per_prompt"]
    assert "0 for a vision-language model" in problems[0].message

"""The search and GUI example specs compile for veRL and pass its validators (plugins installed in the veRL venv)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agentbridge.backends import Job
from agentbridge.cli import main
from agentbridge.spec import load_spec
from agentbridge_verl.backend import VerlBackend

EXAMPLES = ["examples/search.yaml", "examples/gui.yaml", "examples/gui_text.yaml"]
GPU_PROFILES = ["examples/calculator.gpu.yaml", "examples/search.gpu.yaml", "examples/gui.gpu.yaml"]
SMALL = ["data.train.size=8", "data.eval.size=4"]


def compile_example(example: str, out: Path, *sets: str) -> Job:
    spec = load_spec(example, [*SMALL, *sets])
    assert VerlBackend().check(spec) == []
    return VerlBackend().compile(spec, out)


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_compiles_and_passes_veRLs_validators(example: str, tmp_path: Path) -> None:
    job = compile_example(example, tmp_path / "job")
    assert job.manifest["tasks"] == {"train": 8, "eval": 4}
    # an example's backend.options are TRL's (backend.name: trl): recorded, not applied to the veRL job
    said = [n for n in job.manifest["notes"] if n.startswith("backend.options are for backend trl (backend.name)")]
    assert len(said) == int(bool(load_spec(example).backend.options))
    report = VerlBackend().validate(job)
    assert report.ok, [str(p) for p in report.problems]


@pytest.mark.parametrize("example", GPU_PROFILES)
def test_gpu_profile_passes_veRLs_validators_as_far_as_no_model_files_allow(example: str, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The job a GPU user writes (a 2x8 cluster, a hub id this machine has not got): every check that needs no
    model files runs, and each one skipped is said."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    job = compile_example(example, tmp_path / "job")
    report = VerlBackend().validate(job)
    assert report.ok, [str(p) for p in report.problems]
    skipped = report.details["skipped"]
    assert skipped[0].startswith(f"model.path {load_spec(example).model.path}: not on this machine"), skipped
    assert any("flash-attn" in line for line in skipped)  # the GPU environment's, not this one's


@pytest.mark.parametrize("example", EXAMPLES)
def test_cli_validate_for_verl(example: str) -> None:
    result = CliRunner().invoke(main, ["validate", example, "--backend", "verl"])
    assert result.exit_code == 0, result.output
    assert "backend verl" in result.output


@pytest.fixture(scope="module")
def gui_job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    return compile_example("examples/gui.yaml", tmp_path_factory.mktemp("verl-gui") / "job")


def test_vlm_job_has_what_veRL_needs_for_images(gui_job: Job) -> None:
    from omegaconf import OmegaConf
    from verl.utils.tokenizer import get_processor_token_id

    from agentbridge.models import is_vlm, load_tokenizer, resolve_model_path
    from agentbridge.rollout.agent import Agent
    from agentbridge_verl.processor import NO_TORCHVISION, verl_processor
    from agentbridge_verl.validate import compose_job

    spec = load_spec(gui_job.path / "spec.yaml")
    assert spec.model.path == "builtin:tiny-vl" and is_vlm(spec.model.path)
    model = str(resolve_model_path(spec.model.path))
    cfg = compose_job(gui_job.path, spec, model)
    OmegaConf.resolve(cfg)
    assert cfg.actor_rollout_ref.model.path == model and cfg.data.return_multi_modal_inputs is True
    processor, note = verl_processor(model)  # what veRL's worker and trainer load from actor_rollout_ref.model.path
    assert type(processor).__name__ == "Qwen2VLProcessor" and hasattr(processor, "get_rope_index")
    renderer = Agent(spec, load_tokenizer(model)).renderer
    assert renderer.image_token_id == get_processor_token_id(processor, "image") is not None
    # the one check this environment cannot run fully is named, on one line
    report = VerlBackend().validate(gui_job)
    torchvision = importlib.util.find_spec("torchvision") is not None
    assert report.ok and note == (None if torchvision else NO_TORCHVISION)
    assert report.details.get("skipped", []) == ([] if torchvision else [f"model.path: {NO_TORCHVISION}"])


def test_vlm_job_without_multimodal_inputs_is_rejected(tmp_path: Path) -> None:
    job = compile_example("examples/gui.yaml", tmp_path / "job", "backend.name=verl", "backend.options={}",
                          "backend.overrides.data.return_multi_modal_inputs=false")
    lines = [str(p) for p in VerlBackend().validate(job).problems]
    assert lines == ["data.return_multi_modal_inputs: must be true for a vision-language model: without it the "
                     "batch carries no pixel_values"]


def test_text_model_gets_no_image_checks(tmp_path: Path) -> None:
    from verl.utils.tokenizer import hf_processor

    from agentbridge.models import resolve_model_path
    from agentbridge_verl.processor import text_only, verl_processor

    for name in ("builtin:tiny", "builtin:tiny-qwen2.5"):  # answered without loading a tokenizer for veRL to drop
        assert text_only(str(resolve_model_path(name)))
        assert verl_processor(str(resolve_model_path(name))) == (None, None)
        assert hf_processor(str(resolve_model_path(name))) is None  # what veRL's own answer is
    assert not text_only(str(resolve_model_path("builtin:tiny-vl"))) and not text_only("Qwen/Qwen2.5-0.5B")
    job = compile_example("examples/gui_text.yaml", tmp_path / "job", "backend.name=verl", "backend.options={}",
                          "backend.overrides.data.return_multi_modal_inputs=false")
    report: Any = VerlBackend().validate(job)
    assert report.ok and "skipped" not in report.details, [str(p) for p in report.problems]


@pytest.mark.parametrize(("example", "module"), [("examples/reasoning_gym.yaml", "agentbridge_reasoning_gym"),
                                               ("examples/gymnasium.yaml", "agentbridge_gymnasium"),
                                               ("examples/deepretrieval.yaml", "agentbridge_search"),
                                               ("examples/textworld.yaml", "agentbridge_textworld"),
                                               ("examples/r1_searcher.yaml", "agentbridge_search")])
def test_bridge_examples_pass_veRLs_validators(example: str, module: str, tmp_path: Path) -> None:
    """The reasoning-gym, Gymnasium and TextWorld bridges and the DeepRetrieval and R1-Searcher recipes
    compile for veRL unchanged and pass its validators."""
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed in this environment; run bash adapters/verl/test.sh", pytrace=False)
    job = compile_example(example, tmp_path / "job")
    assert job.manifest["tasks"] == {"train": 8, "eval": 4}
    report = VerlBackend().validate(job)
    assert report.ok, [str(p) for p in report.problems]

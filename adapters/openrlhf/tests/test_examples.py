"""examples/search.yaml, gui.yaml and gui_text.yaml compile for OpenRLHF and pass its validator (issues #6, #7).

The search and gui plugins are installed in the OpenRLHF environment by adapters/openrlhf/test.sh (they coexist
with its pins); the GUI examples drive Debian's headless Chromium, as the gui plugin's own tests do. Validation is
OpenRLHF 0.11.2's real argparse parser and post-parse checks on the job's launch.sh, then agentbridge's checks
(every prompt rendered, images included).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from agentbridge.spec import load_spec
from agentbridge_openrlhf.backend import OpenRLHFBackend

EXAMPLES = {"search": "agentbridge_search", "gui_text": "agentbridge_gui", "gui": "agentbridge_gui"}


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def example(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One example compiled for OpenRLHF (its backend.name stays trl) and validated, once per module."""
    name = request.param
    if importlib.util.find_spec(EXAMPLES[name]) is None:
        pytest.fail(f"{EXAMPLES[name]} is not installed in this environment; run bash adapters/openrlhf/test.sh",
                    pytrace=False)
    from agentbridge.models import resolve_model_path
    from agentbridge.rollout.agent import check_ids
    from agentbridge_openrlhf.validate import job_argv, parse_args

    spec = load_spec(f"examples/{name}.yaml")
    if name != "search":  # the GUI examples' prompts are rendered from live pages: a few tasks make the point
        small = ["data.train.size=8", "data.eval.size=4", *(["data.dev.size=4"] if spec.data.dev else [])]
        spec = load_spec(f"examples/{name}.yaml", small)
    backend = OpenRLHFBackend()
    problems = [*check_ids(spec), *map(str, backend.check(spec))]  # what `agentbridge compile` checks first
    job = backend.compile(spec, tmp_path_factory.mktemp(name) / "job")
    report = backend.validate(job)
    args = parse_args(job_argv(job.path, str(resolve_model_path(spec.model.path))))
    return {"name": name, "spec": spec, "job": job, "problems": problems, "report": report, "args": args}


def test_compiles_and_passes_openrlhfs_validator(example: dict[str, Any]) -> None:
    assert example["problems"] == []
    assert example["report"].ok, [str(p) for p in example["report"].problems]
    assert example["args"].train.agent_func_path.endswith("/agentbridge_agent.py")
    assert example["args"].reward.remote_url == ["agent"]  # OpenRLHF's agent mode


def test_what_the_job_leaves_out_is_noted(example: dict[str, Any]) -> None:
    spec = example["spec"]
    assert spec.backend.name == "trl"
    notes = list(example["job"].manifest["notes"])
    if spec.backend.options:  # TRL's options: said once, not applied
        assert notes.pop(0) == "backend.options are for backend trl (backend.name): not applied to the OpenRLHF job"
    assert not any(n.startswith("backend.options") for n in notes)
    ws = spec.algorithm.warm_start
    control = [n for n in notes if n.startswith("algorithm.warm_start.control is not run")]
    assert len(control) == int(ws is not None and ws.control) == len(notes)


def test_image_flags_follow_the_model(example: dict[str, Any]) -> None:
    """The VLM job names the image key and an image budget, so OpenRLHF loads an AutoProcessor, collapses image
    pad tokens for vLLM and sets ``limit_mm_per_prompt``; the text jobs carry no image budget."""
    args, spec = example["args"], example["spec"]
    if example["name"] == "gui":
        from openrlhf.utils.utils import is_vlm_model

        from agentbridge.models import resolve_model_path

        assert is_vlm_model(str(resolve_model_path(spec.model.path)))
        assert args.data.image_key == "images"
        assert args.data.max_images_per_prompt == spec.agent.max_turns  # a screenshot on reset + one per step
        assert args.algo.advantage.estimator == "group_norm" and not args.ds.packing_samples  # no critic, packing
    else:
        assert args.data.max_images_per_prompt == 0


@pytest.mark.parametrize(("example", "module"), [("examples/reasoning_gym.yaml", "agentbridge_reasoning_gym"),
                                               ("examples/gymnasium.yaml", "agentbridge_gymnasium"),
                                               ("examples/deepretrieval.yaml", "agentbridge_search"),
                                               ("examples/textworld.yaml", "agentbridge_textworld"),
                                               ("examples/r1_searcher.yaml", "agentbridge_search")])
def test_bridge_examples_pass_openrlhfs_validator(example: str, module: str, tmp_path: Any) -> None:
    """The reasoning-gym, Gymnasium and TextWorld bridges and the DeepRetrieval and R1-Searcher recipes
    compile for OpenRLHF unchanged and pass its validator."""
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed in this environment; run bash adapters/openrlhf/test.sh",
                    pytrace=False)
    spec = load_spec(example, ["data.train.size=8", "data.eval.size=4"])
    backend = OpenRLHFBackend()
    assert backend.check(spec) == []
    report = backend.validate(backend.compile(spec, tmp_path / "job"))
    assert report.ok, [str(p) for p in report.problems]


@pytest.mark.parametrize("example", ["calculator", "search", "gui"])
def test_gpu_profile_passes_openrlhfs_validator_as_far_as_no_model_files_allow(
        example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/*.gpu.yaml (a 2x8 cluster, a hub id this machine has not got): OpenRLHF's parser and checks run on
    the job, the checks that read model files are skipped and said."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = load_spec(f"examples/{example}.gpu.yaml", ["data.train.size=8", "data.eval.size=4"])
    assert OpenRLHFBackend().check(spec) == []
    report = OpenRLHFBackend().validate(OpenRLHFBackend().compile(spec, tmp_path / "job"))
    assert report.ok, [str(p) for p in report.problems]
    assert report.details["skipped"][0].startswith(f"model.path {spec.model.path}: not on this machine")

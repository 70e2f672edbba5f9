"""What the adapter kit holds for every adapter (moved there from the adapters that each wrote it): a backend's view
of ``spec.backend`` (``BackendOptions``), a validator module's ``validate_job`` (``job_validator``), the keys a
backend's composed config does not have (``unknown_config_keys``), a command line parsed from a program's
``__main__`` block (``inline_cli``) and the Ray cluster's lines before launch (``cluster``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf
from pydantic import BaseModel

from agentbridge import adapter as kit
from agentbridge.adapter import cluster, validation
from agentbridge.adapter.inline_cli import CommandLineRejected, main_block, run_statements
from agentbridge.spec import Spec, parse_spec


def _spec(backend: dict[str, Any], **resources: Any) -> Spec:
    raw = yaml.safe_load(Path("examples/calculator.yaml").read_text())
    raw["resources"] = {"nodes": 1, "gpus_per_node": 2, **resources}
    raw["backend"] = backend
    return parse_spec(raw)


class _Options(BaseModel):
    micro_batch_size: int = 1
    logger: list[str] = ["tensorboard"]


def test_a_backend_reads_its_own_options_and_overrides_only() -> None:
    view = kit.BackendOptions.of_model("verl", _Options, {"micro_batch_size": "micro_batch_size"})
    assert view.defaults == {"micro_batch_size": 1, "logger": ["tensorboard"]}
    mine = _spec({"name": "verl", "options": {"logger": ["wandb"]},
                  "overrides": {"trainer": {"nnodes": 2}, "data.seed": 3}}, micro_batch_size=4)
    assert view.applies(mine)
    # defaults, then the sizing field under its twin's name, then the spec's own options
    assert view.options(mine) == {"micro_batch_size": 4, "logger": ["wandb"]}
    assert view.overrides(mine) == {"trainer.nnodes": 2, "data.seed": 3}  # dotted, nested or not
    theirs = _spec({"name": "trl", "options": {"logger": ["wandb"]}, "overrides": {"x": 1}})
    assert not view.applies(theirs)
    assert view.options(theirs) == {"micro_batch_size": 1, "logger": ["tensorboard"]}
    assert view.overrides(theirs) == {}


class _Backend:
    made = 0

    def __init__(self) -> None:
        type(self).made += 1


def test_a_validator_module_gets_validate_job_without_importing_its_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def validate_with(backend: Any, check: Any, job_dir: Path, skipped: Any, spec: Any, semantics: Any,
                      **options: Any) -> list[kit.Problem]:
        seen.update(backend=backend, check=check, job_dir=job_dir, skipped=skipped, spec=spec, semantics=semantics,
                    options=options)
        return [kit.Problem("here", "why")]

    def check(*_: Any) -> list[kit.Problem]:
        return []

    monkeypatch.setattr(validation, "validate_with", validate_with)
    validate_job = kit.job_validator(f"{__name__}:_Backend", check, "The backend's checks.", mute=False,
                                     install="how")
    assert validate_job.__doc__ == "The backend's checks." and _Backend.made == 0  # made only when a job is checked
    skipped: list[str] = []
    assert validate_job(Path("job"), skipped, semantics={}) == [kit.Problem("here", "why")]
    assert isinstance(seen["backend"], _Backend) and _Backend.made == 1
    assert seen["check"] is check and seen["skipped"] is skipped and seen["spec"] is None
    assert seen["options"] == {"mute": False, "install": "how"}
    # run_validator hands semantics to a validate_job whose signature takes them
    import inspect

    assert "semantics" in inspect.signature(validate_job).parameters


def test_keys_a_backends_config_does_not_have_are_one_line_each() -> None:
    base = OmegaConf.create({"trainer": {"nnodes": 1, "open": {}}, "data": {"seed": 0}})
    keys = ["trainer.nnodes", "trainer.nodes", "trainer.open.anything.below", "data.seed.deeper", "reward.fn"]
    problems = kit.unknown_config_keys(keys, base, "job.yaml", "Backend 1.0")
    assert [(p.where, p.message) for p in problems] == [
        ("job.yaml: trainer.nodes", "'trainer.nodes' is not a Backend 1.0 config key; check backend.overrides"),
        ("job.yaml: reward.fn", "'reward' is not a Backend 1.0 config key; check backend.overrides"),
    ]


PROGRAM = '''import argparse

def train(args):
    raise SystemExit("the program itself must not run")

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    args = parser.parse_args()
    assert args.steps > 0, "steps must be positive"
    assert args.steps < 100
    train(args)
'''


def test_a_command_line_built_under_main_is_parsed_from_the_installed_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "inline_program.py").write_text(PROGRAM)
    monkeypatch.syspath_prepend(str(tmp_path))
    origin, body = main_block("inline_program", "install it", "inline_program 1.0")
    assert origin == str(tmp_path / "inline_program.py")
    parse = body[:-1]  # without train(args)
    import argparse

    argv = sys.argv
    assert run_statements(parse, origin, ["--steps", "3"], "prog", {"argparse": argparse})["args"].steps == 3
    assert sys.argv is argv
    with pytest.raises(CommandLineRejected, match="^the following arguments are required: --steps$"):
        run_statements(parse, origin, [], "prog", {"argparse": argparse})
    with pytest.raises(CommandLineRejected, match="^steps must be positive$"):
        run_statements(parse, origin, ["--steps", "0"], "prog", {"argparse": argparse})
    with pytest.raises(CommandLineRejected, match=r"^a post-parse assert failed \(line 11 of inline_program.py\)$"):
        run_statements(parse, origin, ["--steps", "100"], "prog", {"argparse": argparse})
    with pytest.raises(CommandLineRejected, match="^no_such_program is not installed in this interpreter; install"):
        main_block("no_such_program.cli", "install it", "no_such_program 1.0")
    (tmp_path / "plain_module.py").write_text("x = 1\n")
    with pytest.raises(CommandLineRejected, match=r"has no __main__ block; is this plain 2\.0\?$"):
        main_block("plain_module", "install it", "plain 2.0")


def test_the_ray_cluster_lines_before_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "ray_cluster_nodes", lambda address: [{"GPU": 4.0}, {"CPU": 8.0}, {"GPU": 8.0}])
    assert cluster.ray_node_gpus("auto") == [8, 4, 0]
    assert cluster.unaddressed(2, "Backend", "the other nodes") == (
        "the job spans 2 nodes but RAY_ADDRESS is not set: Backend would start a Ray cluster of this machine alone "
        "and wait forever for the other nodes; submit it to the cluster with submit.sh, or set RAY_ADDRESS to "
        "launch it from a node of the cluster")

"""Plugin arguments are checked before any work, from what each plugin declares; `validate` catches values that
parse but would poison a run (backend name, model path, prompt budget)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from agentbridge.cli import main
from agentbridge.plugin_args import args_problems, args_schema
from agentbridge.plugins import get_plugins
from agentbridge.spec import SpecError, load_spec

BASE = Path("examples/calculator.yaml").read_text()
ENV_ARGS = "  args: {timeout_s: 5.0, expert_in_head: 0.7}\n"


def problems(tmp_path: Path, text: str, sets: list[str] | None = None) -> list[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path, sets, registries=get_plugins().registries)
    return info.value.problems


def line_of(text: str, needle: str) -> int:
    return next(i for i, x in enumerate(text.splitlines(), 1) if needle in x)


def test_a_typo_in_environment_args_is_one_line_with_its_line_and_a_suggestion(tmp_path: Path) -> None:
    assert ENV_ARGS in BASE
    text = BASE.replace(ENV_ARGS, "  args: {timeout_s: 5.0, expert_in_hed: 0.7}\n")
    (line,) = problems(tmp_path, text)
    assert line == (f"{tmp_path / 'spec.yaml'}:{line_of(text, 'expert_in_hed')}: environment.args.expert_in_hed: "
                    "unknown argument; did you mean 'expert_in_head'? (math/calculator)")


def test_a_wrong_type_is_named_and_a_set_is_blamed_on_the_set(tmp_path: Path) -> None:
    text = BASE.replace(ENV_ARGS, "  args: {timeout_s: 5.0, expert_in_head: lots}\n")
    (line,) = problems(tmp_path, text)
    assert "environment.args.expert_in_head: Input should be a valid number" in line
    (line,) = problems(tmp_path, BASE, ["data.train.args.two_stp=true"])
    assert line.startswith("--set data.train.args.two_stp=true: data.train.args.two_stp: unknown argument; "
                           "did you mean 'two_step'?")
    (line,) = problems(tmp_path, BASE, ["reward.0.args={scale: 2}"])
    assert "reward[0].args.scale: unknown argument; known: none (math/exact_answer)" in line


def test_what_agentbridge_passes_itself_is_not_a_spec_argument() -> None:
    from agentbridge_math.env import CalculatorEnv
    from agentbridge_math.tasks import arithmetic_tasks

    known = "known: expert_in_head, max_output_chars, timeout_s"
    assert args_problems("environments", CalculatorEnv, {"tools": []}) == [(("tools",), f"unknown argument; {known}")]
    assert args_problems("datasets", arithmetic_tasks, {"two_step": False}) == []
    assert [p for _, p in args_problems("datasets", arithmetic_tasks, {"size": 3})][0].startswith("unknown argument")


def test_a_declared_args_model_and_kwargs_are_honoured() -> None:
    class Args(BaseModel):
        level: int

    def reward(trajectory: Any, task: Any, **anything: Any) -> float:
        return 0.0

    declared = SimpleNamespace(Args=Args)
    assert args_problems("rewards", declared, {"level": 3}) == []
    assert args_problems("rewards", declared, {}) == [(("level",), "required argument is missing")]
    assert args_problems("rewards", reward, {"whatever": 1}) == []


def test_the_schema_completes_plugin_arguments() -> None:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0, result.output
    cases = json.loads(result.output)["$defs"]["EnvironmentSpec"]["allOf"]
    calculator = next(c for c in cases if c["if"]["properties"]["id"]["const"] == "math/calculator")
    args = calculator["then"]["properties"]["args"]
    assert args["additionalProperties"] is False and args["properties"]["expert_in_head"]["type"] == "number"
    from agentbridge_math.tasks import arithmetic_tasks

    assert args_schema("datasets", arithmetic_tasks)["properties"] == {  # type: ignore[index]
        "two_step": {"default": True, "title": "Two Step", "type": "boolean"}}


@pytest.mark.parametrize(("sets", "expected"), [
    (["backend.name=trll"], "backend.name: unknown backend 'trll'; did you mean 'trl'?"),
    (["model.path=/no/such/model"], "model.path: '/no/such/model' does not exist"),
    (["model.path=builtin:tiny2"], "model.path: unknown builtin model 'builtin:tiny2'"),
    (["agent.max_prompt_tokens=60"], "agent.max_prompt_tokens: the system prompt, the tools and the first task's "
                                     "prompt take"),
])
def test_validate_refuses_values_that_would_poison_the_run(sets: list[str], expected: str) -> None:
    args = ["validate", "examples/calculator.yaml"] + [x for s in sets for x in ("--set", s)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and expected in result.output, result.output
    assert "Traceback" not in result.output


def test_validate_accepts_hub_ids_and_the_examples() -> None:
    for spec in sorted(Path("examples").glob("*.yaml")):
        result = CliRunner().invoke(main, ["validate", str(spec)])
        assert result.exit_code == 0 and "ok:" in result.output, (spec, result.output)
    from agentbridge.preflight import model_path_problems

    spec = load_spec("examples/calculator.yaml", ["model.path=Qwen/Qwen2.5-0.5B-Instruct"])
    assert model_path_problems(spec) == []


def test_validate_warns_when_builtin_sized_settings_meet_a_real_model() -> None:
    from agentbridge.preflight import scale_warnings

    assert scale_warnings(load_spec("examples/calculator.yaml")) == []
    for profile in sorted(Path("examples").glob("*.gpu.yaml")):  # a real model with settings sized for it
        assert scale_warnings(load_spec(str(profile))) == [], profile
    spec = load_spec("examples/calculator.yaml", ["model.path=Qwen/Qwen2.5-3B-Instruct"])
    assert [line.split(" ")[0] for line in scale_warnings(spec)] == ["algorithm.lr", "algorithm.warm_start.lr",
                                                                     "agent.max_tokens_per_turn"]
    result = CliRunner().invoke(main, ["validate", "examples/calculator.yaml", "--set",
                                       "model.path=Qwen/Qwen2.5-3B-Instruct"])
    assert result.exit_code == 0 and "warning: examples/calculator.yaml: algorithm.lr 0.0001 is sized" in result.output

"""Hostile and careless values: each is refused when the spec is loaded or validated, as one line naming the field.

Covers non-finite and absurd numbers in every numeric field of the schema and in the plugins' free-form arguments,
seeds outside numpy's range, model paths that are no model, tools an environment would not run or that are listed
twice, ``--set`` keys nested past the spec's limit, and eval or dev tasks that are training tasks.
"""

from __future__ import annotations

import json
import math
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ValidationError

from agentbridge.cli import main
from agentbridge.plugins import get_plugins
from agentbridge.preflight import model_path_problems, split_overlap_problems, task_identity
from agentbridge.rollout.agent import check_ids
from agentbridge.spec import Spec, SpecError, load_spec, locate
from agentbridge.spec.load import MAX_DEPTH
from agentbridge.spec.schema import MAX_SEED

BASE = Path("examples/calculator.yaml").read_text()
GYM = "examples/gymnasium.yaml"


def validate(*args: str) -> Any:
    return CliRunner().invoke(main, ["validate", *args])


def one_error(result: Any) -> str:
    """The one ``error:`` line of a failed ``validate``; no traceback, exit status 1."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    errors = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def line_of(text: str, needle: str) -> int:
    return next(i for i, x in enumerate(text.splitlines(), 1) if needle in x)


DEEP = ".".join(["a"] * 5000)

# (--set item, field the error names, words it holds)
SETS = [
    ("algorithm.lr=.inf", "algorithm.lr", "finite"),
    ("algorithm.lr=.nan", "algorithm.lr", "finite"),
    ("algorithm.lr=1e999", "algorithm.lr", "finite"),
    ("algorithm.lr=10", "algorithm.lr", "less than or equal to 1"),
    ("algorithm.kl_coef=.inf", "algorithm.kl_coef", "finite"),
    ("algorithm.kl_coef=-1", "algorithm.kl_coef", "greater than or equal to 0"),
    ("agent.sampling.temperature=.inf", "agent.sampling.temperature", "finite"),
    ("agent.sampling.temperature=1e6", "agent.sampling.temperature", "less than or equal to 10"),
    ("agent.sampling.top_p=.nan", "agent.sampling.top_p", "finite"),
    ("agent.sampling.top_k=1e12", "agent.sampling.top_k", "less than or equal to"),
    ("reward.0.weight=1e308", "reward[0].weight", "less than or equal to 1000"),
    ("reward.1.weight=-1e308", "reward[1].weight", "greater than or equal to -1000"),
    ("algorithm.steps=1e12", "algorithm.steps", "less than or equal to 1000000"),
    ("algorithm.steps=true", "algorithm.steps", "expected a number, got true"),
    ("algorithm.warmup_steps=1e12", "algorithm.warmup_steps", "less than or equal to"),
    ("algorithm.group_size=1e9", "algorithm.group_size", "less than or equal to"),
    ("algorithm.batch_size=1e9", "algorithm.batch_size", "less than or equal to"),
    ("agent.max_turns=1e9", "agent.max_turns", "less than or equal to"),
    ("agent.max_prompt_tokens=1e12", "agent.max_prompt_tokens", "less than or equal to"),
    ("agent.max_error_rate=.nan", "agent.max_error_rate", "finite"),
    ("seed=-1", "seed", "greater than or equal to 0"),
    ("seed=1e26", "seed", f"less than or equal to {MAX_SEED}"),
    (f"seed={MAX_SEED + 1}", "seed", f"less than or equal to {MAX_SEED}"),
    ("data.train.seed=-1", "data.train.seed", "greater than or equal to 0"),
    ("data.train.size=1e12", "data.train.size", "less than or equal to"),
    ("resources.nodes=1e9", "resources.nodes", "less than or equal to"),
    ("resources.gpus_per_node=1e4", "resources.gpus_per_node", "less than or equal to"),
    ("algorithm.warm_start.lr=.inf", "algorithm.warm_start.lr", "finite"),
    ("algorithm.warm_start.target=.nan", "algorithm.warm_start.target", "finite"),
    ("algorithm.warm_start.max_minutes=1e9", "algorithm.warm_start.max_minutes", "less than or equal to"),
    ("algorithm.warm_start.demos=1e15", "algorithm.warm_start.demos", "less than or equal to"),
    ("environment.args.timeout_s=-1", "environment.args.timeout_s", "must not be negative"),
    ("environment.args.timeout_s=.inf", "environment.args.timeout_s", "finite"),
    ("environment.args.timeout_s=0", "environment.args.timeout_s", "more than 0 seconds"),
    ("environment.args.timeout_s=1e9", "environment.args.timeout_s", "more than a week"),
    ("environment.args.expert_in_head=.nan", "environment.args.expert_in_head", "finite"),
    ("backend.overrides.learning_rate=.inf", "backend.overrides.learning_rate", "finite"),
    ("backend.overrides.x=[1, .nan]", "backend.overrides.x[1]", "finite"),
    ("backend.overrides.n=100000000000000000000000", "backend.overrides.n", "64-bit"),
    ('model.path=""', "model.path", "must not be empty"),
    ("model.path='   '", "model.path", "must not be empty"),
    ("model.path=/", "model.path", "filesystem root"),
    ("model.path=//", "model.path", "filesystem root"),
    ("model.path=/..", "model.path", "filesystem root"),
    ('model.chat_template=""', "model.chat_template", "at least 1 character"),
    ("tools=[calculator, calculator]", "tools", "'calculator' is listed twice (tools[0] and tools[1])"),
    ("algorithm.lrr=1", "algorithm.lrr", "unknown key"),
]


@pytest.mark.parametrize(("item", "field", "words"), SETS, ids=[s[0] for s in SETS])
def test_a_poison_set_is_one_line_naming_the_set_and_field(item: str, field: str, words: str) -> None:
    line = one_error(validate("examples/calculator.yaml", "--set", item))
    assert line.startswith(f"error: --set {item}: {field}: ") and words in line, line


def test_a_huge_float_passed_on_verbatim_is_kept() -> None:
    """``1e30`` is a finite float: passed through ``backend.overrides`` as given."""
    spec = load_spec("examples/calculator.yaml", ["backend.overrides.n=1e30"])
    assert spec.backend.overrides["n"] == 1e30


# (text in examples/calculator.yaml, hostile replacement, field)
FILE_CASES = [
    ("lr: 1.0e-4", "lr: .inf", "algorithm.lr"),
    ("kl_coef: 0.0", "kl_coef: .nan", "algorithm.kl_coef"),
    ("{temperature: 0.5, top_p: 1.0}", "{temperature: .inf, top_p: 1.0}", "agent.sampling.temperature"),
    ("{id: core/format, weight: 0.1}", "{id: core/format, weight: 1e308}", "reward[1].weight"),
    ("steps: 30", "steps: 1e12", "algorithm.steps"),
    ("seed: 0\n", "seed: -1\n", "seed"),
    ("{timeout_s: 5.0,", "{timeout_s: -1,", "environment.args.timeout_s"),
    ("path: builtin:tiny", 'path: ""', "model.path"),
    ("path: builtin:tiny", "path: /", "model.path"),
    ("tools: [calculator]", "tools: [calculator, calculator]", "tools"),
    ("max_steps: 1200", "max_steps: 1e20", "algorithm.warm_start.max_steps"),
]


@pytest.mark.parametrize(("old", "new", "field"), FILE_CASES, ids=[c[1] for c in FILE_CASES])
def test_a_poison_value_in_the_file_is_one_line_with_file_and_line(tmp_path: Path, old: str, new: str,
                                                                    field: str) -> None:
    assert old in BASE
    text = BASE.replace(old, new, 1)
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    line = one_error(validate(str(path)))
    assert line.startswith(f"error: {path}:{line_of(text, new.strip().split(chr(10))[0])}: {field}: "), line


def _numeric_fields(model: BaseModel, prefix: str = "") -> list[tuple[BaseModel, str, type, str]]:
    """(model, field name, int or float, dotted path) of every numeric field under ``model``."""
    out = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        union = typing.get_origin(info.annotation) in (typing.Union, types.UnionType)
        kinds = [a for a in (typing.get_args(info.annotation) if union else (info.annotation,)) if a is not type(None)]
        kinds = [typing.get_args(k)[0] if typing.get_origin(k) is typing.Annotated else k for k in kinds]
        if kinds in ([int], [float]):
            out.append((model, name, kinds[0], f"{prefix}{name}"))
        elif isinstance(value, BaseModel):
            out += _numeric_fields(value, f"{prefix}{name}.")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    out += _numeric_fields(item, f"{prefix}{name}[{i}].")
    return out


def test_every_numeric_field_of_the_schema_refuses_poison() -> None:
    """Systematic: every int and float field of every model refuses non-finite, huge and boolean values."""
    spec = load_spec("examples/calculator.yaml")
    fields = _numeric_fields(spec)
    assert len(fields) >= 30, [f[3] for f in fields]
    for model, name, kind, path in fields:
        poison: list[Any] = [math.inf, -math.inf, math.nan, 1e300, -1e300, True]
        if kind is int:
            poison += [10**30, -(10**30)]
        for value in poison:
            with pytest.raises(ValidationError):
                setattr(model, name, value)
                pytest.fail(f"{path} accepted {value!r}")


def test_valid_edges_still_load() -> None:
    spec = load_spec("examples/calculator.yaml", [
        f"seed={MAX_SEED}", "data.train.seed=0", "algorithm.kl_coef=0", "agent.sampling.temperature=0",
        "reward.1.weight=-1", "model.path=Qwen/Qwen2.5-3B-Instruct", "model.path=builtin:tiny-qwen2.5",
        "environment.args.timeout_s=600", "backend.overrides.seed=-1", "algorithm.steps=1e3"])
    assert spec.seed == MAX_SEED and spec.algorithm.steps == 1000 and isinstance(spec.algorithm.steps, int)
    assert spec.model.path == "builtin:tiny-qwen2.5" and spec.backend.overrides["seed"] == -1


@pytest.mark.parametrize("example", sorted(str(p) for p in Path("examples").glob("*.yaml")))
def test_every_example_still_loads(example: str) -> None:
    load_spec(example, registries=get_plugins().registries)


# model paths


def _quiet(path: str) -> list[str]:
    """--set items that keep validate's warnings about builtin-sized settings away from a real model path."""
    return ["--set", f"model.path={path}", "--set", "algorithm.lr=1e-6", "--set", "algorithm.warm_start.lr=1e-5",
            "--set", "agent.max_tokens_per_turn=128"]


def test_a_directory_without_config_json_is_not_a_model(tmp_path: Path) -> None:
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    line = one_error(validate("examples/calculator.yaml", *_quiet(str(folder))))
    assert line.endswith(f"model.path: '{folder}' is a directory without config.json, not a model directory (give "
                         "the directory that holds the model's config.json and weights)")
    (folder / "config.json").write_text("{}")
    assert model_path_problems(load_spec("examples/calculator.yaml", ["model.path=" + str(folder)])) == []
    for hub_or_builtin in ("Qwen/Qwen2.5-3B-Instruct", "builtin:tiny", "builtin:tiny-vl"):
        assert model_path_problems(load_spec("examples/calculator.yaml", [f"model.path={hub_or_builtin}"])) == []


def test_the_home_directory_is_not_a_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (p,) = model_path_problems(load_spec("examples/calculator.yaml", ["model.path='~'"]))
    assert p.startswith("model.path: '~' is a directory without config.json")


# tools


def test_tools_the_environment_would_not_run_are_one_line() -> None:
    line = one_error(validate(GYM, "--set", "tools=[calculator]"))
    assert line == ("error: --set tools=[calculator]: tools: environment 'gym/text' does not run listed tools, so "
                    "calculator would be shown to the model and never run; remove the list")
    assert load_spec(GYM).tools == []  # an empty list lists no tool and stays valid
    assert load_spec(GYM, ["tools=[]"], registries=get_plugins().registries).tools == []
    # check_ids (what an Agent and the backend's environment check) says the same without the registries at load
    assert check_ids(load_spec(GYM, ["tools=[calculator]"])) == [
        "tools: environment 'gym/text' does not run listed tools, so calculator would be shown to the model and "
        "never run; remove the list"]
    assert check_ids(load_spec("examples/calculator.yaml")) == []


# --set keys


def test_a_set_key_deeper_than_the_spec_allows_is_one_line_naming_it() -> None:
    for root in ("backend.overrides", "backend.options", "environment.args"):
        line = one_error(validate("examples/calculator.yaml", "--set", f"{root}.{DEEP}=1"))
        assert line.startswith(f"error: --set {root}.a.a.a") and "5002 levels deep" in line, line
        assert f"nests at most {MAX_DEPTH}" in line
    deep_value = "[" * 40 + "]" * 40
    line = one_error(validate("examples/calculator.yaml", "--set", f"backend.overrides.{'.'.join('b' * 30)}="
                              f"{deep_value}"))
    assert f"nest the spec more than {MAX_DEPTH} levels deep" in line
    line = one_error(validate("examples/calculator.yaml", "--set", "algorithm..lr=1"))
    assert line == ("error: --set algorithm..lr=1: the key 'algorithm..lr' has an empty part (two dots in a row, "
                    "or a dot at an end)")


def test_a_set_key_inside_the_limit_still_works() -> None:
    spec = load_spec("examples/calculator.yaml", [f"backend.overrides.{'.'.join('c' * 20)}=1"])
    assert spec.backend.overrides["c"]["c"]["c"]


# eval and dev tasks that are training tasks


def test_eval_split_equal_to_train_is_found_by_task_identity() -> None:
    plugins = get_plugins()
    spec = load_spec("examples/calculator.yaml", ["data.eval.split=train"], registries=plugins.registries)
    (p,) = split_overlap_problems(spec, plugins)
    assert p.startswith("data.eval: 500 of 500 eval tasks are also train tasks") and "\n" not in p
    text = BASE
    assert locate(spec, p) == (f"examples/calculator.yaml:{line_of(text, '  eval: {id: math/arithmetic')} (after "
                               f"--set data.eval.split=train): {p}")
    # another name for the same split (math's "test" is eval) shares problems with a dev split drawn from eval
    spec = load_spec("examples/calculator.yaml", ["data.eval.split=test", "data.dev.split=eval"])
    (p,) = split_overlap_problems(spec, plugins)
    assert p.startswith("data.eval: ") and "eval tasks are also dev tasks" in p
    # episodes by reset seed: another seed of the same split reaches the training seeds
    spec = load_spec(GYM, ["data.dev.split=train", "data.dev.seed=3"])
    (p,) = split_overlap_problems(spec, plugins)
    assert p.startswith("data.dev: 50 of 50 dev tasks are also train tasks")


@pytest.mark.parametrize("example", ["examples/calculator.yaml", GYM, "examples/gui_text.yaml",
                                     "examples/textworld.yaml", "examples/openenv.yaml"])
def test_the_examples_hold_out_their_eval_and_dev_tasks(example: str) -> None:
    plugins = get_plugins()
    assert split_overlap_problems(load_spec(example, registries=plugins.registries), plugins) == []


def test_jsonl_splits_are_compared_by_prompt_and_answer_not_id(tmp_path: Path) -> None:
    def row(id: str, i: int, **data: str) -> dict[str, Any]:
        return {"id": id, "prompt": f"What is {i} + 1?", "data": {"answer": str(i + 1), **data}}

    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(row(f"t{i}", i)) for i in range(4)))
    renamed = [row(f"e{i}", i, note="eval copy") for i in range(2, 6)]  # tasks 2 and 3 again, under other ids
    (tmp_path / "eval.jsonl").write_text("\n".join(json.dumps(r) for r in renamed))
    spec = load_spec("examples/calculator.yaml", [
        f"data.train={{path: {tmp_path / 'train.jsonl'}}}", f"data.eval={{path: {tmp_path / 'eval.jsonl'}}}",
        "data.dev=null", "algorithm.warm_start=null"])
    assert split_overlap_problems(spec, get_plugins()) == [
        "data.eval: 2 of 4 eval tasks are also train tasks (the same prompt and answer, or prompt and task data); "
        "held-out scores would be measured on training tasks"]


def test_a_slow_build_is_skipped_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    import agentbridge.rollout.agent

    def slow(*args: Any, **kwargs: Any) -> list[Any]:
        time.sleep(2)
        return []

    monkeypatch.setattr(agentbridge.rollout.agent, "load_tasks", slow)
    notes: list[str] = []
    spec = load_spec("examples/calculator.yaml", ["data.eval.split=train"])
    assert split_overlap_problems(spec, get_plugins(), budget_s=0.1, notes=notes) == []
    assert notes[0] == "data.eval: not compared with data.train for shared tasks: building their tasks took more " \
                       "than 0.1 s" and len(notes) == 3


def test_task_identity() -> None:
    from agentbridge.env import Task

    same = Task("a", "Add 1 and 2.", {"answer": "3", "steps": ["1 + 2"]})
    assert task_identity(same) == task_identity(Task("b", "Add 1 and 2.", {"answer": "3"}))
    assert task_identity(same) != task_identity(Task("a", "Add 1 and 2.", {"answer": "4"}))
    page = Task("g", "MiniWoB++ task click-test", {"task": "click-test", "seed": 1})
    assert task_identity(page) != task_identity(Task("g", page.prompt, {"task": "click-test", "seed": 2}))


def test_validate_reports_an_overlap_as_one_line() -> None:
    line = one_error(validate("examples/calculator.yaml", "--set", "data.eval.split=train"))
    assert "data.eval: 500 of 500 eval tasks are also train tasks" in line


# where a preflight problem came from


def test_locate_names_file_and_line_or_the_set(tmp_path: Path) -> None:
    spec = load_spec("examples/calculator.yaml", ["model.path=/nonexistent"])
    assert locate(spec, "model.path: nope") == "--set model.path=/nonexistent: model.path: nope"
    assert locate(spec, "tools[0]: nope") == f"examples/calculator.yaml:{line_of(BASE, 'tools:')}: tools[0]: nope"
    reward = line_of(BASE, "core/format")
    assert locate(spec, "reward[1].id: x") == f"examples/calculator.yaml:{reward}: reward[1].id: x"
    assert locate(spec, "no field here") == "examples/calculator.yaml: no field here"
    assert locate(spec, "nonsense.field: x", "s.yaml") == "s.yaml: nonsense.field: x"
    assert locate(Spec.model_validate(spec.model_dump()), "seed: x", "s.yaml") == "s.yaml: seed: x"


def test_several_poison_values_are_one_line_each() -> None:
    with pytest.raises(SpecError) as info:
        load_spec("examples/calculator.yaml", ["algorithm.lr=.inf", "seed=-1", "environment.args.timeout_s=-1"])
    assert sorted(p.split(": ")[1] for p in info.value.problems) == ["algorithm.lr", "environment.args.timeout_s",
                                                                      "seed"]

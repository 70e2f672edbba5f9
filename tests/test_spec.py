"""Spec loading: valid specs, one clear line per problem, --set overrides, JSON Schema."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentbridge.spec import SpecError, json_schema, load_spec

BASE = Path("examples/calculator.yaml").read_text()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str, sets: list[str] | None = None) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text), sets)
    for line in info.value.problems:
        assert "\n" not in line and "Traceback" not in line
    return info.value.problems


def test_example_loads() -> None:
    spec = load_spec("examples/calculator.yaml")
    assert spec.environment.id == "math/calculator" and spec.reward[0].weight == 1.0
    assert spec.algorithm.name == "dapo" and spec.agent.max_tokens_per_turn == 48
    ws = spec.algorithm.warm_start
    assert ws is not None and ws.demos == 8000 and ws.target == 0.5 and ws.control
    assert spec.data.dev is not None and spec.data.dev.split == "dev"


def test_warm_start_target_needs_dev_and_control_needs_eval() -> None:
    with pytest.raises(SpecError, match="needs data.dev"):
        load_spec("examples/calculator.yaml", ["data.dev=null"])
    with pytest.raises(SpecError, match="needs data.eval"):
        load_spec("examples/calculator.yaml", ["data.eval=null"])
    with pytest.raises(SpecError, match="control_steps needs algorithm.warm_start.control: true"):
        load_spec("examples/calculator.yaml", ["algorithm.warm_start.control=false",
                                               "algorithm.warm_start.control_steps=5"])
    ws = load_spec("examples/calculator.yaml", ["algorithm.warm_start.control_steps=5"]).algorithm.warm_start
    assert ws is not None and ws.control_steps == 5


def test_wrong_type_names_file_field_and_line(tmp_path: Path) -> None:
    text = BASE.replace("{id: core/format, weight: 0.1}", "{id: core/format, weight: heavy}")
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "weight: heavy" in x)
    (p,) = problems(tmp_path, text)
    assert p.startswith(f"{tmp_path / 'spec.yaml'}:{line}: reward[1].weight: ")
    assert "number" in p


def test_unknown_key(tmp_path: Path) -> None:
    text = BASE.replace("  max_turns: 4", "  max_turns: 4\n  max_turnz: 5")
    line = text.splitlines().index("  max_turnz: 5") + 1
    (p,) = problems(tmp_path, text)
    assert p.endswith(f"spec.yaml:{line}: agent.max_turnz: unknown key")


def test_negative_and_inconsistent_budgets(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, BASE.replace("max_turns: 4", "max_turns: -1"))
    assert "agent.max_turns" in p and "greater than 0" in p
    (p,) = problems(tmp_path, BASE.replace("max_tokens_per_turn: 48", "max_tokens_per_turn: 999"))
    assert "max_tokens_per_turn (999) must not exceed max_response_tokens (256)" in p


def test_yaml_syntax_error(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, BASE.replace("tools: [calculator]", "tools: [calculator"))
    assert "YAML syntax error" in p and str(tmp_path / "spec.yaml") in p


def test_missing_file_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "nope.yaml")
    (p,) = problems(tmp_path, "- a\n- b\n")
    assert "must be a YAML mapping" in p


def test_set_overrides_are_validated_like_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, BASE)
    spec = load_spec(path, ["algorithm.lr=3e-5", "reward.1.weight=0.5", "environment.args.timeout_s=2"])
    assert spec.algorithm.lr == 3e-5 and spec.reward[1].weight == 0.5 and spec.environment.args["timeout_s"] == 2
    (p,) = problems(tmp_path, BASE, ["algorithm.steps=many"])
    assert p.startswith("--set algorithm.steps=many: algorithm.steps: ")
    (p,) = problems(tmp_path, BASE, ["reward.7.weight=1"])
    assert p.startswith("--set reward.7.weight=1:") and "list of 2" in p
    (p,) = problems(tmp_path, BASE, ["nonsense"])
    assert "expected dotted.key=value" in p


def test_reward_ids_unique_and_dataset_source(tmp_path: Path) -> None:
    text = BASE.replace("{id: core/format, weight: 0.1}", "{id: math/exact_answer, weight: 0.1}")
    (p,) = problems(tmp_path, text)
    assert "repeated: math/exact_answer" in p
    both = BASE.replace("train: {id: math/arithmetic,", "train: {path: x.jsonl, id: math/arithmetic,")
    (p,) = problems(tmp_path, both)
    assert "data.train" in p and "exactly one of" in p


def test_schema_covers_every_top_level_key() -> None:
    schema = json_schema()
    assert set(yaml.safe_load(BASE)) <= set(schema["properties"])
    assert schema["additionalProperties"] is False

"""The sizing fields of ``resources`` (micro-batch, gradient checkpointing, checkpoint interval and retention): their
validation, that a spec without them dumps and hashes as before they existed, and the shared rules adapters apply
them by (``agentbridge.spec.sizing``: the field is its option twin's default, a disagreeing option conflicts, a field
a backend cannot honour is a refusal at its path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from agentbridge.spec import Spec, SpecError, dump_spec, parse_spec, spec_hash
from agentbridge.spec.sizing import SIZING_FIELDS, option_conflicts, sized_options, sizing, sizing_refusals

TWINS = {"micro_batch_size": "micro_batch_size_per_gpu", "save_steps": "save_freq"}


def _spec(backend: dict[str, Any] | None = None, algorithm: str = "dapo", **resources: Any) -> Spec:
    raw = yaml.safe_load(Path("examples/calculator.yaml").read_text())
    raw["algorithm"]["name"] = algorithm
    raw["resources"] = {"nodes": 1, "gpus_per_node": 2, **resources}
    raw["backend"] = backend or {"name": "trl"}
    return parse_spec(raw)


@pytest.mark.parametrize(("resources", "where"), [
    ({"micro_batch_size": 0}, "resources.micro_batch_size"),
    ({"micro_batch_size": True}, "resources.micro_batch_size"),
    ({"micro_batch_size": 3}, "resources.micro_batch_size (3) must divide each GPU's 16 episodes per update"),
    ({"save_steps": 0}, "resources.save_steps"),
    ({"save_total_limit": -1}, "resources.save_total_limit"),
    ({"gradient_checkpointing": "sometimes"}, "resources.gradient_checkpointing"),
])
def test_bad_sizing_values_are_refused_in_one_line(resources: dict[str, Any], where: str) -> None:
    with pytest.raises(SpecError) as refused:
        _spec(**resources)
    assert any(where in line for line in refused.value.problems), refused.value.problems


def test_micro_batches_divide_each_gpus_share_of_an_update() -> None:
    assert _spec(micro_batch_size=16).resources.micro_batch_size == 16  # calculator.yaml's 32 episodes on 2 GPUs
    raw = yaml.safe_load(Path("examples/calculator.yaml").read_text())
    raw["algorithm"].update({"batch_size": 4, "group_size": 4, "mini_batches": 2})
    raw["resources"] = {"nodes": 1, "gpus_per_node": 2, "micro_batch_size": 4}
    assert parse_spec(raw).resources.micro_batch_size == 4  # 4 x 4 / 2 / 2 = 4 a GPU per update
    raw["resources"]["micro_batch_size"] = 8
    with pytest.raises(SpecError, match="must divide each GPU's 4 episodes per update"):
        parse_spec(raw)


def test_unset_fields_do_not_dump_and_set_ones_do() -> None:
    plain = _spec()
    assert set(plain.resources.model_dump()) == {"nodes", "gpus_per_node"}
    assert "micro_batch_size" not in dump_spec(plain)
    sized = _spec(micro_batch_size=4, gradient_checkpointing=False, save_steps=25, save_total_limit=1)
    assert sized.resources.model_dump() == {"nodes": 1, "gpus_per_node": 2, "micro_batch_size": 4,
                                            "gradient_checkpointing": False, "save_steps": 25, "save_total_limit": 1}
    assert spec_hash(sized) != spec_hash(plain)
    assert parse_spec(yaml.safe_load(dump_spec(sized))) == sized  # what a job's spec.yaml holds reads back the same


def test_a_spec_without_them_dumps_its_resources_as_before_they_existed() -> None:
    raw = yaml.safe_load(Path("examples/calculator.yaml").read_text())
    resources = raw.get("resources", {})
    assert parse_spec(raw).model_dump(mode="json")["resources"] == {"nodes": resources.get("nodes", 1),
                                                                    "gpus_per_node": resources.get("gpus_per_node", 0)}


def test_the_field_is_its_option_twins_default_and_a_disagreeing_option_conflicts() -> None:
    spec = _spec({"name": "verl", "options": {"save_freq": 10}}, micro_batch_size=4, save_steps=25,
                 gradient_checkpointing=True)
    assert sizing(spec) == {"micro_batch_size": 4, "gradient_checkpointing": True, "save_steps": 25}
    assert sized_options(spec, TWINS) == {"micro_batch_size_per_gpu": 4, "save_freq": 25}
    (where, why), = option_conflicts(spec, "verl", TWINS).items()
    assert where == "backend.options.save_freq" and why.startswith("resources.save_steps (25) sets it too")
    assert option_conflicts(spec, "trl", TWINS) == {}  # the options are veRL's: nothing of TRL's to conflict
    agreeing = _spec({"name": "verl", "options": {"save_freq": 25}}, save_steps=25)
    assert option_conflicts(agreeing, "verl", TWINS) == {}


def test_a_field_a_backend_cannot_honour_is_a_refusal_at_its_path() -> None:
    why = {"save_total_limit": "it keeps every checkpoint"}
    assert sizing_refusals(_spec(save_total_limit=2), why) == {"resources.save_total_limit": why["save_total_limit"]}
    assert sizing_refusals(_spec(save_steps=5), why) == {}


def test_every_sizing_field_is_described_in_the_schema() -> None:
    properties = Spec.model_json_schema()["$defs"]["ResourcesSpec"]["properties"]
    assert all(properties[name].get("description", "").endswith("(null: the backend's default)")
               for name in SIZING_FIELDS)


BACKENDS = ("trl", "verl", "openrlhf", "rlinf", "slime", "roll")


@pytest.mark.parametrize("name", BACKENDS)
def test_an_option_that_disagrees_with_its_field_is_refused_in_one_line_naming_both(name: str) -> None:
    from agentbridge.plugins import get_plugins

    if name not in get_plugins().backends.ids():
        pytest.skip(f"agentbridge-{name} is not installed here")
    backend = get_plugins().backends.get(name)
    option = backend.sizing_options["micro_batch_size"]
    spec = _spec({"name": name, "options": {option: 2}}, micro_batch_size=4)
    lines = [str(p) for p in backend.check(spec) if p.where == f"backend.options.{option}"]
    assert lines == [f"backend.options.{option}: resources.micro_batch_size (4) sets it too, to another value: "
                     "remove the option or make the two agree"]
    agreeing = _spec({"name": name, "options": {option: 4}}, micro_batch_size=4)
    assert not [p for p in backend.check(agreeing) if str(p.where).startswith(("backend.options", "resources"))]


def _sized_mini(mini_backend: Any) -> Any:
    """The core's fake backend with a sizing twin (``micro_batch_size``) and a sizing field it cannot honour."""

    class SizedMini(type(mini_backend)):  # type: ignore[misc]
        known_options = {**type(mini_backend).known_options, "micro_batch_size": 1}
        sizing_options = {"micro_batch_size": "micro_batch_size"}
        sizing_why_not = {"save_total_limit": "it keeps every batch"}

    return SizedMini()


def test_the_adapter_base_refuses_conflicts_and_unhonoured_fields(mini_backend: Any) -> None:
    backend = _sized_mini(mini_backend)
    conflict = _spec({"name": "mini", "options": {"micro_batch_size": 2}}, "grpo", micro_batch_size=4)
    assert [p.where for p in backend.check(conflict)] == ["backend.options.micro_batch_size"]
    assert backend.check(_spec({"name": "mini", "options": {"micro_batch_size": 4}}, "grpo", micro_batch_size=4)) == []
    unhonoured = _spec({"name": "mini"}, "grpo", save_total_limit=2)
    assert backend.recipe_refusals(unhonoured) == {"resources.save_total_limit": "it keeps every batch"}
    (line,) = [str(p) for p in backend.check(unhonoured)]
    assert line.startswith("resources.save_total_limit: mini cannot run grpo with save_total_limit 2 (it keeps every "
                           "batch); backends that can: "), line


def test_the_manifest_records_the_fields_only_when_set(mini_backend: Any, tmp_path: Path) -> None:
    backend = _sized_mini(mini_backend)
    sized = backend.compile(_spec({"name": "mini"}, "grpo", micro_batch_size=4, save_steps=5), tmp_path / "sized")
    assert sized.manifest["sizing"] == {"micro_batch_size": 4, "save_steps": 5}
    assert "sizing" not in backend.compile(_spec({"name": "mini"}, "grpo"), tmp_path / "plain").manifest

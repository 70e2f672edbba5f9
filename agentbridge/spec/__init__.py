"""The agent spec: pydantic models, YAML loading with line-numbered errors, JSON Schema."""

from collections.abc import Mapping
from typing import Any

from agentbridge.plugin_args import args_schema
from agentbridge.spec.load import (
    SpecError,
    apply_overrides,
    dump_spec,
    load_spec,
    locate,
    parse_spec,
    runs_listed_tools,
    set_label,
    spec_hash,
)
from agentbridge.spec.schema import (
    ALGORITHMS,
    TRACKERS,
    AgentSpec,
    AlgorithmSpec,
    BackendSpec,
    DatasetSpec,
    DataSpec,
    EnvironmentSpec,
    LoggingSpec,
    ModelSpec,
    ResourcesSpec,
    RewardSpec,
    SamplingSpec,
    Spec,
    WarmStartSpec,
)

_ARGS_OF = {"EnvironmentSpec": "environments", "DatasetSpec": "datasets", "RewardSpec": "rewards"}


def json_schema(registries: Mapping[str, Any] | None = None) -> dict:
    """JSON Schema of the spec, for editors; given ``registries`` (``get_plugins().registries``), each registered
    environment, dataset and reward id also gets the schema of its ``args``."""
    schema = Spec.model_json_schema()
    for name, kind in _ARGS_OF.items():
        registry = (registries or {}).get(kind)
        cases = []
        for id in registry.ids() if registry is not None else []:
            args = args_schema(kind, registry.get(id))  # type: ignore[union-attr]
            if args is not None:
                args.pop("title", None)
                for ref, definition in args.pop("$defs", {}).items():  # nested models: refs stay "#/$defs/..."
                    schema["$defs"].setdefault(ref, definition)
                cases.append({"if": {"properties": {"id": {"const": id}}, "required": ["id"]},
                              "then": {"properties": {"args": args}}})
        if cases:
            schema["$defs"][name]["allOf"] = cases
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "agentbridge spec"
    return schema


__all__ = [
    "ALGORITHMS", "AgentSpec", "AlgorithmSpec", "BackendSpec", "DataSpec", "DatasetSpec", "EnvironmentSpec",
    "LoggingSpec", "ModelSpec", "ResourcesSpec", "RewardSpec", "SamplingSpec", "Spec", "SpecError", "TRACKERS",
    "WarmStartSpec",
    "apply_overrides", "dump_spec", "json_schema", "load_spec", "locate", "parse_spec", "runs_listed_tools",
    "set_label", "spec_hash",
]

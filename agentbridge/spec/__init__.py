"""The agent spec: pydantic models, YAML loading with line-numbered errors, JSON Schema."""

from agentbridge.spec.load import SpecError, apply_overrides, dump_spec, load_spec, parse_spec, spec_hash
from agentbridge.spec.models import (
    ALGORITHMS,
    AgentSpec,
    AlgorithmSpec,
    BackendSpec,
    DatasetSpec,
    DataSpec,
    EnvironmentSpec,
    ModelSpec,
    ResourcesSpec,
    RewardSpec,
    SamplingSpec,
    Spec,
    WarmStartSpec,
)


def json_schema() -> dict:
    """JSON Schema of the spec, for editors."""
    schema = Spec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "agentbridge spec"
    return schema


__all__ = [
    "ALGORITHMS", "AgentSpec", "AlgorithmSpec", "BackendSpec", "DataSpec", "DatasetSpec", "EnvironmentSpec",
    "ModelSpec", "ResourcesSpec", "RewardSpec", "SamplingSpec", "Spec", "SpecError", "WarmStartSpec",
    "apply_overrides", "dump_spec", "json_schema", "load_spec", "parse_spec", "spec_hash",
]

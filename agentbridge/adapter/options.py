"""What of ``spec.backend`` one backend reads: its ``backend.options`` and ``backend.overrides``, which belong to the
spec's ``backend.name`` (another backend's mean nothing to it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from agentbridge.adapter.job import flatten
from agentbridge.spec import Spec
from agentbridge.spec.sizing import backend_options


@dataclass(frozen=True)
class BackendOptions:
    """One backend's view of ``spec.backend``: ``backend`` its name, ``defaults`` its options' defaults, ``twins``
    each sizing field of ``resources`` -> the option it stands for (see :mod:`agentbridge.spec.sizing`)."""

    backend: str
    defaults: Mapping[str, Any]
    twins: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_model(cls, backend: str, model: type[BaseModel], twins: Mapping[str, str]) -> BackendOptions:
        """The view whose defaults are those of the options model ``model`` (dumped as the spec's YAML holds them)."""
        return cls(backend, model().model_dump(), twins)

    def applies(self, spec: Spec) -> bool:
        """Whether the spec's ``backend.options`` / ``backend.overrides`` are this backend's (it is the spec's)."""
        return spec.backend.name == self.backend

    def options(self, spec: Spec) -> dict[str, Any]:
        """The backend's options: the defaults, the spec's sizing fields, then its own ``backend.options``."""
        return backend_options(spec, self.backend, self.defaults, self.twins)

    def overrides(self, spec: Spec) -> dict[str, Any]:
        """``backend.overrides`` as dotted keys (a spec may nest them or write them dotted), when they are this
        backend's; none otherwise."""
        return flatten(spec.backend.overrides) if self.applies(spec) else {}

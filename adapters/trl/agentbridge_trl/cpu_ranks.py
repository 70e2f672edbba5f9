"""A GPU job's DeepSpeed processes on a machine without a GPU (checks and tests on CPU only; jobs never use it).

DeepSpeed runs on CPU (its CPU accelerator, over gloo), but accelerate starts distributed processes on a machine
without an accelerator only for CPU jobs (``use_cpu``, which turns DeepSpeed off): for any other job it finds no
backend and every process counts itself rank 0 of 1, while DeepSpeed sees them all. :func:`install` makes
accelerate give such processes gloo, as it does CPU jobs, so a GPU job's entry runs unchanged with DeepSpeed on
CPU. ``sitecustomize`` is the place to call it, so that every process a launcher starts has it::

    import agentbridge_trl.cpu_ranks; agentbridge_trl.cpu_ranks.install()
"""

from __future__ import annotations

import os
from typing import Any


def install() -> None:
    """Patch accelerate's backend choice: a process started by a launcher (``LOCAL_RANK`` set) of a job that is not
    a CPU job, on a machine without an accelerator, joins the others over gloo (``MULTI_CPU``)."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType
    from accelerate.utils.imports import get_torch_accelerator_backend

    choose = PartialState._prepare_backend
    if getattr(choose, "_agentbridge_cpu_ranks", False):
        return

    def prepare_backend(self: Any, cpu: bool = False, sagemaker_dp: bool = False,
                        backend: str | None = None) -> tuple[Any, Any]:
        found, kind = choose(self, cpu, sagemaker_dp, backend)
        if (found is None and not cpu and int(os.environ.get("LOCAL_RANK", -1)) != -1
                and get_torch_accelerator_backend()[0] is None):
            return "gloo", DistributedType.MULTI_CPU
        return found, kind

    setattr(prepare_backend, "_agentbridge_cpu_ranks", True)  # noqa: B010
    setattr(PartialState, "_prepare_backend", prepare_backend)  # noqa: B010

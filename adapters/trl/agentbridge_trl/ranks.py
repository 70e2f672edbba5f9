"""The processes of an ``accelerate launch``: which one is the main one, waiting for it, gathering to it.

Run as one process (``launch.sh``, tests) the process is the main one, and waiting or gathering costs nothing.
Under ``accelerate launch`` the waits and gathers go over their own gloo group with a long timeout: the other
ranks wait there while the main process evaluates and warm-starts, which can take longer than the timeout of
the training group (``ddp_timeout``), and a gloo barrier keeps no GPU busy while it waits.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

WAIT_TIMEOUT = timedelta(hours=12)  # the longest the other ranks wait for the main process's phases


class Ranks:
    """This process's place among the job's processes (accelerate's ``PartialState``)."""

    def __init__(self, *, cpu: bool, timeout_s: float = 1800.0) -> None:
        from accelerate import PartialState

        state = PartialState(cpu=cpu, timeout=timedelta(seconds=timeout_s))
        self.index: int = state.process_index
        self.count: int = state.num_processes
        self.main: bool = state.is_main_process
        self.device: Any = state.device  # where the trainer puts this process's model (its GPU, or the CPU)
        self.group: Any = None
        if self.count > 1:
            import torch.distributed as dist

            self.group = dist.new_group(backend="gloo", timeout=WAIT_TIMEOUT)

    def wait(self) -> None:
        """Block until every rank reaches this point (every rank must call it)."""
        if self.group is not None:
            import torch.distributed as dist

            dist.barrier(group=self.group)

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order, on every rank (every rank must call it)."""
        if self.group is None:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.count
        dist.all_gather_object(out, obj, group=self.group)
        return out

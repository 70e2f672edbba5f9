"""The Ray cluster a job is submitted to, measured before launch (:func:`placement_main`, the check ``launch.sh``
runs before a backend's trainer)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def ray_cluster_nodes(address: str, connect_timeout_s: float = 5.0) -> list[dict[str, float]]:
    """The resources of each alive node of the Ray cluster at ``address``, connecting as a driver briefly and
    quietly: what a backend's check before launch measures the job's placement groups against.

    An address with a port nobody listens on raises ``ConnectionError`` within ``connect_timeout_s`` (Ray itself
    keeps retrying for a minute or more)."""
    import logging
    import socket
    import warnings
    from urllib.parse import urlsplit

    import ray

    if address != "auto":
        parts = urlsplit(address if "://" in address else f"ray://{address}")
        if parts.hostname and parts.port:
            try:
                socket.create_connection((parts.hostname, parts.port), timeout=connect_timeout_s).close()
            except OSError as e:
                raise ConnectionError(f"nothing answers at {parts.hostname}:{parts.port} ({e})") from None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        return [dict(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive")]
    finally:
        ray.shutdown()


ADDRESS_ENV = "RAY_ADDRESS"  # where ray.init() connects (a backend's own too); Ray sets it for a Ray job's entrypoint


def ray_node_gpus(address: str) -> list[int]:
    """The GPUs of each alive node of the Ray cluster at ``address``, most first (:func:`ray_cluster_nodes`)."""
    return sorted((int(node.get("GPU", 0)) for node in ray_cluster_nodes(address)), reverse=True)


def local_ray_gpus() -> int:
    """The GPUs a Ray cluster started on this machine declares: Ray's own count, capped by the visible devices."""
    from ray._private.accelerators import get_accelerator_manager_for_resource

    manager = get_accelerator_manager_for_resource("GPU")
    count = manager.get_current_node_num_accelerators()
    visible = manager.get_current_process_visible_accelerator_ids()
    return min(count, len(visible)) if visible is not None else count


def unaddressed(nodes: int, label: str, waits_for: str) -> str:
    """The line that refuses a job spanning ``nodes`` nodes launched without ``RAY_ADDRESS``: the backend (``label``)
    would start a Ray cluster of this machine alone and wait forever for ``waits_for``."""
    return (f"the job spans {nodes} nodes but {ADDRESS_ENV} is not set: {label} would start a Ray cluster of this "
            f"machine alone and wait forever for {waits_for}; submit it to the cluster with submit.sh, or set "
            f"{ADDRESS_ENV} to launch it from a node of the cluster")


def unreachable(address: str, error: BaseException) -> str:
    """The line that says the Ray cluster at ``address`` did not answer (Ray's connection errors vary)."""
    return f"cannot reach the Ray cluster at {ADDRESS_ENV}={address}: {str(error).strip().splitlines()[0]}"


def placement_main(argv: list[str] | None, usage: str, needs: tuple[str, ...],
                   problem: Callable[[Path, list[str], str | None], str | None]) -> int:
    """A backend's check before ``launch.sh`` starts its trainer, ``python -m <adapter>.cluster JOB [ARGS...]``:
    exit 2 with ``usage`` without a job; 0 when a module of ``needs`` does not import here (the trainer, started with
    the same interpreter, reports that itself); else ``problem(job, args, address)`` (``address``: ``$RAY_ADDRESS``,
    None when unset) says why the job would not fit the cluster, one ``error:`` line and exit 1, or None: exit 0."""
    import importlib.util
    import os
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    if any(importlib.util.find_spec(module) is None for module in needs):
        return 0
    job = Path(argv[0])
    why = problem(job, argv[1:], os.environ.get(ADDRESS_ENV) or None)
    if why is not None:
        print(f"error: {job / 'launch.sh'}: {why}", file=sys.stderr)
        return 1
    return 0

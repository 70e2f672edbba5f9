"""The Ray cluster a job is submitted to, measured before launch."""

from __future__ import annotations


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

"""Before ``launch.sh`` starts veRL's trainer: does the Ray cluster it is going to use have the nodes the job asks for?

veRL 0.9.1 checks only the cluster's *total* GPUs (``ResourcePoolManager._check_resource_available``), then places
one STRICT_PACK placement group of ``trainer.n_gpus_per_node`` GPUs per node and waits for each with
``ray.get(pg.ready())`` and no timeout. A job whose per-node share fits no node (1x16 on a 2x8 cluster, 2x8 on four
nodes of 4) passes the total check and waits forever; so does a multi-node job launched without ``RAY_ADDRESS``
(``main_ppo``'s ``ray.init()`` then starts a cluster of this machine alone). This check refuses both with one line.

``python -m agentbridge_verl.cluster JOB [OVERRIDES...]`` (``launch.sh`` runs it with its own arguments, so
``trainer.nnodes=`` / ``trainer.n_gpus_per_node=`` from ``submit.sh`` count): exit 0 when the job fits, 1 with one
``error:`` line when it does not. A one-node job without ``RAY_ADDRESS`` is left to veRL's own check (it fails at
once when this machine has too few GPUs). Without Ray in this interpreter it checks nothing.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from agentbridge.adapter.cluster import placement_main, ray_node_gpus, unaddressed, unreachable
from agentbridge_verl.config import CONFIG_NAME


def job_shape(job: Path, overrides: list[str]) -> tuple[int, int]:
    """(``trainer.nnodes``, ``trainer.n_gpus_per_node``): the job's config, then the command line's overrides."""
    trainer = (yaml.safe_load((job / f"{CONFIG_NAME}.yaml").read_text()) or {}).get("trainer", {})
    shape = {"nnodes": int(trainer.get("nnodes", 1)), "n_gpus_per_node": int(trainer.get("n_gpus_per_node", 1))}
    for item in overrides:
        key, _, value = item.lstrip("+").partition("=")
        if key in ("trainer.nnodes", "trainer.n_gpus_per_node") and value.strip("'\"").isdigit():
            shape[key.split(".")[1]] = int(value.strip("'\""))
    return shape["nnodes"], shape["n_gpus_per_node"]


def placement_problem(nnodes: int, gpus_per_node: int, address: str | None) -> str | None:
    """Why veRL's trainer would wait forever for its placement groups with ``RAY_ADDRESS=address``, or None."""
    if address is None:
        return unaddressed(nnodes, "veRL", "the other nodes") if nnodes > 1 else None
    try:
        gpus = ray_node_gpus(address)
    except Exception as e:  # noqa: BLE001 - Ray's connection errors vary; one line says which cluster
        return unreachable(address, e)
    fitting = sum(g >= gpus_per_node for g in gpus)
    if fitting < nnodes:
        return (f"the job asks for {nnodes} node(s) with {gpus_per_node} GPUs each (veRL places one group per node "
                f"and waits for it forever), but the Ray cluster at {address} has {fitting} such node(s) "
                f"(GPUs per node: {', '.join(map(str, gpus)) or 'no nodes'})")
    return None


def main(argv: list[str] | None = None) -> int:
    return placement_main(argv, "python -m agentbridge_verl.cluster JOB [OVERRIDES...]", ("ray",),
                          lambda job, overrides, address: placement_problem(*job_shape(job, overrides), address))


if __name__ == "__main__":
    raise SystemExit(main())

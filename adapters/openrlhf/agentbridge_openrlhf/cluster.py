"""Before ``launch.sh`` starts OpenRLHF's trainer: will its placement groups fit the Ray cluster it is going to use?

OpenRLHF 0.11.2's ``train()`` waits for each placement group with ``ray.get(pg.ready())`` and no timeout. A job that
asks for more GPUs than the cluster has waits forever, and so does a multi-node job launched without ``RAY_ADDRESS``:
``train()``'s ``ray.init()`` then starts a Ray cluster of this machine alone. This check runs first and refuses such a
job with one line naming the demand and the supply.

``python -m agentbridge_openrlhf.cluster JOB [EXTRA_ARGS...]`` (``launch.sh`` runs it, with ``MODEL`` set): exit 0
when the job fits, 1 with one ``error:`` line when it does not. Without OpenRLHF or Ray in this interpreter it
checks nothing: the trainer, started with the same interpreter, reports that itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentbridge.adapter.cluster import local_ray_gpus as local_gpus
from agentbridge.adapter.cluster import placement_main, ray_node_gpus, unaddressed, unreachable
from agentbridge_openrlhf.config import describe_demand, gpu_demand


def placement_problem(args: Any, address: str | None) -> str | None:
    """Why ``train(args)`` would wait forever for its placement groups with ``RAY_ADDRESS=address``, or None."""
    from agentbridge_openrlhf.validate import flag_of

    def flag(dotted: str) -> Any:
        return flag_of(args, dotted)

    demand = gpu_demand(flag)
    roles = ["actor", *(["ref"] if float(flag("algo.kl.init_coef") or 0) > 0 else []),
             *(["critic"] if flag("critic.model_name_or_path") else [])]
    nodes = max(int(flag(f"{role}.num_nodes")) for role in roles)
    if address is None and nodes > 1:
        return unaddressed(nodes, "OpenRLHF", "the other nodes' GPUs")
    wanted = sum(demand.values())
    try:
        have = local_gpus() if address is None else sum(ray_node_gpus(address))
    except Exception as e:  # noqa: BLE001 - Ray's connection errors vary; one line says which cluster
        return unreachable(str(address), e)
    if wanted > have:
        where = "this machine has" if address is None else f"the Ray cluster at {address} has"
        return (f"the job asks for {describe_demand(demand)} but {where} {have}; OpenRLHF would wait forever for "
                "its placement groups")
    return None


def job_problem(job: Path, extra: list[str], address: str | None) -> str | None:
    """Why the job (its ``launch.sh``'s arguments, then ``extra``) would not start: OpenRLHF rejects its command line,
    or :func:`placement_problem`."""
    from agentbridge_openrlhf.validate import ArgsError, job_argv, parse_args

    try:
        args = parse_args(job_argv(job, os.environ.get("MODEL")) + extra)
    except ArgsError as e:
        return f"OpenRLHF rejects the command line: {e}"
    return placement_problem(args, address)


def main(argv: list[str] | None = None) -> int:
    return placement_main(argv, "python -m agentbridge_openrlhf.cluster JOB [EXTRA_ARGS...]", ("openrlhf", "ray"),
                          job_problem)


if __name__ == "__main__":
    raise SystemExit(main())

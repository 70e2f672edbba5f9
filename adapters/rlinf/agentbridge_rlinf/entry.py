"""The RLinf job's Hydra main: RLinf's reasoning worker groups with agentbridge's agent-loop worker.

RLinf has no config key that selects the agent-loop class, so the job ships this entry (``entry.py`` in the job
directory calls :func:`main`). It follows RLinf's own agent examples: ``validate_cfg``, the cluster and placement,
the SGLang rollout group, the agent-loop group on the rollout's nodes, the actor group (FSDP or Megatron), RLinf's
reasoning dataset over the job's rows, then ``AgentRunner`` with no reward worker (the driver scores every episode
inside the agent loop) and no tool workers (agentbridge's environment runs the tools). RLinf 0.3.0's
``rlinf.runners.agent_runner`` imports its Megatron actor module, so the job's environment needs Megatron-LM even
with ``actor.training_backend: fsdp``.
"""

from __future__ import annotations

import json
from typing import Any


def run(cfg: Any) -> None:
    from omegaconf import OmegaConf
    from rlinf.config import validate_cfg
    from rlinf.data.datasets import create_rl_dataset
    from rlinf.runners.agent_runner import AgentRunner
    from rlinf.scheduler import Cluster, NodePlacementStrategy
    from rlinf.utils.placement import ModelParallelComponentPlacement, PlacementMode
    from rlinf.workers.actor import get_actor_worker
    from rlinf.workers.inference.utils import get_inference_backend_worker
    from rlinf.workers.rollout.utils import get_rollout_backend_worker
    from transformers import AutoTokenizer

    from agentbridge_rlinf.agent_loop import AgentBridgeAgentLoopWorker

    cfg = validate_cfg(cfg)
    print(json.dumps(OmegaConf.to_container(cfg, resolve=True), indent=2))
    cluster = Cluster(cluster_cfg=cfg.cluster)
    placement = ModelParallelComponentPlacement(cfg, cluster)

    rollout_strategy = placement.get_strategy("rollout")
    rollout = get_rollout_backend_worker(cfg).create_group(cfg, placement).launch(
        cluster, name=cfg.rollout.group_name, placement_strategy=rollout_strategy)
    loop_strategy = NodePlacementStrategy([p.cluster_node_rank for p in rollout_strategy.get_placement(cluster)])
    agent_loop = AgentBridgeAgentLoopWorker.create_group(cfg, placement).launch(
        cluster, name=cfg.agentloop.group_name, placement_strategy=loop_strategy)
    inference = None
    if placement.placement_mode == PlacementMode.DISAGGREGATED and cfg.algorithm.recompute_logprobs:
        inference = get_inference_backend_worker(cfg, "actor").create_group(cfg, placement).launch(
            cluster, name=cfg.inference.group_name, placement_strategy=placement.get_strategy("inference"))
    actor = get_actor_worker(cfg).create_group(cfg, placement).launch(
        cluster, name=cfg.actor.group_name, placement_strategy=placement.get_strategy("actor"))

    tokenizer = AutoTokenizer.from_pretrained(cfg.actor.tokenizer.tokenizer_model)
    train_ds, val_ds = create_rl_dataset(cfg, tokenizer)
    runner = AgentRunner(cfg=cfg, placement=placement, train_dataset=train_ds, val_dataset=val_ds, rollout=rollout,
                         inference=inference, actor=actor, reward=None, agent_loop=agent_loop)
    runner.init_workers()
    runner.run()


def main() -> None:
    """``python entry.py --config-path JOB --config-name rlinf_job [overrides...]`` (what ``launch.sh`` runs)."""
    import hydra
    import torch.multiprocessing as mp

    mp.set_start_method("spawn", force=True)
    hydra.main(version_base="1.1", config_path=None, config_name=None)(run)()

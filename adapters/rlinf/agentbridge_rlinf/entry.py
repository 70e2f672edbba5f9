"""The RLinf job's Hydra main: RLinf's reasoning worker groups with agentbridge's agent-loop worker.

RLinf has no config key that selects the agent-loop class, so the job ships this entry (``entry.py`` in the job
directory calls :func:`main`). It follows RLinf's own agent examples: ``validate_cfg``, the cluster and placement,
the SGLang rollout group, the agent-loop group on the rollout's nodes, the actor group (FSDP or Megatron), RLinf's
reasoning dataset over the job's rows, then ``AgentRunner`` with no reward worker (the driver scores every episode
inside the agent loop) and no tool workers (agentbridge's environment runs the tools). RLinf 0.3.0's
``rlinf.runners.agent_runner`` imports its Megatron actor module, so the job's environment needs Megatron-LM even
with ``actor.training_backend: fsdp``.

Checkpoints: ``runner.output_dir/<experiment_name>/checkpoints/global_step_N`` (``ReasoningRunner._save_checkpoint``),
the actor's in ``actor/``: a DCP shard set to resume from and, with ``fsdp_config.save_full_model_weights``, the full
state dict in ``actor/model_state_dict/full_weights.pt`` (``FSDPStrategyBase.save_checkpoint``, rank 0). RLinf 0.3.0
writes no Hugging Face model for a reasoning actor (its ``fsdp_convertor.convert_pt_to_hf`` builds embodied models
through ``rlinf.models.get_model``), so :func:`export_hf` loads that state dict into the starting model's
architecture and saves it beside it (``actor/huggingface``): what ``launch.sh``'s ``finish`` evaluates.

    python -m agentbridge_rlinf.entry export LOG_DIR --model MODEL    # prints the exported model's directory
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HF_DIR = "huggingface"
FULL_WEIGHTS = Path("actor") / "model_state_dict" / "full_weights.pt"


def latest_checkpoint(log_dir: Path) -> tuple[int, Path] | None:
    """``(N, dir)`` of the latest ``global_step_N`` under ``log_dir/checkpoints``: the one RLinf resumes from
    (``ReasoningRunner.init_workers`` with ``resume_dir: auto``: the largest N among those folders)."""
    found = [(int(d.name.removeprefix("global_step_")), d)
             for d in (Path(log_dir) / "checkpoints").glob("global_step_*")
             if d.is_dir() and d.name.removeprefix("global_step_").isdigit()]
    return max(found) if found else None


def export_hf(log_dir: Path, model: str) -> Path:
    """The latest checkpoint's full weights as a Hugging Face model in ``<checkpoint>/actor/huggingface`` (kept when
    there already), with the architecture, config and tokenizer of ``model`` (the model the run started from)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    latest = latest_checkpoint(log_dir)
    if latest is None:
        raise FileNotFoundError(f"{Path(log_dir) / 'checkpoints'}: no global_step_N checkpoint")
    checkpoint = latest[1]
    out = checkpoint / "actor" / HF_DIR
    if (out / "config.json").is_file():
        return out
    weights = checkpoint / FULL_WEIGHTS
    if not weights.is_file():
        raise FileNotFoundError(f"{weights}: missing (actor.fsdp_config.save_full_model_weights off, or a Megatron "
                                "actor: convert with rlinf.utils.ckpt_convertor.megatron_convertor)")
    config = AutoConfig.from_pretrained(model)
    hf = AutoModelForCausalLM.from_config(config)
    state = {}
    for key, tensor in torch.load(weights, map_location="cpu", weights_only=True).items():
        for prefix in ("_orig_mod.", "module."):  # torch.compile / wrapper prefixes (convert_pt_to_hf drops them too)
            key = key.removeprefix(prefix)
        state[key] = tensor
    missing, unexpected = hf.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if unexpected or set(missing) - tied:
        raise ValueError(f"{weights}: does not fit {model}'s architecture (missing {sorted(set(missing) - tied)[:3]}, "
                         f"unexpected {sorted(unexpected)[:3]})")
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(dtype, torch.dtype):
        hf = hf.to(dtype)
    hf.save_pretrained(out)
    AutoTokenizer.from_pretrained(model).save_pretrained(out)
    return out


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

    from agentbridge_rlinf.rollout import AgentBridgeAgentLoopWorker

    cfg = validate_cfg(cfg)
    print(json.dumps(OmegaConf.to_container(cfg, resolve=True), indent=2))
    done = latest_checkpoint(Path(str(cfg.runner.logger.log_path)))
    if cfg.runner.resume_dir == "auto" and done is not None and done[0] >= int(cfg.runner.max_steps) >= 0:
        # resumed past its last step, RLinf's loop would train on (check_progress ends only at step == max_steps)
        print(f"agentbridge: {done[1]} is step {done[0]} of {cfg.runner.max_steps}: trained already", file=sys.stderr)
        return
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


def export_main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m agentbridge_rlinf.entry export")
    parser.add_argument("log_dir", type=Path, help="runner.output_dir/<experiment_name> (runner.logger.log_path)")
    parser.add_argument("--model", required=True, help="The model the run started from (its config and tokenizer).")
    args = parser.parse_args(argv)
    try:
        print(export_hf(args.log_dir, args.model))
    except (FileNotFoundError, ValueError) as e:
        print(f"agentbridge: no trained model to evaluate: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["export"]:
        sys.exit("usage: python -m agentbridge_rlinf.entry export LOG_DIR --model MODEL")
    sys.exit(export_main(sys.argv[2:]))

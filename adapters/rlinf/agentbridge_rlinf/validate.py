"""RLinf's own checks on a compiled job, run in the RLinf environment (``python -m agentbridge_rlinf.validate JOB``).

* the job's Hydra config composed as ``launch.sh`` composes it (Hydra, with the job's path overrides);
* ``rlinf.config.validate_reasoning_cfg``: RLinf's reasoning-task validator (log-prob source, batch sizes,
  ``runner.seq_length`` against ``data.max_prompt_length``, and ``validate_rollout_cfg``: the rollout backend and
  ``SupportedModel`` of ``rollout.model.model_type``);
* the algorithm keys against RLinf's own registries (``ADV_REGISTRY``, ``LOSS_REGISTRY``) and loss aggregations;
* agentbridge's side: the driver's agent for the job's tokenizer, and the agent-loop worker importing.

Not run here: ``rlinf.config.validate_cfg`` as a whole (it starts a Ray cluster and, for Megatron, needs Megatron):
that is the job environment's check, run by the job's entry before it builds any worker.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agentbridge import adapter as kit
from agentbridge.adapter import Problem
from agentbridge.spec import Spec, recipe
from agentbridge_rlinf.config import CONFIG_NAME, path_overrides

LOSS_AGG = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")


def compose_job(job_dir: Path, model: str) -> Any:
    """The job's config as the entry composes it from ``launch.sh``'s command line (unresolved)."""
    job_dir = Path(job_dir).resolve()
    return kit.compose_hydra(job_dir, CONFIG_NAME,
                             path_overrides(str(job_dir), model, has_eval=(job_dir / "data" / "eval.jsonl").is_file()))


def _algorithm(cfg: Any) -> list[Problem]:
    import rlinf.algorithms.advantages  # noqa: F401 - registers RLinf's advantages
    import rlinf.algorithms.losses  # noqa: F401 - registers RLinf's losses
    from rlinf.algorithms.registry import ADV_REGISTRY, LOSS_REGISTRY

    algo = cfg.algorithm
    problems = []
    if str(algo.adv_type).lower() not in ADV_REGISTRY:
        problems.append(Problem("algorithm.adv_type", f"RLinf registers no advantage '{algo.adv_type}' (it has "
                                f"{', '.join(sorted(ADV_REGISTRY))})"))
    if str(algo.loss_type) not in LOSS_REGISTRY:
        problems.append(Problem("algorithm.loss_type", f"RLinf registers no loss '{algo.loss_type}' (it has "
                                f"{', '.join(sorted(LOSS_REGISTRY))})"))
    if algo.loss_agg_func not in LOSS_AGG:
        problems.append(Problem("algorithm.loss_agg_func", f"must be one of {', '.join(LOSS_AGG)}"))
    return problems


def semantics_of(cfg: Any, spec: Any = None) -> dict[str, str]:
    """What RLinf will do, read from the composed and validated config (and, with the job's ``spec``, the overlong
    shaping of agentbridge's rollout): the recipe aspects of ``agentbridge.compare.semantics`` (entropy bonus,
    overlong, grad clip, batch, LoRA), in their shared words, then `` · `` and RLinf's own names."""
    algo, actor = cfg.algorithm, cfg.actor
    bonus = float(algo.get("entropy_bonus") or 0)
    on = bool(algo.get("calculate_entropy")) and bonus > 0  # FSDPActor.calculate_entropy_loss
    norm = actor.optim.get("clip_grad")
    prompts, n, mini = cfg.data.rollout_batch_size, algo.group_size, algo.get("n_minibatches") or 1
    out = {
        "entropy bonus": f"{recipe.entropy_words(bonus if on else 0)} · algorithm.entropy_bonus {bonus:g}, "
                         f"calculate_entropy {algo.get('calculate_entropy')}",
    }
    if spec is not None:
        out["overlong"] = recipe.overlong_words(spec.algorithm.overlong)
    out["grad clip"] = f"{recipe.grad_clip_words(norm)} · actor.optim.clip_grad {norm}"
    # the reasoning actor updates once per rollout (update_epoch is the embodied actor's), in n_minibatches steps
    out["batch"] = (f"{recipe.batch_words(prompts, n, 1, mini)} · data.rollout_batch_size {prompts}, "
                    f"algorithm.group_size {n}, n_minibatches {mini}")
    lora = bool(actor.model.get("is_lora", False))
    out["LoRA"] = (f"rank {actor.model.get('lora_rank')} · actor.model.is_lora true" if lora
                   else "full fine-tuning · actor.model.is_lora false")
    return out


def _validate(job_dir: Path, start: kit.JobCheck, spec: Spec, skipped: list[str],
              semantics: dict[str, str]) -> list[Problem]:
    problems, cfg = start.problems, start.config
    from omegaconf import OmegaConf
    from rlinf.config import validate_reasoning_cfg

    try:
        cfg = validate_reasoning_cfg(cfg)
        OmegaConf.resolve(cfg)
    except (AssertionError, NotImplementedError, ValueError, KeyError) as e:
        return [*problems, Problem(f"{CONFIG_NAME}.yaml",
                                   f"RLinf's validate_reasoning_cfg rejects it: {kit.first_line(e)}")]
    except Exception as e:  # noqa: BLE001 - OmegaConf's errors (missing keys, interpolations), one line
        return [*problems, Problem(f"{CONFIG_NAME}.yaml", f"RLinf's config does not resolve: {kit.first_line(e)}")]
    problems += _algorithm(cfg)
    semantics.update(semantics_of(cfg, spec))
    try:
        from agentbridge_rlinf.rollout import AgentBridgeAgentLoopWorker  # noqa: F401
    except ImportError as e:
        problems.append(Problem("agentloop", f"agentbridge's agent-loop worker does not import here: "
                                f"{kit.first_line(e)}"))
    skipped.append("rlinf.config.validate_cfg (Ray cluster, placement, FSDP/Megatron actor): run by the job's entry "
                   "on the cluster")
    _, agent_problems = kit.agent_check(spec, start.tokenizer)
    return problems + agent_problems


# muted: rlinf.config sets the root logger's level
validate_job = kit.job_validator("agentbridge_rlinf.backend:RlinfBackend", _validate, """Every problem RLinf (or
agentbridge's side of the job) finds, one line each; RLinf's chatter muted. ``semantics`` receives what the validated
config will do (:func:`semantics_of`).""", compose=compose_job)

if __name__ == "__main__":
    sys.exit(kit.validator_main(validate_job, "python -m agentbridge_rlinf.validate"))

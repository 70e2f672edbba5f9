"""ROLL's own checks on a compiled job, run in the ROLL environment (``python -m agentbridge_roll.validate JOB``).

* the job's Hydra config composed as ``launch.sh`` composes it (Hydra, with the job's path overrides);
* ROLL's ``AgenticConfig`` built from it with ``dacite.from_dict``, as ROLL's ``start_agentic_pipeline.py`` does:
  field types and ``Literal`` choices (``adv_estimator``, ``loss_agg_mode``, strategies), and ``__post_init__``
  (batch and group divisibility, env slots per worker, ``device_mapping``, generating arguments);
* the classes the config names import in ROLL's way (``safe_import_class``): each env manager, the group filter,
  and the ``llm_proxy.proxy_type`` in ROLL's proxy registry;
* agentbridge's side: each env manager's spec and tasks load, the driver's budgets fit ROLL's ``sequence_length``,
  and the driver's agent for the job's tokenizer.

Not run here: ROLL's ``AgenticPipeline`` itself (it places workers on GPUs): that is the job environment's check.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

from agentbridge import adapter as kit
from agentbridge.adapter import Problem
from agentbridge.spec import Spec, SpecError, load_spec, recipe
from agentbridge_roll import ROLL_SOURCE, keep_roll_logs_out_of_cwd
from agentbridge_roll.config import CONFIG_NAME, path_overrides

INSTALL = ("put a ROLL checkout on PYTHONPATH in an environment with ROLL's requirements and agentbridge-roll[cpu] "
           "(see adapters/roll/README.md)")


def compose_job(job_dir: Path, model: str, extra: list[str] | None = None) -> Any:
    """The job's config as the entry composes it from ``launch.sh``'s command line (plus ``extra`` overrides)."""
    job_dir = Path(job_dir).resolve()
    overrides = path_overrides(str(job_dir), model, has_eval=(job_dir / "data" / "eval.jsonl").is_file())
    return kit.compose_hydra(job_dir, CONFIG_NAME, [*overrides, *(extra or [])])


def build_config(cfg: Any) -> Any:
    """ROLL's ``AgenticConfig`` of a composed config (``dacite.from_dict``, running its ``__post_init__``), with
    ROLL's log lines muted."""
    from dacite import from_dict
    from omegaconf import OmegaConf
    from roll.pipeline.agentic.agentic_config import AgenticConfig

    tree = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(tree, dict):
        raise ValueError("the job's config is not a mapping")
    data = {str(key): value for key, value in tree.items() if key != "hydra"}
    with _quiet():
        return from_dict(data_class=AgenticConfig, data=data)


@contextlib.contextmanager
def _quiet() -> Any:
    roll = logging.getLogger("roll")
    level = roll.level
    roll.setLevel(logging.ERROR)
    try:
        with kit.muted():
            yield
    finally:
        roll.setLevel(level)


def _classes(config: Any) -> list[Problem]:
    """The classes the config names, imported as ROLL imports them."""
    from roll.pipeline.agentic.llm_proxy import LLM_PROXY_REGISTRY
    from roll.pipeline.agentic.llm_proxy.policy_proxy import PolicyProxy
    from roll.utils.import_utils import safe_import_class

    problems = []
    for name in ("train_env_manager", "val_env_manager"):
        workers = getattr(config, name)
        proxy = workers.llm_proxy.proxy_type
        if proxy not in LLM_PROXY_REGISTRY:
            known = ", ".join(sorted(LLM_PROXY_REGISTRY))
            problems.append(Problem(f"{name}.llm_proxy.proxy_type", f"ROLL registers no proxy '{proxy}' (it has "
                                    f"{known})"))
        elif not issubclass(LLM_PROXY_REGISTRY[proxy], PolicyProxy):
            problems.append(Problem(f"{name}.llm_proxy.proxy_type", f"'{proxy}' does not generate from token ids; "
                                    "agentbridge's env manager is token in, token out: use 'policy' (ROLL's engines)"))
        if safe_import_class(workers.group_filter_cls) is None:
            problems.append(Problem(f"{name}.group_filter_cls", f"'{workers.group_filter_cls}' does not import"))
    for tag, env in config.custom_envs.items():
        cls = env.get("env_manager_cls", "")
        if safe_import_class(cls) is None:
            problems.append(Problem(f"custom_envs.{tag}.env_manager_cls", f"'{cls}' does not import here"))
    return problems


def _envs(config: Any) -> list[Problem]:
    """Each agentbridge env slot's spec and tasks load and its budgets fit ROLL's ``sequence_length``."""
    from agentbridge.adapter.rollout import Limits, fit_limits, read_tasks_jsonl

    problems = []
    for tag, env in config.custom_envs.items():
        settings = env.get("env_config", {})
        if "spec_path" not in settings:
            continue  # not one of agentbridge's env slots
        where = f"custom_envs.{tag}.env_config"
        try:
            spec = load_spec(str(settings["spec_path"]))
            tasks = read_tasks_jsonl(str(settings["data_path"]))
        except (SpecError, OSError, ValueError) as e:
            problems.append(Problem(where, kit.first_line(e)))
            continue
        if not tasks:
            problems.append(Problem(f"{where}.data_path", "no tasks"))
        a = spec.agent
        try:
            fit_limits(Limits(max_turns=a.max_turns, max_prompt_tokens=a.max_prompt_tokens,
                              max_response_tokens=a.max_response_tokens, max_tokens_per_turn=a.max_tokens_per_turn),
                       max_total=int(config.sequence_length))
        except ValueError as e:
            problems.append(Problem("sequence_length", kit.first_line(e)))
    return problems


def semantics_of(config: Any, spec: Any = None) -> dict[str, str]:
    """What ROLL will do, read from its ``AgenticConfig`` (and, with the job's ``spec``, the overlong shaping of
    agentbridge's rollout): the recipe aspects of ``agentbridge.compare.semantics`` (entropy bonus, overlong, grad
    clip, batch, LoRA), in their shared words, then `` · `` and ROLL's own names."""
    coef, norm = float(config.entropy_loss_coef or 0), config.max_grad_norm
    out = {"entropy bonus": f"{recipe.entropy_words(max(coef, 0))} · entropy_loss_coef {coef:g}"}
    if spec is not None:
        out["overlong"] = recipe.overlong_words(spec.algorithm.overlong)
    out["grad clip"] = f"{recipe.grad_clip_words(norm)} · max_grad_norm {norm}"
    # rollout_batch_size counts trajectories; an optimizer step takes per_device x accumulation x workers of them
    train, n = config.actor_train, config.train_env_manager.group_size
    args = train.training_args
    step = args.per_device_train_batch_size * args.gradient_accumulation_steps * max(1, train.world_size or 1)
    mini = max(1, config.rollout_batch_size // step)
    out["batch"] = (f"{recipe.batch_words(config.rollout_batch_size // n, n, config.ppo_epochs, mini)} · "
                    f"rollout_batch_size {config.rollout_batch_size} trajectories, {step} per optimizer step, "
                    f"ppo_epochs {config.ppo_epochs}")
    model = train.model_args
    targets = model.lora_target  # LoRA is on when it is set (after __post_init__: a list, or a regex string)
    if not targets:
        out["LoRA"] = "full fine-tuning · actor_train.model_args.lora_target null"
    else:
        names = targets if isinstance(targets, str) else " ".join(sorted(targets))
        words = recipe.lora_words(model.lora_rank, model.lora_alpha, "all-linear" if names == "all" else names,
                                  float(model.lora_dropout or 0))
        out["LoRA"] = (f"{words} · lora_target {targets}, lora_rank {model.lora_rank}, lora_alpha {model.lora_alpha}")
    return out


def _import_roll() -> None:
    """ROLL imported as its pipeline imports it, its logs kept out of the working directory and muted."""
    keep_roll_logs_out_of_cwd()
    with _quiet():
        import roll.pipeline.agentic.agentic_config  # noqa: F401


def _validate(job_dir: Path, start: kit.JobCheck, spec: Spec, skipped: list[str],
              semantics: dict[str, str]) -> list[Problem]:
    problems = start.problems
    try:
        config = build_config(start.config)
    except Exception as e:  # noqa: BLE001 - dacite's type errors and AgenticConfig's assertions, one line
        return [*problems, Problem(f"{CONFIG_NAME}.yaml", f"ROLL's AgenticConfig rejects it: {kit.first_line(e)}")]
    problems += _classes(config) + _envs(config)
    semantics.update(semantics_of(config, spec))
    skipped.append("ROLL's AgenticPipeline (workers placed on GPUs by device_mapping): run by the job's entry")
    _, agent_problems = kit.agent_check(spec, start.tokenizer)
    unique = {str(p): p for p in problems + agent_problems}  # the train and eval slots share spec and lengths
    return list(unique.values())


validate_job = kit.job_validator("agentbridge_roll.backend:RollBackend", _validate, """Every problem ROLL (or
agentbridge's side of the job) finds, one line each; ROLL's chatter muted. ``semantics`` receives what the built
``AgenticConfig`` will do (:func:`semantics_of`).""", install=INSTALL, importing=_import_roll, source=ROLL_SOURCE,
                                 mute=False, compose=compose_job)

if __name__ == "__main__":
    sys.exit(kit.validator_main(validate_job, "python -m agentbridge_roll.validate"))

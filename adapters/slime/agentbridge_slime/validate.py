"""slime's own checks on a compiled job, run where slime imports (``python -m agentbridge_slime.validate JOB``).

The job's ``train.py`` arguments (``agentbridge_slime.args``, as ``launch.sh`` builds them) go through slime's own
``parse_args`` steps, minus the one that needs Megatron-LM:

* slime's pre-parse (``_pre_parse_mode``: train backend, debug modes);
* SGLang's flags with slime's ``add_sglang_arguments`` (SGLang's own ``ServerArgs.add_cli_args``, prefixed);
* slime's flags with ``get_slime_extra_args_provider()`` on a parser that stands in for Megatron's: it declares only
  the Megatron flags the job passes or slime's validator reads (:data:`MEGATRON_FLAGS`); Megatron's parser and
  ``megatron_validate_args`` need a Megatron-LM checkout, so the job's entry runs them on the cluster;
* ``slime_validate_args`` (which also applies ``--custom-config-path``) and slime's SGLang ``validate_args``;
* agentbridge's side: the generate function imports and finds the job's spec through ``args``, and the driver's
  agent renders the job's episodes with the model's chat template.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any, NoReturn

from agentbridge import adapter as kit
from agentbridge.adapter import Problem
from agentbridge.spec import Spec, recipe
from agentbridge_slime import SLIME_PIN

# the Megatron-LM flags the job passes or slime_validate_args reads (Megatron's own parser needs Megatron-LM)
MEGATRON_FLAGS: dict[str, dict[str, Any]] = {
    "--no-load-optim": {"action": "store_true"},
    "--no-load-rng": {"action": "store_true"},
    "--finetune": {"action": "store_true"},
    "--ckpt-step": {"type": int, "default": None},
    "--optimizer": {"type": str, "choices": ["adam", "sgd"], "default": "adam"},
    "--lr-decay-style": {"type": str, "choices": ["constant", "linear", "cosine", "inverse-square-root", "WSD"],
                         "default": "linear"},
    "--lr-warmup-iters": {"type": int, "default": 0},
    "--weight-decay": {"type": float, "default": 0.01},
    "--adam-beta1": {"type": float, "default": 0.9},
    "--adam-beta2": {"type": float, "default": 0.999},
    "--bf16": {"action": "store_true"},
    "--tensor-model-parallel-size": {"type": int, "default": 1},
    "--attention-dropout": {"type": float, "default": 0.1},
    "--hidden-dropout": {"type": float, "default": 0.1},
    "--accumulate-allreduce-grads-in-fp32": {"action": "store_true"},
    "--attention-softmax-in-fp32": {"action": "store_true"},
    "--clip-grad": {"type": float, "default": 1.0},  # Megatron's gradient clip (semantics_of: "grad clip")
}
PLACEHOLDER_RUN_DIR = "/tmp/agentbridge-slime-check"  # where checkpoints would go: only named, never written
KL_ESTIMATORS = {"k1": "k1", "k2": "k2", "k3": "k3", "low_var_kl": "k3"}


class ArgumentProblem(ValueError):
    """argparse's complaint about the job's arguments, as an exception (argparse would exit)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ArgumentProblem(message)


def parse_job(job_dir: Path, model: str, run_dir: str = PLACEHOLDER_RUN_DIR,
              unchecked: list[str] | None = None) -> argparse.Namespace:
    """slime's ``args`` for the job, through slime's own parsers and ``slime_validate_args`` (see the module doc).
    Flags none of the parsers declares (Megatron's, when a user adds them) are listed in ``unchecked``. Raises
    :class:`ArgumentProblem`, or what slime's validators raise (AssertionError, ValueError, FileNotFoundError)."""
    from slime.backends.sglang_utils.arguments import add_sglang_arguments
    from slime.backends.sglang_utils.arguments import validate_args as sglang_validate_args
    from slime.utils.arguments import _pre_parse_mode, get_slime_extra_args_provider, slime_validate_args

    from agentbridge_slime.args import job_argv

    argv = job_argv(Path(job_dir), model, run_dir)
    saved = sys.argv
    sys.argv = ["train.py", *argv]
    try:
        pre = _pre_parse_mode()  # slime's own pre-parse reads sys.argv, as train.py's does
    finally:
        sys.argv = saved
    sglang_parser = _Parser(add_help=False, allow_abbrev=False)
    add_sglang_arguments(sglang_parser)
    gpus_per_engine = argv[argv.index("--rollout-num-gpus-per-engine") + 1] \
        if "--rollout-num-gpus-per-engine" in argv else 1
    sglang_parser.set_defaults(sglang_tensor_parallel_size=int(gpus_per_engine))
    sglang_ns, _ = sglang_parser.parse_known_args(argv)
    parser = _Parser(add_help=False, allow_abbrev=False)
    for flag, kwargs in MEGATRON_FLAGS.items():
        parser.add_argument(flag, **kwargs)
    get_slime_extra_args_provider()(parser)
    args, rest = parser.parse_known_args(argv)
    sglang_flags = {flag for action in sglang_parser._actions for flag in action.option_strings}
    pre_flags = {"--train-backend", "--debug-rollout-only", "--debug-train-only", "--load-debug-rollout-data"}
    left = [a for a in rest if a.startswith("--") and a.split("=")[0] not in sglang_flags | pre_flags]
    if unchecked is not None:
        unchecked += left
    for source in (pre, sglang_ns):
        for key, value in vars(source).items():
            setattr(args, key, value)
    slime_validate_args(args)
    sglang_validate_args(args)
    return args


def semantics_of(args: Any, spec: Any = None) -> dict[str, str]:
    """What slime will do, read from its parsed and validated ``args`` (and, with the job's ``spec``, the overlong
    shaping of agentbridge's rollout): the aspects of ``agentbridge.compare.semantics``, in their shared words, then
    `` · `` and slime's own names."""
    est = args.advantage_estimator
    advantage = {"grpo": "r - group mean", "gspo": "r - group mean", "cispo": "r - group mean",
                 "reinforce_plus_plus": "whitened returns", "reinforce_plus_plus_baseline": "r - group mean, whitened",
                 "ppo": "GAE"}.get(est, str(est))
    if est in ("grpo", "gspo", "cispo"):
        advantage += ", / group std" if args.grpo_std_normalization else ", no std"
    reducer = args.custom_pg_loss_reducer_function_path
    aggregation = ("seq-mean-token-sum-norm" if reducer and reducer.endswith("dr_grpo_pg_loss_reducer") else
                   "token-mean" if args.calculate_per_token_loss else "seq-mean-token-mean")
    kl = []
    estimator = KL_ESTIMATORS.get(args.kl_loss_type, args.kl_loss_type)  # one --kl-loss-type for loss and reward
    if args.use_kl_loss and args.kl_loss_coef:
        kl.append(f"{estimator} in the loss, coef {args.kl_loss_coef}")
    if args.kl_coef:
        kl.append(f"{estimator} in the reward, coef {args.kl_coef}")
    level = "sequence" if est == "gspo" else "token"
    mini = max(1, args.rollout_batch_size * args.n_samples_per_prompt // args.global_batch_size)
    return {
        "advantage": f"{advantage} · --advantage-estimator {est}",
        "loss aggregation": aggregation + (f" · --custom-pg-loss-reducer-function-path {reducer}" if reducer else
                                           f" · --calculate-per-token-loss {args.calculate_per_token_loss}"),
        "clip": f"({args.eps_clip}, {args.eps_clip_high}) on {level} ratios · --eps-clip, --eps-clip-high",
        "KL": "; ".join(kl) or "none",
        "entropy bonus": f"{recipe.entropy_words(args.entropy_coef)} · --entropy-coef {args.entropy_coef}",
        "IS correction": is_semantics(args),
        "group filtering": ("groups with equal rewards dropped" if args.dynamic_sampling_filter_path else "none")
                           + (f" · {args.dynamic_sampling_filter_path}" if args.dynamic_sampling_filter_path else ""),
        "sampling": recipe.sampling_words(args.rollout_temperature, args.rollout_top_p, args.rollout_top_k),
        "lengths": f"prompt {args.rollout_max_prompt_len}, response {args.rollout_max_response_len} tokens · "
                   f"--rollout-max-context-len {args.rollout_max_context_len}",
        # agentbridge's rollout masks and penalises as algorithm.overlong says, the same on every backend
        **({} if spec is None else {"overlong": recipe.overlong_words(spec.algorithm.overlong)}),
        "optimizer": f"{recipe.optimizer_words(args.lr, args.lr_decay_style)} · {args.lr_warmup_iters} warmup iters",
        "grad clip": f"{recipe.grad_clip_words(args.clip_grad)} · --clip-grad {args.clip_grad}",
        # slime trains each rollout once (no epochs flag), in global batches of --global-batch-size samples
        "batch": f"{recipe.batch_words(args.rollout_batch_size, args.n_samples_per_prompt, 1, mini)} · "
                 f"--global-batch-size {args.global_batch_size} samples",
        "LoRA": "full fine-tuning · Megatron trains every parameter (slime has no LoRA)",
    }


def is_semantics(args: Any) -> str:
    """The ``IS correction`` aspect of slime's args: ``--use-tis`` with slime's own TIS (token, truncate at
    ``--tis-clip``), its IcePop (token, mask above it) or its MIS helper (``tis_level`` / ``tis_mode`` /
    ``tis_upper_bound`` from the custom config), in the shared words of ``spec.recipe.is_correction_words``."""
    if not args.use_tis:
        return "none · --use-tis off"
    path = args.custom_tis_function_path
    if path is None:
        words = recipe.is_correction_words("token", "truncate", args.tis_clip)
        return f"{words} · --use-tis, --tis-clip {args.tis_clip:g}"
    if path.endswith(".icepop_function"):
        return f"{recipe.is_correction_words('token', 'mask', args.tis_clip)} · --use-tis, {path}"
    if path.endswith(".compute_mis_weights_with_cp"):
        words = recipe.is_correction_words(getattr(args, "tis_level", "?"), getattr(args, "tis_mode", "?"),
                                           float(getattr(args, "tis_upper_bound", 0.0)))
        return f"{words} · --use-tis, {path}"
    return f"custom · --custom-tis-function-path {path}"


def rollout_semantics(job_dir: Path) -> str:
    """The ``rollout mode`` aspect of a slime job: the trainer its launch.sh runs (``train_async.py``: one step off;
    ``train.py``: synchronous), in the shared words of ``spec.recipe.rollout_words``."""
    from agentbridge_slime.config import ASYNC_ENTRY

    launch = (Path(job_dir) / "launch.sh").read_text() if (Path(job_dir) / "launch.sh").is_file() else ""
    if f"$SLIME_DIR/{ASYNC_ENTRY}" in launch:
        return f"{recipe.rollout_words('one_step_off')} · {ASYNC_ENTRY}"
    return f"{recipe.rollout_words('sync')} · train.py"


def _validate(job_dir: Path, start: kit.JobCheck, spec: Spec, skipped: list[str],
              semantics: dict[str, str]) -> list[Problem]:
    problems, model, tokenizer = start.problems, start.model, start.tokenizer
    import slime

    skipped.append(f"slime imported from {Path(slime.__file__).parent.parent}; this adapter was verified against "
                   f"{SLIME_PIN}")
    unchecked: list[str] = []
    try:
        args = parse_job(job_dir, model, unchecked=unchecked)
    except ImportError as e:  # slime's source is here, the packages it imports are not
        return [*problems, Problem("slime", f"slime imports here but not what its parser needs ({kit.first_line(e)}); "
                                   "install agentbridge-slime[cpu] and sglang==0.5.23 --no-deps (README.md)")]
    except ArgumentProblem as e:
        return [*problems, Problem("slime_job.yaml", f"slime's argument parser rejects it: {kit.first_line(e)}")]
    except (AssertionError, ValueError, FileNotFoundError, KeyError) as e:
        return [*problems, Problem("slime_job.yaml", f"slime's slime_validate_args rejects it: {kit.first_line(e)}")]
    semantics.update(semantics_of(args, spec))
    semantics["rollout mode"] = rollout_semantics(job_dir)
    skipped.append("Megatron-LM's parser and megatron_validate_args (model architecture, parallelism): run by "
                   "slime's train.py on the cluster" + (f"; flags only Megatron declares: {', '.join(unchecked)}"
                                                       if unchecked else ""))
    try:
        from agentbridge_slime.rollout import spec_path

        if spec_path(args) != job_dir / "spec.yaml":
            problems.append(Problem("agentbridge.yaml", f"slime's args point the generate function at "
                                    f"{spec_path(args)}, not the job's spec"))
    except (ImportError, ValueError) as e:
        problems.append(Problem("custom-generate-function-path", kit.first_line(e)))
    _, agent_problems = kit.agent_check(spec, tokenizer)
    return problems + agent_problems


validate_job = kit.job_validator("agentbridge_slime.backend:SlimeBackend", _validate, """Every problem slime (or
agentbridge's side of the job) finds, one line each; slime's chatter muted. ``semantics`` receives what the parsed
arguments will do (:func:`semantics_of`).""", needs_model=True, importing=lambda: importlib.import_module("slime"),
                                 install=f"put a checkout of {SLIME_PIN} on PYTHONPATH in an environment with "
                                         "agentbridge-slime[cpu] (adapters/slime/README.md)")

if __name__ == "__main__":
    sys.exit(kit.validator_main(validate_job, "python -m agentbridge_slime.validate"))

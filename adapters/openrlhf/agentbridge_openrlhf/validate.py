"""Validate a compiled OpenRLHF job on CPU with OpenRLHF's own parser, plus agentbridge's own checks.

``openrlhf.cli.train_ppo_ray`` builds its argparse parser inline under ``if __name__ == "__main__":``, so it
cannot be imported. ``parse_args`` compiles that block from the installed source without its final
``train(args)`` call and runs it: the real parser, ``hierarchize`` and every post-parse assert. That needs
torch and transformers, not Ray, vLLM or DeepSpeed.

Run in the OpenRLHF environment: ``python -m agentbridge_openrlhf.validate JOB [--json]`` (``--dump-flags``: the
installed parser's flags as JSON).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentbridge import adapter as kit
from agentbridge.adapter import Problem
from agentbridge.adapter.inline_cli import CommandLineRejected, main_block, run_statements
from agentbridge.spec import Spec, recipe
from agentbridge_openrlhf.config import OPENRLHF_PIN, OWNED

ArgsError = CommandLineRejected  # OpenRLHF's parser or a post-parse check rejected the command line (one line)


def _main_block(module: str = "openrlhf.cli.train_ppo_ray") -> tuple[str, list[ast.stmt]]:
    return main_block(module, f"install openrlhf=={OPENRLHF_PIN}", f"openrlhf {OPENRLHF_PIN}")


def _exec(statements: list[ast.stmt], origin: str, argv: list[str], prog: str = "train_ppo_ray",
          names: dict[str, Any] | None = None) -> dict[str, Any]:
    """The block's statements run on ``argv`` with the names train_ppo_ray's own imports give them."""
    return run_statements(statements, origin, argv, prog, {"argparse": argparse, "datetime": datetime.datetime,
                                                            "os": os, **(names or {})})


def parse_args(argv: list[str]) -> Any:
    """What ``train(args)`` would receive for ``argv``; raises ``ArgsError`` with OpenRLHF's one-line reason."""
    origin, body = _main_block()
    statements = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                                          and getattr(s.value.func, "id", "") == "train")]
    return _exec(statements, origin, argv)["args"]


def parse_reward_server_args(argv: list[str]) -> Any:
    """What ``openrlhf.cli.serve_rm`` would serve with ``argv``: its own parser (its ``__main__`` block up to
    ``args = hierarchize(...)``, from the installed source; the server itself is not started). Raises ``ArgsError``
    with argparse's one-line reason."""
    from openrlhf.utils.config import hierarchize

    origin, body = _main_block("openrlhf.cli.serve_rm")
    upto: list[ast.stmt] = []
    for statement in body:
        upto.append(statement)
        if isinstance(statement, ast.Assign) and getattr(statement.targets[0], "id", "") == "args":
            break
    return _exec(upto, origin, argv, prog="serve_rm", names={"hierarchize": hierarchize})["args"]


def reward_server_problems(job_dir: Path, rm_path: str | None) -> list[Problem]:
    """The job's reward-model server (``manifest.reward_server``) through serve_rm's own parser, and its model:
    a sequence-classification checkpoint (what serve_rm's ``get_llm_for_sequence_regression`` loads)."""
    path = job_dir / "manifest.json"  # written by agentbridge's compile, with the reward server's command
    command = json.loads(path.read_text()).get("reward_server") if path.is_file() else None
    if not command:
        return []
    argv = [rm_path or "@RM@" if a == "@RM@" else a for a in command[3:]]
    try:
        args = parse_reward_server_args([*argv, "--port", "18500"])
    except ArgsError as e:
        return [Problem("launch.sh", f"OpenRLHF {OPENRLHF_PIN}'s serve_rm rejects the reward server's flags: {e}")]
    config = Path(str(args.reward.model_name_or_path)) / "config.json"
    if rm_path and config.is_file():
        architectures = json.loads(config.read_text()).get("architectures") or []
        if architectures and not any(a.endswith("ForSequenceClassification") or a.endswith("RewardModel")
                                     for a in architectures):
            return [Problem("reward", f"core/reward_model path {rm_path}: a {architectures[0]}, not a "
                                      "sequence-classification reward model (serve_rm reads its score head)")]
    return []


def dump_flags() -> dict[str, dict[str, Any]]:
    """``{dotted flag: {"nargs", "default", "choices"}}`` of the installed parser (for pinning and diffing)."""
    origin, body = _main_block()
    upto: list[ast.stmt] = []
    for s in body:
        if isinstance(s, ast.Assign) and getattr(s.targets[0], "id", "") == "args":
            break
        upto.append(s)
    parser = _exec(upto, origin, [])["parser"]
    out: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        if action.dest == "help":
            continue
        name = next((f for f in action.option_strings if f.startswith("--")), action.option_strings[0])
        default = None if action.dest.endswith("run_name") else action.default  # a timestamp
        out[name.removeprefix("--")] = {"nargs": action.nargs, "default": default, "choices": action.choices}
    return out


def job_argv(job_dir: Path, model: str | None = None) -> list[str]:
    """The exact argv ``launch.sh`` passes to ``train_ppo_ray`` (bash expands it: ``launch.sh --print-args``)."""
    env = {**os.environ, "PYTHON": sys.executable}
    if model is not None:
        env["MODEL"] = model
    result = subprocess.run(["bash", str(job_dir / "launch.sh"), "--print-args"], capture_output=True, env=env,
                            timeout=600)
    if result.returncode != 0:
        tail = (result.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise ArgsError(f"launch.sh --print-args failed (exit {result.returncode}): {tail}")
    return [a for a in result.stdout.decode().split("\0") if a != ""]


def flag_of(args: Any, dotted: str) -> Any:
    """The parsed value of the dotted flag ``dotted`` (``actor.eps_clip_low_high``) in OpenRLHF's ``args``, or None."""
    obj = args
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj


_LONGEST: dict[str, tuple[int, str]] = {}


def longest_prompt(spec: Any, tokenizer: Any) -> tuple[int, str]:
    """Token count and task id of the longest prompt the driver renders (system prompt, tools, task, images)."""
    import asyncio

    from agentbridge.spec import spec_hash

    key = spec_hash(spec)
    if key in _LONGEST:
        return _LONGEST[key]

    from agentbridge.adapter.rollout import Agent, load_tasks, prompt_messages

    agent = Agent(spec, tokenizer)

    async def one(task: Any) -> int:
        if task.data.get("images"):  # the dataset's image key: OpenRLHF loads them for the executor
            from openrlhf.utils.vlm_utils import load_images

            task.images = load_images(task.data["images"])
        env = agent.make_env(task)
        try:
            messages = await env.reset(task)
        finally:
            await env.close()
        opening = prompt_messages(spec.agent.system_prompt)
        return len(agent.renderer.encode(agent.renderer.render_text([*opening, *messages],
                                                                    add_generation_prompt=True)))

    async def all_tasks() -> tuple[int, str]:
        best = (0, "")
        for split in ("train", "eval"):
            for task in load_tasks(spec, split):
                best = max(best, (await one(task), task.id))
        return best

    _LONGEST[key] = asyncio.run(all_tasks())
    return _LONGEST[key]


def semantics_of(args: Any, spec: Any = None) -> dict[str, str]:
    """What OpenRLHF will do, read from its parsed arguments (and, with the job's ``spec``, the overlong shaping of
    agentbridge's rollout): the aspects of ``agentbridge.compare.semantics``, in their shared words, then `` · `` and
    OpenRLHF's own names."""
    def f(name: str) -> Any:
        return flag_of(args, name)

    low, high = f("actor.eps_clip_low_high")
    estimator = f("algo.advantage.estimator")
    advantage = {"group_norm": "r - group mean", "rloo": "r - mean of the others", "dr_grpo": "r - group mean",
                 "reinforce": "whitened returns", "reinforce_baseline": "r - group mean, whitened",
                 "gae": "GAE"}.get(estimator, str(estimator))
    if estimator == "group_norm":
        advantage += ", no std" if f("algo.advantage.no_std_norm") else ", / group std"
    kl = "none"
    if float(f("algo.kl.init_coef") or 0) > 0:
        where = "in the loss" if f("algo.kl.use_loss") else "in the reward"
        kl = f"{f('algo.kl.estimator')} {where}, coef {f('algo.kl.init_coef')}"
    level = "sequence" if f("actor.policy_loss_type") == "gspo" else "token"
    return {
        "advantage": f"{advantage} · estimator {estimator}",
        "loss aggregation": str(f("actor.loss_agg_mode")),
        "clip": f"({low}, {high}) on {level} ratios · policy_loss_type {f('actor.policy_loss_type')}",
        "KL": kl,
        "entropy bonus": f"{recipe.entropy_words(f('actor.entropy_coef'))} · actor.entropy_coef "
                         f"{f('actor.entropy_coef')}",
        "IS correction": _is_correction(f),
        "rollout mode": _rollout_mode(f),
        "group filtering": (f"groups outside reward range {f('algo.dynamic_filtering_range')} dropped"
                            if f("algo.dynamic_filtering_enable") else "none"),
        "sampling": recipe.sampling_words(f("rollout.temperature"), f("rollout.top_p"), f("rollout.top_k")),
        "lengths": f"prompt + response {f('data.max_len')} tokens, {f('rollout.max_new_tokens')} new tokens per turn",
        **({} if spec is None else {"overlong": _overlong(f, spec.algorithm.overlong)}),
        "optimizer": f"{recipe.optimizer_words(f('actor.adam.lr'), f('actor.lr_scheduler'))} · warmup ratio "
                     f"{f('actor.lr_warmup_ratio')}, {f('actor.lr_scheduler')}",
        "grad clip": f"{recipe.grad_clip_words(f('actor.max_norm'))} · actor.max_norm {f('actor.max_norm')}",
        "batch": _batch(f),
        "LoRA": _lora(f),
    }


def _batch(f: Any) -> str:
    """The batch aspect of :func:`semantics_of`: ``train.max_epochs`` passes over the step's samples in optimizer
    steps of ``train.batch_size`` samples."""
    prompts, n, train = f("rollout.batch_size"), f("rollout.n_samples_per_prompt"), f("train.batch_size")
    epochs = f("train.max_epochs") or 1
    return (f"{recipe.batch_words(prompts, n, epochs, max(1, prompts * n // train))} · train.batch_size {train} "
            f"samples, train.max_epochs {epochs}")


def _lora(f: Any) -> str:
    """The LoRA aspect of :func:`semantics_of`: DeepSpeed's adapter when ``ds.lora.rank`` > 0, else full
    fine-tuning."""
    rank = int(f("ds.lora.rank") or 0)
    if rank <= 0:
        return f"full fine-tuning · ds.lora.rank {rank}"
    words = recipe.lora_words(rank, f("ds.lora.alpha"), f("ds.lora.target_modules"), float(f("ds.lora.dropout") or 0))
    return f"{words} · ds.lora.rank {rank}, ds.lora.alpha {f('ds.lora.alpha')}"


def _overlong(f: Any, overlong: Any) -> str:
    """The overlong aspect of :func:`semantics_of`: agentbridge's rollout masks and penalises as
    ``algorithm.overlong`` says; OpenRLHF's own overlong reward (``reward.overlong_buffer_len``) is refused at
    validate."""
    return recipe.overlong_words(overlong) + f" · reward.overlong_buffer_len {f('reward.overlong_buffer_len')}"


def _is_correction(f: Any) -> str:
    """The IS-correction aspect of :func:`semantics_of` (``f``: a dotted flag's parsed value)."""
    level, mode, gating = (f(f"algo.advantage.is_correction_{k}") for k in ("level", "mode", "gating"))
    if level == "off":
        return "none · is_correction_level off"
    low, high = f("algo.advantage.is_correction_threshold")
    if level == "token" and gating == "ratio" and float(low) == 0 and f("actor.policy_loss_type") == "ppo":
        shared = recipe.is_correction_words("token", "truncate" if mode == "clip" else "mask", float(high))
    else:  # OpenRLHF's own kinds (a band, a per-sequence gate, a divergence gate, gspo's ratio): its words
        shared = f"{level} {gating} {mode} in [{low:g}, {high:g}]"
    return (f"{shared} · is_correction_level {level}, _mode {mode}, _gating {gating}, _threshold {low:g} "
            f"{high:g}")


def _rollout_mode(f: Any) -> str:
    """The rollout-mode aspect of :func:`semantics_of`: OpenRLHF's async queue is the staleness bound
    (``agentbridge_openrlhf.config.rollout_plan``), so a queue of 1 without partial rollouts is one step off."""
    asynchronous, queue, partial = bool(f("train.async_enable")), f("train.async_queue_size"), \
        bool(f("train.partial_rollout_enable"))
    if not asynchronous:
        shared = recipe.rollout_words("sync")
    elif queue == 1 and not partial:
        shared = recipe.rollout_words("one_step_off")
    else:
        shared = recipe.rollout_words("async", int(queue), partial)
    return f"{shared} · async_enable {asynchronous}, async_queue_size {queue}, partial_rollout_enable {partial}"


def _validate(job_dir: Path, start: kit.JobCheck, spec: Spec, skipped: list[str],
              semantics: dict[str, str]) -> list[Problem]:
    problems, model, tokenizer = start.problems, start.model, start.tokenizer
    try:
        argv = job_argv(job_dir, model)
        args = parse_args(argv)
    except ArgsError as e:
        return [*problems, Problem("launch.sh", f"OpenRLHF {OPENRLHF_PIN} rejects the command line: {e}")]
    semantics.update(semantics_of(args, spec))
    problems += _silent_checks(spec, args, argv, job_dir, tokenizer)
    problems += reward_server_problems(job_dir, _reward_model_path(spec))
    if tokenizer is not None:  # a hub id not on this machine has no config to read (said in skipped)
        problems += _vlm_checks(model, args)
    return problems


def _reward_model_path(spec: Spec) -> str | None:
    """The local directory of the reward model the job serves (None: none served, or not on this machine)."""
    from agentbridge_openrlhf.reward_server import served

    rm = served(spec)  # a hub id not on this machine: None, and the flags are still checked
    return None if rm is None else kit.local_model_path(rm.path)


def _vlm_checks(model: str, args: Any) -> list[Problem]:
    """The image flags must agree with how OpenRLHF loads the model: as a VLM (an ``AutoProcessor`` that builds
    ``pixel_values``) exactly when its config has a ``vision_config``."""
    from openrlhf.utils.utils import is_vlm_model

    images = int(flag_of(args, "data.max_images_per_prompt") or 0)
    vlm = is_vlm_model(model)
    if images and not vlm:
        return [Problem("data.max_images_per_prompt", f"{images} images per prompt, but OpenRLHF loads {model} as a "
                                                      "text model (no vision_config): no pixel_values would be made")]
    if vlm and not images:
        return [Problem("data.max_images_per_prompt", "0 for a vision-language model: OpenRLHF would send vLLM "
                                                      "expanded image tokens with no image limit; set "
                                                      "backend.options.max_images_per_prompt")]
    return []


def _silent_checks(spec: Any, args: Any, argv: list[str], job_dir: Path, tokenizer: Any) -> list[Problem]:
    """What OpenRLHF accepts without a word but that breaks or silently changes agentbridge episodes."""
    out: list[Problem] = []
    a = spec.agent
    for owned in OWNED:
        if f"--{owned}" not in argv:
            out.append(Problem("launch.sh", f"--{owned} is missing; the agentbridge executor needs it"))
    agent_file = Path(str(flag_of(args, "train.agent_func_path") or ""))
    if agent_file.name and not (agent_file if agent_file.is_absolute() else job_dir / agent_file).is_file():
        out.append(Problem("train.agent_func_path", f"{agent_file} does not exist"))
    max_len = int(flag_of(args, "data.max_len"))
    need = a.max_prompt_tokens + a.max_response_tokens
    if max_len < need:
        out.append(Problem("data.max_len", f"{max_len} < agent.max_prompt_tokens + agent.max_response_tokens "
                                           f"({need}); OpenRLHF would cut episodes the driver let through"))
    try:
        longest, task_id = longest_prompt(spec, tokenizer) if tokenizer is not None else (0, "")
    except Exception as e:  # noqa: BLE001 - a broken environment or template is one line
        return [*out, Problem("spec", f"cannot render the prompts: {type(e).__name__}: {str(e).splitlines()[0]}")]
    if longest > a.max_prompt_tokens:
        out.append(Problem("agent.max_prompt_tokens", f"task {task_id} renders to {longest} prompt tokens > "
                                                      f"{a.max_prompt_tokens}; raise it or shorten the prompt"))
    new = flag_of(args, "rollout.max_new_tokens")
    if new is not None and int(new) >= max_len - longest:
        out.append(Problem("rollout.max_new_tokens", f"{new} >= data.max_len {max_len} - longest prompt {longest} "
                                                     f"(task {task_id}); OpenRLHF would silently cut that prompt"))
    remote = flag_of(args, "reward.remote_url")
    if any(f.startswith("--reward.remote_url") or f.startswith("--reward.model_name_or_path") for f in argv):
        out.append(Problem("reward.remote_url", f"ignored in agent mode (OpenRLHF sets it to {remote}); "
                                                "rewards come from the spec's reward list"))
    if flag_of(args, "reward.overlong_buffer_len") is not None:
        out.append(Problem("reward.overlong_buffer_len", "counts tool tokens as response in OpenRLHF "
                                                         f"{OPENRLHF_PIN} (issue #1243); remove it"))
    for flag, want in (("rollout.temperature", a.sampling.temperature), ("rollout.top_p", a.sampling.top_p)):
        got = flag_of(args, flag)
        if got is not None and float(got) != float(want):
            out.append(Problem(flag, f"{got} differs from the spec's agent.sampling ({want}); episodes would "
                                     "sample with OpenRLHF's value"))
    return out


validate_job = kit.job_validator("agentbridge_openrlhf.backend:OpenRLHFBackend", _validate, """OpenRLHF's parser and
post-parse checks on the job's command line, then agentbridge's checks; ``semantics`` receives what the parsed command
line will do (:func:`semantics_of`).""", mute=False, install="run `agentbridge backends setup openrlhf` (flags change "
                                 "between patch releases)")


def main(argv: list[str] | None = None) -> int:
    """``JOB [--json]``: the job's problems (:func:`agentbridge.adapter.validator_main`); ``--dump-flags``: the
    installed parser's flags as JSON."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--dump-flags"]:
        print(json.dumps(dump_flags(), indent=1, default=str, sort_keys=True))
        return 0
    return kit.validator_main(validate_job, "python -m agentbridge_openrlhf.validate", args)


if __name__ == "__main__":
    sys.exit(main())

"""``train.py``'s arguments for a compiled slime job (what ``launch.sh`` runs, what the validator parses).

``python -m agentbridge_slime.args JOB --model PATH --run-dir DIR [--load PATH] [--ref-load PATH]`` prints them
NUL-separated (``mapfile -d ''`` reads them back in bash).

``--load`` defaults to the job's save directory when it holds a Megatron checkpoint
(``latest_checkpointed_iteration.txt``: what ``slime_validate_args`` calls ``load_is_megatron``; the run resumes
there, at the saved rollout + 1), else to the model, whose Hugging Face weights slime loads for the model types it
supports (``load_is_hf``: ``hf_to_megatron.supports_hf_weight_loading``; others need slime's
``tools/convert_hf_to_torch_dist.py``).
``--ref-load`` defaults to the model (the reference policy; slime loads it with the same loader). slime at
THUDM/slime@624b824, ``slime/utils/arguments.py:slime_validate_args``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from agentbridge_slime.config import CONFIG_NAME, argv, flag_name

MEGATRON_MARKER = "latest_checkpointed_iteration.txt"  # Megatron's tracker file in a checkpoint directory


def job_flags(job_dir: Path) -> dict[str, Any]:
    """The job's flag mapping (``slime_job.yaml``); ValueError with one line when it is not one."""
    path = Path(job_dir) / CONFIG_NAME
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: cannot be read as YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"{path}: must be a mapping of slime flag names to values")
    return data


def save_dir(flags: dict[str, Any], paths: dict[str, str]) -> Path | None:
    """The job's ``--save`` directory, its paths filled in (None without one)."""
    save = {flag_name(k): v for k, v in flags.items()}.get("save")
    if not isinstance(save, str):
        return None
    for name, path in paths.items():
        save = save.replace(f"${{{name}}}", path)
    return Path(save)


def job_argv(job_dir: Path, model: str, run_dir: str, load: str | None = None,
             ref_load: str | None = None) -> list[str]:
    """The job's ``train.py`` arguments, its paths filled in (``job_dir`` as given: ``submit.sh`` passes ``.``, each
    Ray worker's copy of the job); ``--load`` resumes from the save directory when it holds a checkpoint."""
    flags = job_flags(job_dir)
    paths = {"ROOT": str(job_dir), "MODEL": model, "RUN_DIR": run_dir}
    saved = save_dir(flags, paths)
    resume = saved is not None and (saved / MEGATRON_MARKER).is_file()
    paths.update(LOAD=load or (str(saved) if resume else model), REF_LOAD=ref_load or model)
    return argv(flags, paths)


def main(arguments: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentbridge_slime.args", description=__doc__)
    parser.add_argument("job")
    parser.add_argument("--model", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--load", default=None)
    parser.add_argument("--ref-load", default=None)
    ns = parser.parse_args(arguments)
    try:
        out = job_argv(Path(ns.job), ns.model, ns.run_dir, ns.load or None, ns.ref_load or None)
    except ValueError as e:
        print(f"agentbridge_slime.args: {e}", file=sys.stderr)
        return 1
    sys.stdout.write("".join(f"{a}\0" for a in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

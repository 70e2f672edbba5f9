"""``train.py``'s arguments for a compiled slime job (what ``launch.sh`` runs, what the validator parses).

``python -m agentbridge_slime.args JOB --model PATH --run-dir DIR [--load PATH] [--ref-load PATH]`` prints them
NUL-separated (``mapfile -d ''`` reads them back in bash); ``--load`` and ``--ref-load`` default to the model (slime
loads Hugging Face weights of the model types it supports; others need slime's torch_dist conversion).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from agentbridge_slime.config import CONFIG_NAME, argv


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


def job_argv(job_dir: Path, model: str, run_dir: str, load: str | None = None,
             ref_load: str | None = None) -> list[str]:
    """The job's ``train.py`` arguments, its paths filled in (``job_dir`` as given: ``submit.sh`` passes ``.``, each
    Ray worker's copy of the job)."""
    paths = {"ROOT": str(job_dir), "MODEL": model, "RUN_DIR": run_dir, "LOAD": load or model,
             "REF_LOAD": ref_load or model}
    return argv(job_flags(job_dir), paths)


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

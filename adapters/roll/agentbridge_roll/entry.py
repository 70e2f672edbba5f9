"""The ROLL job's entry: ROLL's agentic pipeline over the job's config, whose env manager is agentbridge's.

It does what ROLL's ``examples/start_agentic_pipeline.py`` does, with the job directory as the config directory:
compose the config (Hydra, with ``launch.sh``'s overrides), build ROLL's ``AgenticConfig`` with ``dacite``, start
ROLL's runtime (``roll.distributed.scheduler.initialize.init``) and run ``AgenticPipeline``.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> None:
    """``python entry.py --config-path JOB --config-name roll_job [key=value ...]`` (what ``launch.sh`` runs)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from roll.distributed.scheduler.initialize import init
    from roll.pipeline.agentic.agentic_pipeline import AgenticPipeline

    from agentbridge_roll.validate import build_config

    parser = argparse.ArgumentParser(prog="entry.py")
    parser.add_argument("--config-path", required=True, help="the job directory")
    parser.add_argument("--config-name", default="roll_job")
    args, overrides = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=args.config_path, version_base=None, job_name="agentbridge"):
        cfg = compose(config_name=args.config_name, overrides=overrides)
    config = build_config(cfg)
    init()
    AgenticPipeline(pipeline_config=config).run()

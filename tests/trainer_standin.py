"""Stand-in for a GPU trainer's program (veRL's ``main_ppo``, OpenRLHF's ``train_ppo_ray``), which cannot run on a
CPU: it records its argv and saves the model it was given where that trainer saves its trained HF model, so the
launch script's phases around it (prepare before, finish after) run for real.

    python trainer_standin.py verl|openrlhf ARGS...
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    backend, args = argv[0], argv[1:]
    Path(os.environ["STANDIN_RECORD"]).write_text(json.dumps(args))
    if backend == "openrlhf":
        model, out = args[args.index("--actor.model_name_or_path") + 1], args[args.index("--ckpt.output_dir") + 1]
        shutil.copytree(model, out)
        return
    values = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("-"))
    checkpoints = Path(values["trainer.default_local_dir"])
    shutil.copytree(values["actor_rollout_ref.model.path"], checkpoints / "global_step_3" / "actor" / "huggingface")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("3")


if __name__ == "__main__":
    main(sys.argv[1:])

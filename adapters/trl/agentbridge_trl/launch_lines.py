"""The lines of a TRL job's ``launch.sh`` (this machine) and ``submit.sh`` (``accelerate launch`` over the cluster).

Kept apart from the backend class so that the scripts' content does not depend on how the backend is built:
``TrlBackend.compile`` writes each script from one call here.
"""

from __future__ import annotations

import sys
from typing import Any

from agentbridge import adapter as kit
from agentbridge.spec import Spec
from agentbridge_trl.config import options as trl_options

FREE_PORT = "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"


def uses_deepspeed(grpo_kwargs: dict[str, Any]) -> bool:
    """Whether a job's ``GRPOConfig`` arguments (as compiled: options, plugins and overrides applied) train under
    DeepSpeed."""
    return bool(grpo_kwargs.get("deepspeed"))


def single_process_lines() -> list[str]:
    """``launch.sh``'s lines that make its one process rank 0 of a world of 1 (unless a launcher already set the
    ranks): DeepSpeed initialises torch.distributed even for one process, and without ``RANK``/``MASTER_ADDR`` it
    falls back to MPI discovery (``No module named 'mpi4py'``) instead of starting."""
    return [
        "# DeepSpeed: this one process is rank 0 of 1 (DeepSpeed looks for MPI when no launcher set the ranks)",
        'if [ -z "${RANK:-}" ]; then',
        "  export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=\"${MASTER_ADDR:-127.0.0.1}\"",
        f"  export MASTER_PORT=\"${{MASTER_PORT:-$(\"$PYTHON\" -c {kit.shell_quote(FREE_PORT)})}}\"",
        "fi",
    ]


def launch_lines(spec: Spec, entry: str, grpo_kwargs: dict[str, Any]) -> list[str]:
    """``launch.sh``: the job's entry run by ``$PYTHON`` as one process on this machine (CPU or one GPU); under
    DeepSpeed as rank 0 of 1 (:func:`single_process_lines`)."""
    return [
        "# Run this job on this machine (CPU or one GPU).",
        kit.default_line("PYTHON", sys.executable),
        kit.default_line("RUN_DIR", f"runs/{spec.name}"),
        *(single_process_lines() if uses_deepspeed(grpo_kwargs) else []),
        f'exec "$PYTHON" {entry} "$@"',
    ]


def run_dir_check_lines() -> list[str]:
    """``submit.sh``'s check that a job over several nodes writes to one run directory: an absolute ``RUN_DIR``
    (on storage every node shares), or the script stops. A relative one resolves on each node's own disk, so each
    node would keep its own ZeRO shards and checkpoints and ``--resume`` could not find them."""
    return [
        "# RUN_DIR: checkpoints (with each rank's ZeRO shards) and logs, written by ranks on every node",
        'if [ "$NUM_MACHINES" -gt 1 ]; then',
        '  case "${RUN_DIR:-}" in',
        "    /*) ;;",
        "    *) echo \"error: RUN_DIR: set it to an absolute directory on storage every node of this "
        "$NUM_MACHINES-node job shares (now: '${RUN_DIR:-}')\" >&2",
        "       exit 2 ;;",
        "  esac",
        "fi",
    ]


def submit_lines(spec: Spec, entry: str) -> list[str]:
    """``submit.sh``: ``accelerate launch`` over ``resources``; vLLM in colocate mode, or a server started on the
    last GPU. Several nodes need ``MAIN_PROCESS_IP`` and an absolute, shared ``RUN_DIR``."""
    nodes, gpus = spec.resources.nodes, max(1, spec.resources.gpus_per_node)
    options = trl_options(spec)
    lines = [
        "# Multi-GPU / multi-node: run on every node with MACHINE_RANK and MAIN_PROCESS_IP set.",
        f"NUM_MACHINES=${{NUM_MACHINES:-{nodes}}}",
        f"GPUS_PER_NODE=${{GPUS_PER_NODE:-{gpus}}}",
        "MACHINE_RANK=${MACHINE_RANK:-0}",
        'if [ "$NUM_MACHINES" -gt 1 ] && [ -z "${MAIN_PROCESS_IP:-}" ]; then',
        '  echo "error: MAIN_PROCESS_IP: set it to node 0\'s address on every node of this $NUM_MACHINES-node job" >&2',
        "  exit 2",
        "fi",
        *run_dir_check_lines(),
        "MAIN_PROCESS_IP=${MAIN_PROCESS_IP:-127.0.0.1}",
        "TRAIN_GPUS=$GPUS_PER_NODE",
        kit.default_line("RUN_DIR", f"runs/{spec.name}"),
    ]
    if options["use_vllm"] and options["vllm_mode"] == "server" and not options["vllm_server_base_url"]:
        lines += [
            "# vLLM server mode: the last GPU of node 0 serves generation, the others train.",
            "TRAIN_GPUS=$((GPUS_PER_NODE - 1))",
            'if [ "$MACHINE_RANK" = 0 ]; then',
            "  MODEL=$(\"${PYTHON:-python}\" -c 'import sys,yaml; from agentbridge.models import resolve_model_path; "
            "print(resolve_model_path(yaml.safe_load(open(sys.argv[1]))[\"model\"][\"path\"]))' \"$JOB/spec.yaml\")",
            "  CUDA_VISIBLE_DEVICES=$TRAIN_GPUS VLLM_SERVER_DEV_MODE=1 vllm serve \"$MODEL\" "
            "--weight-transfer-config '{\"backend\": \"nccl\"}' --logprobs-mode processed_logprobs "
            "--max-logprobs -1 &",
            "  trap 'kill %1' EXIT",
            "fi",
        ]
    lines += [
        "exec accelerate launch --num_machines \"$NUM_MACHINES\" --machine_rank \"$MACHINE_RANK\" \\",
        "  --main_process_ip \"$MAIN_PROCESS_IP\" --num_processes $((NUM_MACHINES * TRAIN_GPUS)) \\",
        f"  --mixed_precision bf16 {entry} \"$@\"",
    ]
    return lines

#!/usr/bin/env bash
# Create (once) the OpenRLHF 0.11.2 environment <repo>/.venv-openrlhf with `agentbridge backends setup openrlhf
# --cpu` and run the OpenRLHF adapter's tests in it.  Run from anywhere; idempotent, fast when present.
# The CPU recipe (`environment` in agentbridge_openrlhf/backend.py, built by agentbridge/backend_envs.py):
#  - torch==2.13.0 first (the CPU build; an unpinned torch would pull a multi-GB CUDA build);
#  - openrlhf==0.11.2 with --no-deps: its DeepSpeed, flash-attn and vLLM need a GPU; the CPU-usable part
#    of its dependencies is the adapter's `cpu` extra;
#  - agentbridge core, the plugins installed in .venv (math, search, gui), this adapter, pytest: one resolve, so
#    the plugins' dependencies keep OpenRLHF's pins (transformers 5.15.0, ray 2.55.0); dashscope (qwen.tiktoken);
#  - no torchvision: PyPI's build does not import beside the CPU torch
#    (agentbridge_openrlhf/standins/torchvision_gap.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VENV=$ROOT/.venv-openrlhf
[ -x .venv/bin/agentbridge ] || { echo "[openrlhf] run scripts/install.sh first (it provides agentbridge)"; exit 1; }
.venv/bin/agentbridge backends setup openrlhf --cpu --venv "$VENV" --with pytest
[ -z "${AGENTBRIDGE_SETUP_ONLY:-}" ] || exit 0   # scripts/test.sh creates the environments side by side first
"$VENV/bin/python" -c "import torch, transformers; assert torch.__version__.startswith('2.13.0'), torch.__version__; \
assert transformers.__version__ == '5.15.0', transformers.__version__"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 RAY_DEDUP_LOGS=0 TOKENIZERS_PARALLELISM=false
echo "[openrlhf] pytest adapters/openrlhf/tests"
t1=$(date +%s)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider adapters/openrlhf/tests "$@"
echo "[openrlhf] tests took $(( $(date +%s) - t1 ))s"

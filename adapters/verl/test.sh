#!/usr/bin/env bash
# Create the veRL 0.9.1 environment (.venv-verl, CPU torch) with `agentbridge backends setup verl --cpu` if needed,
# then run the veRL adapter's tests in it. The CPU recipe (`environment` in agentbridge_verl/backend.py, built by
# agentbridge/backend_envs.py): torch==2.13.0 first, then
# in one resolve with torch pinned: agentbridge core without the [hf] extra (veRL 0.9.1 pins transformers<5.11 while
# agentbridge[hf] wants >=5.15), the plugins installed in .venv (math, search, gui: their deps leave veRL's pins
# alone, so the examples' ids resolve here), agentbridge-verl[backend] (verl==0.9.1, TransferQueue==0.1.11 for veRL's
# default V1 trainer) and pytest; then the qwen.tiktoken vocabulary (dashscope wheel, no deps).
# Usage (from the repo root): bash adapters/verl/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VENV=${AGENTBRIDGE_VERL_VENV:-$ROOT/.venv-verl}
PY=$VENV/bin/python
[ -x .venv/bin/agentbridge ] || { echo "[verl] run scripts/install.sh first (it provides agentbridge)"; exit 1; }
.venv/bin/agentbridge backends setup verl --cpu --venv "$VENV" --with pytest
[ -z "${AGENTBRIDGE_SETUP_ONLY:-}" ] || exit 0   # scripts/test.sh creates the environments side by side first
"$PY" -c "import importlib.metadata as m, torch, transformers, verl, transfer_queue; print('[verl] torch', torch.__version__, '| transformers', transformers.__version__, '| verl', verl.__version__, '| TransferQueue', m.version('TransferQueue'))"
echo "[verl] pytest adapters/verl/tests"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_DEDUP_LOGS=0 TOKENIZERS_PARALLELISM=false
"$PY" -m pytest -q -p no:cacheprovider adapters/verl/tests "$@"

#!/usr/bin/env bash
# Create the veRL 0.9.1 environment (.venv-verl, CPU torch) if needed, then run the veRL adapter's tests in it.
# veRL 0.9.1 pins transformers>=5.5.3,<5.11 while agentbridge[hf] wants >=5.15, so it gets its own venv; the
# core goes in without the [hf] extra and its light tokenizer deps are installed by hand.
# Usage (from the repo root): bash adapters/verl/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VENV=${AGENTBRIDGE_VERL_VENV:-$ROOT/.venv-verl}
PY=$VENV/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1
stamp=$VENV/.agentbridge-verl-installed
if [ ! -f "$stamp" ] || [ adapters/verl/pyproject.toml -nt "$stamp" ] || [ adapters/verl/test.sh -nt "$stamp" ]; then
  start=$(date +%s)
  [ -x "$PY" ] || { echo "[verl] creating $VENV"; python3 -m venv "$VENV"; }
  pin=$VENV/torch-pin.txt
  echo "torch==2.13.0" > "$pin"   # an unpinned torch resolves to a multi-GB CUDA build; -c keeps it pinned
  pip_install() {  # quiet; drops pip's notes about this machine's local wheel indexes
    "$PY" -m pip install -q --no-compile -c "$pin" "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }
  }
  echo "[verl] installing torch==2.13.0 (CPU build)"
  pip_install torch==2.13.0
  echo "[verl] installing agentbridge core + math/search/gui plugins + agentbridge-verl[backend] (verl==0.9.1," \
    "TransferQueue==0.1.11 for veRL's default V1 trainer)"
  # the plugins' deps leave veRL's pins (transformers<5.11, torch, numpy) alone; the examples' ids resolve here
  pip_install -e "$ROOT" -e "$ROOT/plugins/math" -e "$ROOT/plugins/search" -e "$ROOT/plugins/gui" \
    -e "$ROOT/adapters/verl[backend]" pytest
  echo "[verl] installing the qwen.tiktoken vocabulary (dashscope wheel, no deps)"
  pip_install --no-deps dashscope
  touch "$stamp"
  echo "[verl] environment ready in $(( $(date +%s) - start ))s"
else
  echo "[verl] $VENV is up to date"
fi
"$PY" -c "import importlib.metadata as m, torch, transformers, verl, transfer_queue; print('[verl] torch', torch.__version__, '| transformers', transformers.__version__, '| verl', verl.__version__, '| TransferQueue', m.version('TransferQueue'))"
echo "[verl] pytest adapters/verl/tests"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_DEDUP_LOGS=0 TOKENIZERS_PARALLELISM=false
"$PY" -m pytest -q -p no:cacheprovider adapters/verl/tests "$@"

#!/usr/bin/env bash
# Create (once) the OpenRLHF 0.11.2 environment /work/main/.venv-openrlhf — really <repo>/.venv-openrlhf —
# and run the OpenRLHF adapter's tests in it.  Run from anywhere; idempotent, fast when present.
#  - torch==2.13.0 first (the CPU build; an unpinned torch would pull a multi-GB CUDA build);
#  - openrlhf==0.11.2 with --no-deps: its DeepSpeed, flash-attn and vLLM need a GPU; the CPU-usable part
#    of its dependencies is the adapter's `cpu` extra;
#  - agentbridge core, the math, search and gui plugins, this adapter (editable), dashscope (qwen.tiktoken only),
#    pytest: one resolve, so the plugins' dependencies keep OpenRLHF's pins (transformers 5.15.0, ray 2.55.0);
#  - no torchvision: PyPI's build does not import beside the CPU torch
#    (agentbridge_openrlhf/standins/torchvision_gap.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VENV=$ROOT/.venv-openrlhf
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1
# pip, without the local mirrors' "is ignored" notes and the resolver's complaint about openrlhf's GPU deps
pip() { "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v -e "is ignored: it is neither" -e "^openrlhf 0.11.2 requires" \
  -e "dependency resolver does not currently" -e "^dashscope .* requires" || true; }; return "${PIPESTATUS[0]}"; }
stamp=$VENV/.agentbridge-openrlhf-installed
want="torch==2.13.0 openrlhf==0.11.2 plugins=math,search,gui $(sha1sum adapters/openrlhf/pyproject.toml | cut -c1-12)"
t0=$(date +%s)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[openrlhf] creating $VENV"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  echo "[openrlhf] torch==2.13.0 (CPU build)"
  pip install -q torch==2.13.0
  echo "[openrlhf] openrlhf==0.11.2 (--no-deps: DeepSpeed, flash-attn and vLLM cannot run on CPU)"
  pip install -q --no-deps openrlhf==0.11.2
  echo "[openrlhf] agentbridge, math/search/gui plugins, adapter (+ OpenRLHF's CPU-usable dependencies), pytest"
  pip install -q torch==2.13.0 -e "$ROOT[hf]" -e "$ROOT/plugins/math" -e "$ROOT/plugins/search" -e "$ROOT/plugins/gui" \
    -e "$ROOT/adapters/openrlhf[cpu]" pytest
  pip install -q --no-deps dashscope   # the real Qwen2.5 vocabulary (qwen.tiktoken); only that file is used
  "$VENV/bin/python" -c "import torch, transformers, openrlhf; assert torch.__version__.startswith('2.13.0'), torch.__version__; \
assert transformers.__version__ == '5.15.0', transformers.__version__; print('[openrlhf] torch', torch.__version__, \
'transformers', transformers.__version__, 'openrlhf 0.11.2')"
  echo "$want" > "$stamp"
  echo "[openrlhf] environment ready in $(( $(date +%s) - t0 ))s"
else
  echo "[openrlhf] $VENV is up to date"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 RAY_DEDUP_LOGS=0 TOKENIZERS_PARALLELISM=false
echo "[openrlhf] pytest adapters/openrlhf/tests"
t1=$(date +%s)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider adapters/openrlhf/tests "$@"
echo "[openrlhf] tests took $(( $(date +%s) - t1 ))s"

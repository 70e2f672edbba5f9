#!/usr/bin/env bash
# Create (once) the RLinf 0.3.0 environment <repo>/.venv-rlinf with `agentbridge backends setup rlinf --cpu` and run
# the RLinf adapter's tests in it.  Run from anywhere; idempotent, fast when present.
# The CPU recipe (`environment` in agentbridge_rlinf/backend.py, built by agentbridge/backend_envs.py):
#  - torch==2.13.0 first (the CPU build; an unpinned torch would pull a multi-GB CUDA build);
#  - rlinf==0.3.0 with --no-deps: its declared dependencies pull triton (liger_kernel), gsutil, nvitop, swanlab and
#    more; what its validator and agent-loop path import is the adapter's `cpu` extra (Ray, Hydra, OmegaConf, ...);
#  - agentbridge[hf], the plugins installed in .venv, this adapter, pytest: one resolve. transformers 5 is fine here:
#    RLinf 0.3.0 needs transformers<5 only for its FSDP actor, which runs on GPUs, not in these tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
VENV=${AGENTBRIDGE_RLINF_VENV:-$ROOT/.venv-rlinf}
[ -x .venv/bin/agentbridge ] || { echo "[rlinf] run scripts/install.sh first (it provides agentbridge)"; exit 1; }
.venv/bin/agentbridge backends setup rlinf --cpu --venv "$VENV" --with pytest
[ -z "${AGENTBRIDGE_SETUP_ONLY:-}" ] || exit 0   # scripts/test.sh creates the environments side by side first
"$VENV/bin/python" -c "import torch, transformers, ray, rlinf; from importlib.metadata import version as v; \
assert torch.__version__.startswith('2.13.0'), torch.__version__; \
print('[rlinf] torch', torch.__version__, '| transformers', transformers.__version__, '| ray', ray.__version__, \
'| rlinf', v('rlinf'))"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 RAY_DEDUP_LOGS=0 TOKENIZERS_PARALLELISM=false
echo "[rlinf] pytest adapters/rlinf/tests"
t1=$(date +%s)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider adapters/rlinf/tests "$@"
echo "[rlinf] tests took $(( $(date +%s) - t1 ))s"

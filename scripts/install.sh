#!/usr/bin/env bash
# Create .venv with agentbridge, its first-party plugins and the TRL adapter (CPU torch).
# Usage: scripts/install.sh [extra pip args...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# pip, without the notes about this machine's local wheel mirrors
pip() { .venv/bin/python -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }; return "${PIPESTATUS[0]}"; }
echo "[install] torch (CPU build) and agentbridge into .venv"
pip install -q torch==2.13.0
plugins=(); for p in plugins/*/; do plugins+=(-e "$p"); done
pip install -q -e '.[hf,plot,serve]' "${plugins[@]}" "$@"
pip install -q -e 'adapters/trl[backend]'   # TRL shares the main environment
# veRL, OpenRLHF and RLinf run in their own environments (adapters/*/test.sh); here only compile and `check` are
# needed. slime and ROLL are source only: here their compile output and protocols are tested (their tests that
# need the backend's own code skip; adapters/{slime,roll}/README.md say what ran against which upstream commit)
for adapter in adapters/verl adapters/openrlhf adapters/rlinf adapters/slime adapters/roll; do
  [ -f "$adapter/pyproject.toml" ] && pip install -q -e "$adapter"
done
# the real Qwen2.5 vocabulary (qwen.tiktoken) ships in the dashscope wheel; only that file is used
pip install -q --no-deps dashscope
echo "[install] done: $(.venv/bin/agentbridge --version)"

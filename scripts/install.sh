#!/usr/bin/env bash
# Create .venv with agentbridge, its first-party plugins and the TRL adapter (CPU torch).
# Usage: scripts/install.sh [extra pip args...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# A second run with nothing changed skips pip (editable installs follow the source by themselves): the stamp hashes
# what decides the environment: this script, its arguments, every pyproject.toml, the package folders and the
# interpreter. AGENTBRIDGE_REINSTALL=1 installs anyway.
stamp=.venv/.agentbridge-install
want=$({ cat scripts/install.sh; printf '%s\n' "$@"
         cat pyproject.toml plugins/*/pyproject.toml adapters/*/pyproject.toml
         find agentbridge plugins adapters -maxdepth 3 -name __init__.py -not -path '*/tests/*' | sort
         .venv/bin/python --version; } | sha256sum | cut -d' ' -f1)
if [ -z "${AGENTBRIDGE_REINSTALL:-}" ] && [ -x .venv/bin/agentbridge ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "[install] .venv is up to date ($(.venv/bin/agentbridge --version)); AGENTBRIDGE_REINSTALL=1 installs anyway"
  exit 0
fi
rm -f "$stamp"
# pip, without the notes about this machine's local wheel mirrors
pip() { .venv/bin/python -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }; return "${PIPESTATUS[0]}"; }
# uv first (pinned), then everything else through it: scripts/uv-env.sh says why; AGENTBRIDGE_UV=off keeps pip
[ "${AGENTBRIDGE_UV:-}" = off ] || pip install -q uv==0.13.9
source scripts/uv-env.sh
install() {
  if [ -n "${AGENTBRIDGE_UV:-}" ] && [ "$AGENTBRIDGE_UV" != off ]; then
    "$AGENTBRIDGE_UV" pip install --python .venv/bin/python "$@"
  else pip install "$@"; fi
}
echo "[install] torch (CPU build) and agentbridge into .venv"
install -q torch==2.13.0
plugins=(); for p in plugins/*/; do plugins+=(-e "$p"); done
install -q -e '.[hf,plot,serve]' "${plugins[@]}" "$@"
install -q -e 'adapters/trl[backend]'   # TRL shares the main environment
# veRL, OpenRLHF and RLinf run in their own environments (adapters/*/test.sh); here only compile and `check` are
# needed. slime and ROLL are source only: here their compile output and protocols are tested (their tests that
# need the backend's own code skip; adapters/{slime,roll}/README.md say what ran against which upstream commit)
for adapter in adapters/verl adapters/openrlhf adapters/rlinf adapters/slime adapters/roll; do
  [ -f "$adapter/pyproject.toml" ] && install -q -e "$adapter"
done
# the real Qwen2.5 vocabulary (qwen.tiktoken) ships in the dashscope wheel; only that file is used
install -q --no-deps dashscope
echo "$want" > "$stamp"
echo "[install] done: $(.venv/bin/agentbridge --version)"

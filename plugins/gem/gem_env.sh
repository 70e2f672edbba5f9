#!/usr/bin/env bash
# GEM's environment: .venv-gem at the repo root with gem-llm and its own pins (reasoning-gym==0.1.23, nltk==3.9.1,
# which the training environment's reasoning-gym 0.1.25 would conflict with). agentbridge_gem runs GEM's envs in
# worker processes of this venv (agentbridge_gem/worker.py). Idempotent; instant when already there.
#   plugins/gem/gem_env.sh        create it (if needed) and print its python
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${AGENTBRIDGE_GEM_VENV:-$root/.venv-gem}"
pins="gem-llm==0.1.0 requests==2.34.2"  # bump deliberately: the worker uses this gem's make/reset/step and tool wrappers
# (requests: gem.wrappers.wrapper_factory imports its search tool, which needs it, and gem-llm does not declare it)
marker="$venv/.agentbridge-gem"
if [ ! -f "$marker" ] || [ "$(cat "$marker")" != "$pins" ]; then
  echo "[gem] creating $venv ($pins)" >&2
  { [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"; } >&2 \
    || { echo "[gem] cannot create the venv $venv with ${PYTHON:-python3} -m venv" >&2; exit 1; }
  installer=("$venv/bin/python" -m pip install)  # or the uv that scripts/uv-env.sh names (AGENTBRIDGE_UV)
  [ -z "${AGENTBRIDGE_UV:-}" ] || [ "$AGENTBRIDGE_UV" = off ] || installer=("$AGENTBRIDGE_UV" pip install --python "$venv/bin/python")
  PIP_DISABLE_PIP_VERSION_CHECK=1 "${installer[@]}" -q $pins 2>&1 \
    | { grep -v "is ignored: it is neither" || true; } >&2
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "[gem] pip install $pins into $venv failed" >&2; exit 1; }
  "$venv/bin/python" -c "import gem, gem.wrappers.wrapper_factory" >/dev/null 2>&1 \
    || { echo "[gem] $venv has $pins but cannot import gem" >&2; exit 1; }
  echo "$pins" > "$marker"
fi
echo "$venv/bin/python"

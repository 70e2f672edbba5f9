#!/usr/bin/env bash
# The verifiers environment: .venv-verifiers at the repo root with verifiers 0.4.0 (its own venv: verifiers pulls in
# openai, anthropic, mcp, transformers, prime-* and more, ~45 packages the training environment does not need) and
# this plugin's example environments (environments/, on its path through a .pth file, as an installed environment
# package would be). Idempotent; instant when already there.
#   plugins/verifiers/server_env.sh      create it (if needed) and print its python
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${VERIFIERS_VENV:-$root/.venv-verifiers}"
pins="verifiers==0.4.0"  # bump deliberately: the bridge runs this version's Env, rollout and chat program
marker="$venv/.agentbridge-verifiers"
want="$pins $here/environments"
if [ ! -f "$marker" ] || [ "$(cat "$marker")" != "$want" ]; then
  echo "[verifiers] creating $venv ($pins)" >&2
  { [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"; } >&2 \
    || { echo "[verifiers] cannot create the venv $venv with ${PYTHON:-python3} -m venv" >&2; exit 1; }
  installer=("$venv/bin/python" -m pip install)  # or the uv that scripts/uv-env.sh names (AGENTBRIDGE_UV)
  [ -z "${AGENTBRIDGE_UV:-}" ] || [ "$AGENTBRIDGE_UV" = off ] || installer=("$AGENTBRIDGE_UV" pip install --python "$venv/bin/python")
  PIP_DISABLE_PIP_VERSION_CHECK=1 "${installer[@]}" -q $pins 2>&1 \
    | { grep -v "is ignored: it is neither" || true; } >&2
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "[verifiers] pip install $pins into $venv failed" >&2; exit 1; }
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$here/environments" > "$site/agentbridge-verifiers-environments.pth"
  "$venv/bin/python" -c "import verifiers.v1, aiohttp, vf_reverse_text" >&2 \
    || { echo "[verifiers] $venv has $pins but cannot import verifiers.v1 and the example environments" >&2; exit 1; }
  echo "$want" > "$marker"
fi
echo "$venv/bin/python"

#!/usr/bin/env bash
# The OpenEnv server environment: .venv-openenv at the repo root with the pinned openenv packages (its own venv:
# openenv pulls in gradio and cannot share the training environment). Idempotent; instant when already there.
#   plugins/openenv/server_env.sh                     create it (if needed) and print its python
#   plugins/openenv/server_env.sh serve [ARGS...]     ...then run servers/guess_server.py ARGS on a free port
#                                                     unless --port is given (prints "OPENENV_URL http://...")
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${OPENENV_VENV:-$root/.venv-openenv}"
pins="openenv==0.10.0"  # bump deliberately: the bridge speaks this version's wire protocol
marker="$venv/.agentbridge-openenv"
if [ ! -f "$marker" ] || [ "$(cat "$marker")" != "$pins" ]; then
  echo "[openenv] creating $venv ($pins)" >&2
  { [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"; } >&2 \
    || { echo "[openenv] cannot create the venv $venv with ${PYTHON:-python3} -m venv" >&2; exit 1; }
  installer=("$venv/bin/python" -m pip install)  # or the uv that scripts/uv-env.sh names (AGENTBRIDGE_UV)
  [ -z "${AGENTBRIDGE_UV:-}" ] || [ "$AGENTBRIDGE_UV" = off ] || installer=("$AGENTBRIDGE_UV" pip install --python "$venv/bin/python")
  PIP_DISABLE_PIP_VERSION_CHECK=1 "${installer[@]}" -q $pins 2>&1 \
    | { grep -v "is ignored: it is neither" || true; } >&2
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "[openenv] pip install $pins into $venv failed" >&2; exit 1; }
  "$venv/bin/python" -c "import openenv.core.env_server.http_server, fastmcp, uvicorn" >&2 \
    || { echo "[openenv] $venv has $pins but cannot import its server" >&2; exit 1; }
  echo "$pins" > "$marker"
fi
if [ "${1:-}" != "serve" ]; then
  echo "$venv/bin/python"
  exit 0
fi
shift
args=("$@")
if [[ " ${args[*]} " != *" --port "* ]]; then
  port="$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  args+=(--port "$port")
fi
for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[$i]}" = "--port" ] && port="${args[$((i + 1))]}"; done
echo "OPENENV_URL http://127.0.0.1:$port"
exec "$venv/bin/python" "$here/servers/guess_server.py" "${args[@]}"

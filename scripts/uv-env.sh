# Sourced by scripts/install.sh and scripts/test.sh (from the repo root): uv installs in place of pip once .venv has it
# (scripts/install.sh puts it there first). The same packages from the same places — pip's configuration here (local
# wheels, extra indexes, constraints, certificate, timeout) handed to uv by scripts/uv_settings.py — but each wheel is
# unpacked once into uv's cache and linked into every environment, where pip unzips and byte-compiles it once per
# environment (torch into a fresh venv: pip 29 s, uv 2-7 s). AGENTBRIDGE_UV=off keeps pip everywhere; otherwise
# AGENTBRIDGE_UV names the uv that `agentbridge backends setup` and the plugins' environment scripts install with.
if [ "${AGENTBRIDGE_UV:-}" != off ] && [ -x .venv/bin/uv ]; then
  export AGENTBRIDGE_UV="$PWD/.venv/bin/uv"
  # byte-compiled as pip does: where PYTHONDONTWRITEBYTECODE is set (this project's machines), an install without
  # .pyc files would have every process compile torch and transformers from source on each import
  export UV_COMPILE_BYTECODE=1
  eval "$(.venv/bin/python scripts/uv_settings.py)"
fi

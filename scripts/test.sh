#!/usr/bin/env bash
# Install everything the tests need into .venv, then run lint and every test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh pytest ruff
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1
echo "[test] ruff"
.venv/bin/ruff check .
echo "[test] pytest"
suites=(tests plugins/*/tests examples/plugin-package/tests)
for adapter in adapters/*/; do [ -d "$adapter/tests" ] && suites+=("$adapter/tests"); done
.venv/bin/python -m pytest -q "${suites[@]}" "$@"

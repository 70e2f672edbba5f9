#!/usr/bin/env bash
# Build the documentation site: the reference pages from the code (docs/gen_reference.py writes docs/reference/,
# git-ignored), then `mkdocs build --strict` (a warning, a broken link or a missing anchor fails the build).
# Usage: scripts/docs.sh [SITE_DIR]   (default site/, git-ignored); extra arguments go to mkdocs build.
# Needs mkdocs and mkdocs-material in .venv (scripts/test.sh installs them); tests/test_docs.py runs the same steps.
set -euo pipefail
cd "$(dirname "$0")/.."
site=${1:-site}
shift || true
export NO_MKDOCS_2_WARNING=1   # Material's banner about MkDocs 2.0, printed on every build
.venv/bin/python docs/gen_reference.py
.venv/bin/python -m mkdocs build --strict --clean -d "$site" "$@"
echo "[docs] site in $site/ (open $site/index.html)"

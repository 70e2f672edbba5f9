#!/usr/bin/env bash
# Install everything the tests need, then run lint and every test suite.
#  - .venv: agentbridge, its plugins and the TRL adapter (TRL shares the main environment);
#  - adapters/<name>/test.sh: an adapter whose backend pins conflict creates its own venv there.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
scripts/install.sh pytest hypothesis ruff "import-linter>=2.1" "mypy>=1.11" types-PyYAML "tensorboard>=2.14"
# DeepSpeed, so that the TRL GPU profiles' ZeRO-3 config is built and checked (an sdist: built against this torch)
.venv/bin/python -m pip install -q --no-build-isolation deepspeed==0.19.6 2>&1 | { grep -v "is ignored" || true; }
# DS_ACCELERATOR: DeepSpeed (imported by accelerate whenever it is installed) otherwise probes for a GPU and says
# on stdout that it found none, in every process that loads a model
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 DS_ACCELERATOR=cpu
# the backends' own environments are created side by side (mostly downloads and unpacking) while the linters run;
# each adapter's test.sh then finds its environment up to date
mkdir -p .agentbridge
setups=()
for script in adapters/*/test.sh; do
  [ -e "$script" ] || continue
  name=$(basename "$(dirname "$script")")
  AGENTBRIDGE_SETUP_ONLY=1 bash "$script" > ".agentbridge/setup-$name.log" 2>&1 &
  setups+=("$name:$!")
done
echo "[test] ruff"
.venv/bin/ruff check .
echo "[test] import contracts (pyproject.toml [tool.importlinter])"
# the example packages are checked from their source trees; they need not be installed
PYTHONPATH=examples/plugin-package:examples/backend-package .venv/bin/lint-imports --no-cache
echo "[test] mypy (the core)"
.venv/bin/mypy
failed=0
for entry in "${setups[@]}"; do
  name=${entry%%:*}
  if wait "${entry##*:}"; then cat ".agentbridge/setup-$name.log"; else
    cat ".agentbridge/setup-$name.log"; echo "[test] the $name environment could not be created"; failed=1; fi
done
[ "$failed" = 0 ] || exit 1
# the backends' suites run in the background beside the core's (two cores: much of each suite waits on
# subprocesses, servers and browsers); their output is printed when both are done
mkdir -p .agentbridge
(
  for script in adapters/*/test.sh; do
    [ -e "$script" ] || continue
    echo "[test] $script"
    bash "$script" --durations=15 || { echo "[test] $script failed"; exit 1; }
  done
) > .agentbridge/adapter-tests.log 2>&1 &
adapters=$!
echo "[test] pytest (core, plugins, example packages, TRL, slime and ROLL adapters; the backends' suites beside it)"
suites=(tests plugins/*/tests examples/plugin-package/tests examples/backend-package/tests adapters/trl/tests
        adapters/slime/tests adapters/roll/tests)
core=0
.venv/bin/python -m pytest -q --durations=25 "${suites[@]}" "$@" || core=$?
backends=0
wait "$adapters" || backends=$?
cat .agentbridge/adapter-tests.log
[ "$backends" = 0 ] || echo "[test] a backend's suite failed (above)"
[ "$core" = 0 ] || echo "[test] the core suite failed (exit $core)"
[ "$core" = 0 ] && [ "$backends" = 0 ]

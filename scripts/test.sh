#!/usr/bin/env bash
# Install everything the tests need, then run lint and every test suite.
#  - .venv: agentbridge, its plugins and the TRL adapter (TRL shares the main environment);
#  - adapters/<name>/test.sh: an adapter whose backend pins conflict creates its own venv there.
# Where the time goes is printed at the end ("[test] time: ..."), each phase in wall seconds and the machine's busy CPU
# seconds over it; what runs side by side is said below (two cores: installs and linters overlap, the backends'
# suites run beside the core's).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .agentbridge
times=()
# each phase's wall seconds and the whole machine's busy CPU seconds over them (/proc/stat, as bench/cpu_seconds.sh:
# every process counts, Ray's workers included; phases that overlap share the machine, so their CPU overlaps too)
busy() { if [ -r /proc/stat ]; then awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; else echo 0; fi; }
mark() { echo "$(date +%s):$(busy)"; }
took() {  # took LABEL MARK
  local cpu=""
  [ -r /proc/stat ] && cpu=" (machine $(( ($(busy) - ${2##*:}) / $(getconf CLK_TCK) )) CPU-s)"
  times+=("$1 $(( $(date +%s) - ${2%%:*} ))s$cpu")
}
t0=$(mark)
# Debian's chromium (apt: network and disk, little CPU) is installed beside the Python environment
t=$(mark)
scripts/system-deps.sh > .agentbridge/system-deps.log 2>&1 &
sysdeps=$!
scripts/install.sh pytest pytest-xdist==3.8.0 hypothesis ruff "import-linter>=2.1" "mypy>=1.11" types-PyYAML "tensorboard>=2.14" mkdocs==1.6.1 mkdocs-material==9.8.2
took ".venv" "$t"
source scripts/uv-env.sh   # the backends' and plugins' environments below install with uv, as .venv did
# ... but not byte-compiled whole: their tests import a part of each (transformers, ray), and with writing allowed
# Python compiles and keeps what is imported on first use (PYTHONDONTWRITEBYTECODE is set on this project's machines)
export UV_COMPILE_BYTECODE=0
unset PYTHONDONTWRITEBYTECODE
# beside the linters, each in the background with its own log: the backends' environments (mostly resolving and
# linking from uv's cache; each adapter's test.sh then finds its environment up to date), DeepSpeed's wheel (an sdist built
# against .venv's torch, so that the TRL GPU profiles' ZeRO-3 config is built and checked) and the OpenEnv server's
# environment (plugins/openenv/server_env.sh; otherwise made inside the core suite, by its first test), and GEM's
# (plugins/gem/gem_env.sh: .venv-gem, the same way)
t=$(mark)
setups=()
for script in adapters/*/test.sh; do
  [ -e "$script" ] || continue
  name=$(basename "$(dirname "$script")")
  AGENTBRIDGE_SETUP_ONLY=1 bash "$script" > ".agentbridge/setup-$name.log" 2>&1 &
  setups+=("$name:$!")
done
# (its wheel only: installing into .venv now would change the distributions the setups read from it)
(compgen -G ".agentbridge/wheels/deepspeed-0.19.6-*.whl" >/dev/null \
  || .venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w .agentbridge/wheels deepspeed==0.19.6 2>&1 \
  | { grep -v "is ignored" || true; }) > .agentbridge/setup-deepspeed.log 2>&1 &
setups+=("deepspeed:$!")
plugins/openenv/server_env.sh > .agentbridge/setup-openenv.log 2>&1 &
setups+=("openenv:$!")
plugins/verifiers/server_env.sh > .agentbridge/setup-verifiers.log 2>&1 & setups+=("verifiers:$!")
plugins/gem/gem_env.sh > .agentbridge/setup-gem.log 2>&1 &
setups+=("gem:$!")
# DS_ACCELERATOR: DeepSpeed (imported by accelerate whenever it is installed) otherwise probes for a GPU and says
# on stdout that it found none, in every process that loads a model
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 DS_ACCELERATOR=cpu
# one intra-op thread per process: the core's suite and the backends' run side by side on two cores, each with
# subprocesses of its own, and torch's OpenMP threads spinning against each other cost far more than they gain on
# models this small (the reproducibility test's warm start under that load: 14-64 s with two threads, 5-8 s with one)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
echo "[test] ruff"
tl=$(mark)
.venv/bin/ruff check .
echo "[test] import contracts (pyproject.toml [tool.importlinter])"
# the example packages are checked from their source trees; they need not be installed
PYTHONPATH=examples/plugin-package:examples/backend-package .venv/bin/lint-imports --no-cache
echo "[test] mypy (the core, the adapters, the plugins and the example packages; pyproject.toml [tool.mypy])"
.venv/bin/mypy
took "linters (beside the environments)" "$tl"
failed=0
for entry in "system-deps:$sysdeps" "${setups[@]}"; do
  name=${entry%%:*}
  log=.agentbridge/setup-$name.log; [ "$name" = system-deps ] && log=.agentbridge/system-deps.log
  if wait "${entry##*:}"; then cat "$log"; else
    cat "$log"; echo "[test] the $name environment could not be created"; failed=1; fi
done
[ "$failed" = 0 ] || exit 1
.venv/bin/python -m pip install -q --no-build-isolation --find-links .agentbridge/wheels deepspeed==0.19.6 2>&1 \
  | { grep -v "is ignored" || true; }
took "environments (all, side by side)" "$t"
# the backends' suites run in the background beside the core's (two cores: much of each suite waits on
# subprocesses, servers and browsers), on two lanes: the longest suite (OpenRLHF's) on one, the others one after
# another on the other, so that no suite is left alone on the machine at the end. Each suite gets a Ray temp directory
# of its own (RAY_TMPDIR): a plain ray.init() connects to the cluster last started under its temp directory, so two
# suites' local clusters never meet. Their output is printed when all are done.
suite() {  # suite <adapter test.sh>: run it, with its time and its own Ray temp directory
  local name ray s
  name=$(basename "$(dirname "$1")")
  ray=$(mktemp -d "/tmp/ab-ray-$name.XXXX")
  echo "[test] $1"
  s=$(date +%s)
  RAY_TMPDIR=$ray bash "$1" --durations=15 || { echo "[test] $1 failed"; rm -rf "$ray"; return 1; }
  echo "[test] time: $1 $(( $(date +%s) - s ))s"
  rm -rf "$ray"
}
lanes=()
longest_suite=adapters/openrlhf/test.sh
if [ -e "$longest_suite" ]; then
  suite "$longest_suite" > .agentbridge/adapter-tests-1.log 2>&1 &
  lanes+=("$!")
fi
(
  for script in adapters/*/test.sh; do
    [ -e "$script" ] && [ "$script" != "$longest_suite" ] || continue
    suite "$script" || exit 1
  done
) > .agentbridge/adapter-tests-2.log 2>&1 &
lanes+=("$!")
t=$(mark)
echo "[test] pytest (core, plugins, example packages, TRL, slime and ROLL adapters; the backends' suites beside it)"
# two workers, a file at a time each (module fixtures are built once), the longest files first so that neither
# worker is left alone with a long file at the end; the longest are named here, in the order of their measured
# wall time (bench/RESULTS.md), and pytest collects a file named twice once
longest=(adapters/trl/tests/test_learning_guard.py tests/test_phases.py adapters/trl/tests/test_trl_deepspeed.py
         plugins/gui/tests/test_pool.py adapters/trl/tests/test_trl_multirank.py
         plugins/verifiers/tests/test_verifiers_bridge.py plugins/textworld/tests/test_textworld_bridge.py
         plugins/openenv/tests/test_openenv_bridge.py tests/test_compare.py adapters/trl/tests/test_rl_guard.py)
suites=(tests plugins/*/tests examples/plugin-package/tests examples/backend-package/tests adapters/trl/tests
        adapters/slime/tests adapters/roll/tests)
core=0
.venv/bin/python -m pytest -q --durations=25 -n 2 --dist loadfile --no-loadscope-reorder "${longest[@]}" \
  "${suites[@]}" "$@" || core=$?
took "core pytest" "$t"
backends=0
for lane in "${lanes[@]}"; do wait "$lane" || backends=1; done
took "backends' suites (beside the core's)" "$t"
cat .agentbridge/adapter-tests-1.log .agentbridge/adapter-tests-2.log 2>/dev/null || true
[ "$backends" = 0 ] || echo "[test] a backend's suite failed (above)"
[ "$core" = 0 ] || echo "[test] the core suite failed (exit $core)"
took total "$t0"
printf '[test] time: %s\n' "${times[@]}"
cat .agentbridge/adapter-tests-[12].log 2>/dev/null | grep -h "^\[test\] time: adapters" || true
[ "$core" = 0 ] && [ "$backends" = 0 ]

#!/usr/bin/env bash
# GPU check: train examples/calculator.yaml for a few GRPO steps with TRL on one NVIDIA GPU, with a
# Qwen2.5-0.5B-shaped random-init model (fp32 master weights, bf16 autocast), and print step time, generated
# tokens/s and peak GPU memory (read from the run's metrics.jsonl and episodes.jsonl); then OpenRLHF's actor update
# (its own loss code, configured by the compiled GPU job examples/calculator.gpu.yaml) on micro-batches of that
# job's shape with the same model (bench/gpu_openrlhf_step.py); then the same TRL job under DeepSpeed ZeRO-3 (the
# zero_stage every examples/*.gpu.yaml sets) through its launch.sh as one process, with a held-out evaluation after
# RL, to its saved model, which must load whole (no empty ZeRO-3 partitions); then the held-out evaluation of the
# phases around a trainer on one device and as two shards (two processes on the GPU), which must score alike.
# veRL's training code imports Ray at `import verl` (a ~70 MB wheel, more than the machine takes), so its part runs
# only where verl already imports.
#
# Made for a GPU machine with no network whose python3 (3.12) already holds torch, transformers (>= 5.15),
# accelerate, tokenizers, tiktoken, safetensors, numpy, pandas, pyarrow, setuptools and the other common
# packages. What it lacks travels as wheels in bench/gpu_wheels (git-ignored, about 7 MiB): TRL and the small
# packages it and agentbridge need. Prepare them once, on any machine that reaches PyPI:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d bench/gpu_wheels \
#       trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pydantic==2.14.4 pydantic_core==2.50.5 \
#       annotated-types==0.8.0 typing-inspection==0.4.5 typing_extensions==4.16.0 dashscope==2.0.2 \
#       pylatexenc==2.11 einops==0.8.2
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d bench/gpu_wheels \
#       hjson==3.1.0 py-cpuinfo==9.0.0 msgpack==1.1.2 ninja==1.13.0
#   python3 -m pip wheel --no-deps -w bench/gpu_wheels/pure openrlhf==0.11.2 deepspeed==0.19.6
#
# (OpenRLHF and DeepSpeed publish no wheel; the ones built here are pure Python (DeepSpeed compiles its ops when
# first used) but tagged for the building interpreter, so the script unpacks them rather than pip-installing them.)
# (dashscope is carried for its qwen.tiktoken file only: the tokenizer of builtin:tiny-qwen2.5.) The script
# installs them with `pip install --no-index --no-deps --target` into a scratch folder put first on PYTHONPATH,
# then builds agentbridge, agentbridge-math and agentbridge-trl from this checkout into the same folder
# (--no-deps --no-build-isolation), so the machine's own torch, transformers and accelerate are used as they are.
#
# Usage (repository root):  bash bench/gpu_check.sh
# Environment:
#   GPU_CHECK_STEPS=5          GRPO steps (the first one is reported separately: it includes warm-up)
#   GPU_CHECK_WORK=DIR         scratch dir for the packages, the model and the run (default /tmp/agentbridge-gpu-check)
#   GPU_CHECK_TRAIN_TIMEOUT=330  seconds the training may take; the figures of the steps done so far are still read
#   GPU_CHECK_WHEELS=DIR       the wheels to install (default bench/gpu_wheels); GPU_CHECK_EXTRA_WHEELS=DIR adds more
#   PYTHON=python3             the interpreter that holds torch (default: python3; in the dry run .venv/bin/python)
#   GPU_CHECK_ZERO3_TIMEOUT=240  seconds the ZeRO-3 run (step 5b) may take
#   GPU_CHECK_DRY_RUN=1        no GPU needed: a tiny model (same tokenizer), 1 step on CPU with a small batch;
#                              exercises everything but the GPU itself, the offline install included (the ZeRO-3
#                              run on DeepSpeed's CPU accelerator, its process given gloo by agentbridge_trl.cpu_ranks).
#                              For a dry run on another Python than 3.12, point GPU_CHECK_WHEELS at the same packages
#                              built for it.
#   OUT=DIR                    when set, the log (gpu_check.log), the figures (gpu_check.json) and the run's
#                              metrics.jsonl are written there too
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${GPU_CHECK_WORK:-/tmp/agentbridge-gpu-check}
STEPS=${GPU_CHECK_STEPS:-5}
DRY=${GPU_CHECK_DRY_RUN:-0}
TRAIN_TIMEOUT=${GPU_CHECK_TRAIN_TIMEOUT:-330}
ZERO3_TIMEOUT=${GPU_CHECK_ZERO3_TIMEOUT:-240}
WHEELS=${GPU_CHECK_WHEELS:-$ROOT/bench/gpu_wheels}
EXTRA_WHEELS=${GPU_CHECK_EXTRA_WHEELS:-}
SITE=$WORK/site
T0=$(date +%s)

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/gpu_check.log") 2>&1
fi
export PYTHONUNBUFFERED=1

die() { echo "gpu_check: FAILED: $*" >&2; exit 1; }
section() { echo; echo "==== gpu_check [$(( $(date +%s) - T0 ))s] $* ===="; }

# ---- 0. the machine ---------------------------------------------------------------------------------------------
section "0. machine (dry run: $DRY)"
if [ "$DRY" = 1 ]; then
  PY=${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3 )}
else
  PY=${PYTHON:-python3}
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    die "no NVIDIA GPU found (nvidia-smi missing or lists no GPU); set GPU_CHECK_DRY_RUN=1 for the CPU dry run"
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
PY=$(command -v "$PY") || die "no interpreter $PY"
echo "python: $PY ($("$PY" -V 2>&1)); scratch: $WORK"
rm -rf "$SITE" "$WORK/run" "$WORK"/model-*  # what an earlier check left
mkdir -p "$WORK" "$SITE"

# ---- 1. packages: the carried wheels and this checkout, offline, over the interpreter's own -------------------
section "1. offline install into $SITE"
ls "$WHEELS"/*.whl >/dev/null 2>&1 || die "no wheels in $WHEELS; create them with the pip download command at the top"
WHEEL_FILES=("$WHEELS"/*.whl)
if [ -n "$EXTRA_WHEELS" ]; then WHEEL_FILES+=("$EXTRA_WHEELS"/*.whl); fi
for w in "${WHEEL_FILES[@]}"; do echo "  $(basename "$w")"; done
PIP=("$PY" -m pip install -q --no-index --no-deps --no-cache-dir --disable-pip-version-check --upgrade --target "$SITE")
"${PIP[@]}" "${WHEEL_FILES[@]}" || die "installing the wheels failed (see pip's output above)"
for w in "$WHEELS"/pure/*.whl; do  # pure-Python wheels tagged for another interpreter: unpacked as they are
  [ -e "$w" ] || die "no OpenRLHF/DeepSpeed wheels in $WHEELS/pure; build them with the pip wheel command at the top"
  echo "  $(basename "$w") (unpacked)"
  "$PY" -c '
import shutil, sys, zipfile
from pathlib import Path
site = Path(sys.argv[2])
zipfile.ZipFile(sys.argv[1]).extractall(site)
for purelib in site.glob("*.data/purelib"):
    for item in purelib.iterdir():
        shutil.move(str(item), str(site / item.name))
    shutil.rmtree(purelib.parent)
' "$w" "$SITE" || die "unpacking $w failed"
done
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
export AGENTBRIDGE_CACHE=$WORK/cache
export PIP_NO_INDEX=1
# non-editable builds (an editable install cannot go to --target); the build/ folders they leave are removed
NEW_BUILDS=()
BUILDS=("$ROOT" "$ROOT/plugins/math" "$ROOT/adapters/trl" "$ROOT/adapters/openrlhf")
for d in "${BUILDS[@]}"; do [ -e "$d/build" ] || NEW_BUILDS+=("$d/build"); done
"${PIP[@]}" --no-build-isolation "${BUILDS[@]}" \
  || die "building agentbridge and its math plugin, TRL and OpenRLHF adapters failed (needs setuptools >= 68)"
rm -rf "${NEW_BUILDS[@]}"
AGENTBRIDGE=$SITE/bin/agentbridge
[ -x "$AGENTBRIDGE" ] || die "pip put no agentbridge command in $SITE/bin"
"$PY" - <<'EOF' || die "the packages do not import (see above)"
"""Where each package comes from, and every requirement of the carried and built ones that is not met."""
import importlib, os
from importlib import metadata
from packaging.requirements import Requirement

site = os.environ["PYTHONPATH"].split(":")[0]
for mod in ("torch", "transformers", "accelerate", "tokenizers", "trl", "datasets", "pydantic", "deepspeed",
            "agentbridge", "agentbridge_math", "agentbridge_trl", "openrlhf", "agentbridge_openrlhf"):
    m = importlib.import_module(mod)
    path = os.path.abspath(m.__file__)
    where = ("carried" if path.startswith(site) else
             "checkout" if path.startswith(os.getcwd()) and "site-packages" not in path else "machine")
    print(f"  {mod:18} {getattr(m, '__version__', '?'):16} {where}")
import torch
print(f"  torch.cuda.is_available() = {torch.cuda.is_available()}")
extras = {"agentbridge": {"hf"}, "agentbridge-trl": {"backend"}}
skip = {"openrlhf", "deepspeed"}  # OpenRLHF: only its loss code runs here; DeepSpeed: its optional extras
unmet = []
for dist in metadata.distributions(path=[site]):
    name = dist.metadata["Name"]
    if name == "dashscope" or name in skip:  # carried for its qwen.tiktoken file alone / for its loss code
        continue
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras.get(name, {""})):
            continue
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            unmet.append(f"{name} needs {req}: missing")
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            unmet.append(f"{name} needs {req}: have {have}")
for line in unmet:
    print(f"  warning: {line}")
print(f"  requirements of the installed packages: {'all met' if not unmet else f'{len(unmet)} not met'}")
EOF
if [ "$DRY" != 1 ]; then
  "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    || die "torch in $PY cannot see the GPU (CPU-only torch, or a driver/CUDA mismatch)"
fi

# ---- 2. a random-init Qwen2.5-0.5B-shaped model with builtin:tiny-qwen2.5's tokenizer ---------------------------
section "2. model"
MODEL=$WORK/model-$([ "$DRY" = 1 ] && echo tiny || echo qwen2.5-0.5b-random)
DRY=$DRY MODEL=$MODEL "$PY" - <<'EOF' || die "building the random-init model failed"
import os
import torch
from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM
from agentbridge.models import resolve_model_path

out, dry = os.environ["MODEL"], os.environ["DRY"] == "1"
tok = AutoTokenizer.from_pretrained(resolve_model_path("builtin:tiny-qwen2.5"))
eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
shape = (dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
              intermediate_size=64) if dry else  # Qwen2.5-0.5B's shape
         dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
              intermediate_size=4864))
config = Qwen2Config(vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
                     tie_word_embeddings=True, hidden_act="silu", bos_token_id=None, eos_token_id=eos,
                     pad_token_id=pad, **shape)
torch.manual_seed(0)
model = Qwen2ForCausalLM(config)  # float32 weights: the master copy; the trainer autocasts to bf16 on the GPU
model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
model.save_pretrained(out)
tok.save_pretrained(out)
n = sum(p.numel() for p in model.parameters())
dtypes = {str(p.dtype) for p in model.parameters()}
print(f"model: {out} ({n / 1e6:.1f}M parameters, saved as {', '.join(sorted(dtypes))})")
EOF

# ---- 3. train with agentbridge train (compile, validate, run) ---------------------------------------------------
section "3. train: TRL GRPO, $([ "$DRY" = 1 ] && echo "1 step on CPU" || echo "$STEPS steps on the GPU")"
RUN=$WORK/run
SETS=(--set "model.path=$MODEL" --set "algorithm.steps=$STEPS" --set algorithm.warm_start=null
      --set data.eval=null --set name=calculator-gpu-check)
if [ "$DRY" = 1 ]; then
  SETS+=(--set resources.gpus_per_node=0 --set algorithm.steps=1 --set algorithm.batch_size=2
         --set algorithm.group_size=2 --set agent.max_tokens_per_turn=8 --set agent.max_response_tokens=32
         --set agent.max_turns=2)
else
  SETS+=(--set resources.gpus_per_node=1)
fi
START=$(date +%s)
TRAIN_RC=0
timeout --signal=INT --kill-after=20 "$TRAIN_TIMEOUT" \
  "$AGENTBRIDGE" train examples/calculator.yaml -o "$RUN" "${SETS[@]}" || TRAIN_RC=$?
TRAIN_S=$(( $(date +%s) - START ))
echo "agentbridge train: exit $TRAIN_RC after ${TRAIN_S}s$([ "$TRAIN_RC" = 124 ] && echo " (stopped at the ${TRAIN_TIMEOUT}s limit)")"
[ -s "$RUN/metrics.jsonl" ] || die "agentbridge train wrote no metrics (exit $TRAIN_RC; see above)"

# ---- 4. the figures ---------------------------------------------------------------------------------------------
section "4. results"
RUN=$RUN TRAIN_RC=$TRAIN_RC TRAIN_S=$TRAIN_S DRY=$DRY "$PY" - <<'EOF' || die "could not read $RUN/metrics.jsonl"
import json, os, shutil, statistics
from pathlib import Path
import torch

run = Path(os.environ["RUN"])
rows = [json.loads(line) for line in (run / "metrics.jsonl").open() if line.strip()]
generated: dict[int, int] = {}
for line in (run / "episodes.jsonl").open():
    ep = json.loads(line)
    generated[ep["step"]] = generated.get(ep["step"], 0) + sum(t.get("generated_tokens", 0) for t in ep["turns"])
later = rows[1:] or rows
med = lambda key: statistics.median(r.get(key, 0.0) for r in later)  # noqa: E731
step_s, rollout_s = med("time/step_s"), med("time/rollout_s")
gen_tok = statistics.median(generated.get(r["step"], 0) for r in later)
manifest = run / "manifest.json"
jobs = sorted(Path("jobs").glob("calculator-gpu-check-trl-*/grpo_config.json"), key=lambda p: p.stat().st_mtime)
grpo = json.loads(jobs[-1].read_text()) if jobs else {}
saved = {}
if (run / "model" / "model.safetensors").is_file():
    from safetensors import safe_open

    with safe_open(str(run / "model" / "model.safetensors"), "pt") as f:
        saved = {f.get_slice(k).get_dtype() for k in f.keys()}
figures = {
    "dry_run": os.environ["DRY"] == "1", "train_exit": int(os.environ["TRAIN_RC"]),
    "train_wall_s": int(os.environ["TRAIN_S"]), "steps": len(rows),
    "first_step_s": rows[0].get("time/step_s"), "median_step_s": step_s, "median_rollout_s": rollout_s,
    "generated_tokens_per_step": gen_tok, "generated_tokens_per_s": gen_tok / step_s if step_s else 0.0,
    "generated_tokens_per_rollout_s": gen_tok / rollout_s if rollout_s else 0.0,
    "prompt_response_tokens_per_s": med("throughput/tokens_per_s"),
    "peak_memory_gb": max(r.get("memory/peak_gb", 0.0) for r in rows),
    "loss": [r.get("trl/loss") for r in rows],
    "bf16_autocast": grpo.get("bf16"), "trained_model_dtypes": sorted(saved),
    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    "versions": json.loads(manifest.read_text()).get("versions", {}) if manifest.is_file() else {},
}
print(f"steps:                 {len(rows)} (first {figures['first_step_s']:.2f} s, includes warm-up; "
      f"{'median of steps 2+' if len(rows) > 1 else 'that step'} below)")
print(f"step time:             {step_s:.2f} s (of which rollout {rollout_s:.2f} s)")
print(f"generated tokens/s:    {figures['generated_tokens_per_s']:.0f} per step-second, "
      f"{figures['generated_tokens_per_rollout_s']:.0f} during rollout ({gen_tok:.0f} generated tokens/step)")
print(f"prompt+response tok/s: {figures['prompt_response_tokens_per_s']:.0f} (throughput/tokens_per_s)")
print(f"peak memory:           {figures['peak_memory_gb']:.2f} GB (GPU when CUDA, else the process's RSS)")
print(f"loss per step:         {figures['loss']}")
print(f"precision:             bf16 autocast {figures['bf16_autocast']}; trained weights saved as "
      f"{', '.join(figures['trained_model_dtypes']) or '(no model saved)'} (the fp32 master copy)")
print(f"gpu: {figures['gpu']}; versions: {figures['versions']}")
if os.environ.get("OUT"):
    out = Path(os.environ["OUT"])
    (out / "gpu_check.json").write_text(json.dumps(figures, indent=2) + "\n")
    shutil.copy(run / "metrics.jsonl", out / "metrics.jsonl")
    print(f"written: {out}/gpu_check.json, {out}/metrics.jsonl, {out}/gpu_check.log")
EOF

# ---- 5. OpenRLHF's actor update ---------------------------------------------------------------------------------
section "5. OpenRLHF actor update (its loss code, the GPU job's shape)"
ORL_JOB=$WORK/openrlhf-job
"$AGENTBRIDGE" compile examples/calculator.gpu.yaml --backend openrlhf -o "$ORL_JOB" \
  || die "compiling examples/calculator.gpu.yaml for OpenRLHF failed"
ORL_ARGS=(--steps 3 --micro 4)
if [ "$DRY" = 1 ]; then ORL_ARGS=(--device cpu --steps 2 --micro 1 --length 96 --response 32); fi
ORL_RC=0
timeout 180 "$PY" bench/gpu_openrlhf_step.py "$ORL_JOB" "$MODEL" "${ORL_ARGS[@]}" \
  ${OUT:+--json "$OUT/gpu_check_openrlhf.json"} || ORL_RC=$?
echo "OpenRLHF actor update: exit $ORL_RC"

# ---- 5b. TRL under DeepSpeed ZeRO-3 ------------------------------------------------------------------------------
section "5b. TRL under DeepSpeed ZeRO-3: launch.sh (one process), RL, evaluation after RL, the saved model"
Z3_JOB=$WORK/trl-zero3-job
Z3_RUN=$WORK/run-zero3
rm -rf "$Z3_JOB" "$Z3_RUN"
Z3_SETS=(--set "model.path=$MODEL" --set backend.name=trl --set "backend.options={zero_stage: 3}"
         --set algorithm.warm_start=null --set data.dev=null --set data.eval.size=4 --set algorithm.steps=2
         --set algorithm.batch_size=2 --set algorithm.group_size=2 --set agent.max_turns=2
         --set agent.max_tokens_per_turn=32 --set agent.max_response_tokens=96 --set name=calculator-gpu-check-zero3
         --set resources.gpus_per_node=1)
"$AGENTBRIDGE" compile examples/calculator.yaml -o "$Z3_JOB" "${Z3_SETS[@]}" \
  || die "compiling the ZeRO-3 TRL job failed"
Z3_ENV=(DS_ACCELERATOR=cuda)
if [ "$DRY" = 1 ]; then  # CPU: no bf16, DeepSpeed's CPU accelerator, accelerate gives the process gloo
  "$PY" -c 'import json, sys; p = sys.argv[1]; c = json.load(open(p)); c["bf16"] = False; json.dump(c, open(p, "w"))' \
    "$Z3_JOB/grpo_config.json"
  mkdir -p "$WORK/cpu-site"
  printf 'import agentbridge_trl.cpu_ranks\nagentbridge_trl.cpu_ranks.install()\n' > "$WORK/cpu-site/sitecustomize.py"
  Z3_ENV=(DS_ACCELERATOR=cpu "PYTHONPATH=$WORK/cpu-site:$PYTHONPATH")
fi
Z3_RC=0
env "${Z3_ENV[@]}" PYTHON="$PY" RUN_DIR="$Z3_RUN" timeout --signal=INT --kill-after=20 "$ZERO3_TIMEOUT" \
  bash "$Z3_JOB/launch.sh" || Z3_RC=$?
echo "TRL under ZeRO-3: exit $Z3_RC"
if [ "$Z3_RC" = 0 ]; then
  Z3_RUN=$Z3_RUN MODEL=$MODEL "$PY" - <<'EOF' || Z3_RC=$?
"""The ZeRO-3 run evaluated after RL and saved a whole model: every weight with the base model's shape."""
import json, os
from pathlib import Path
from transformers import AutoModelForCausalLM

run = Path(os.environ["Z3_RUN"])
evals = json.loads((run / "eval.json").read_text())
assert "after_rl" in evals, f"no evaluation after RL: {sorted(evals)}"
base = AutoModelForCausalLM.from_pretrained(os.environ["MODEL"]).state_dict()
saved = AutoModelForCausalLM.from_pretrained(run / "model").state_dict()
assert saved.keys() == base.keys(), "the saved model's weights are not the base model's"
empty = [k for k, v in saved.items() if v.numel() == 0 or v.shape != base[k].shape]
assert not empty, f"weights saved empty or misshapen (ZeRO-3 partitions?): {empty[:5]}"
steps = len((run / "metrics.jsonl").read_text().splitlines())
print(f"ZeRO-3: {steps} RL steps, after_rl {evals['after_rl']['mean']:.3f} on {evals['after_rl']['n']} tasks, "
      f"saved model whole ({len(saved)} tensors, {sum(v.numel() for v in saved.values()) / 1e6:.1f}M parameters)")
EOF
fi
echo "TRL under ZeRO-3 (run, evaluation, saved model): exit $Z3_RC"

# ---- 5c. the phases' held-out evaluation, sharded --------------------------------------------------------------
section "5c. held-out evaluation of the phases around a trainer: one device vs two shards (two processes, one GPU)"
SH_DEV=cuda:0
[ "$DRY" = 1 ] && SH_DEV=cpu
SH_RC=0
for devices in "$SH_DEV" "$SH_DEV,$SH_DEV"; do
  rm -rf "$WORK/run-shards-$devices"
  AGENTBRIDGE_EVAL_DEVICES=$devices "$PY" -m agentbridge.training.phases prepare "$Z3_JOB" \
    --run-dir "$WORK/run-shards-$devices" --quiet > /dev/null || SH_RC=$?
done
if [ "$SH_RC" = 0 ]; then
  cmp "$WORK/run-shards-$SH_DEV/eval_scores.jsonl" "$WORK/run-shards-$SH_DEV,$SH_DEV/eval_scores.jsonl" \
    && echo "sharded evaluation: the same per-task scores on one device and on two shards" || SH_RC=$?
fi
echo "sharded evaluation: exit $SH_RC"

# ---- 6. veRL ----------------------------------------------------------------------------------------------------
section "6. veRL"
if "$PY" -c "import verl" >/dev/null 2>&1; then
  echo "verl imports here: its actor update is the veRL adapter's step probe (adapters/verl, one-step conformance)"
else
  echo "skipped: \`import verl\` fails here ($("$PY" -c 'import verl' 2>&1 | tail -1)); veRL 0.9.1 imports Ray at"
  echo "  import time, whose wheel (~70 MB) is more than this machine takes"
fi

section "done"
[ "$TRAIN_RC" = 0 ] || [ "$TRAIN_RC" = 124 ] || die "agentbridge train exited $TRAIN_RC"
[ "$ORL_RC" = 0 ] || die "OpenRLHF's actor update exited $ORL_RC"
[ "$Z3_RC" = 0 ] || die "TRL under DeepSpeed ZeRO-3 exited $Z3_RC"
[ "$SH_RC" = 0 ] || die "the sharded held-out evaluation exited $SH_RC"

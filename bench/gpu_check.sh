#!/usr/bin/env bash
# GPU check for the TRL adapter (issue 3): train examples/calculator.yaml for a few GRPO steps with TRL on one
# NVIDIA GPU, with a Qwen2.5-0.5B-shaped random-init model, and print step time, generated tokens/s and peak
# GPU memory (read from runs/<name>/metrics.jsonl and episodes.jsonl).
#
# The GPU machine has no network. Prepare the wheels beforehand, on a networked Linux x86_64 machine with the
# same Python minor version as the GPU machine (3.11), from the repository root:
#
#   pip download -d bench/wheels "setuptools>=68" wheel \
#       "torch==2.13.0" "transformers==5.24.0" "trl==1.16.0" "accelerate>=1.4" "datasets>=3" \
#       "tokenizers>=0.22" "tiktoken>=0.7" safetensors "matplotlib>=3.8" \
#       "pluggy>=1.5" "pydantic>=2.7" "PyYAML>=6" "rich>=13" "click>=8.1"
#
# (PyPI's Linux torch wheel is the CUDA build; with its nvidia-* dependencies this is a few GB. bench/wheels is
# not git-ignored: do not commit it.) agentbridge itself, agentbridge-math and agentbridge-trl are installed
# editable from this checkout; setuptools comes from the wheels for the offline build.
#
# Usage (repository root):  bash bench/gpu_check.sh
# Environment:
#   GPU_CHECK_STEPS=5        GRPO steps (the first one is reported separately: it includes warm-up)
#   GPU_CHECK_WORK=DIR       scratch dir for the venv, the model and the run (default /tmp/agentbridge-gpu-check)
#   PYTHON=python3           the interpreter to build the venv from (or to use as is when bench/wheels is absent)
#   GPU_CHECK_DRY_RUN=1      no GPU needed: a tiny model (same tokenizer), 1 step on CPU with a small batch, using
#                            the current interpreter; exercises everything but the GPU itself
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${GPU_CHECK_WORK:-/tmp/agentbridge-gpu-check}
STEPS=${GPU_CHECK_STEPS:-5}
DRY=${GPU_CHECK_DRY_RUN:-0}
WHEELS=$ROOT/bench/wheels

die() { echo "gpu_check: $*" >&2; exit 1; }

if [ "$DRY" != 1 ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    die "no NVIDIA GPU found (nvidia-smi missing or lists no GPU); set GPU_CHECK_DRY_RUN=1 for the CPU dry run"
  fi
fi
mkdir -p "$WORK"

# ---- 1. environment: a venv from bench/wheels (offline), else the given interpreter as is ----------------------
if [ "$DRY" = 1 ]; then
  PY=${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3 )}
elif [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  if [ ! -x "$WORK/venv/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$WORK/venv" || die "cannot create a venv with ${PYTHON:-python3}"
  fi
  PY=$WORK/venv/bin/python
  echo "installing from $WHEELS (offline) into $WORK/venv" >&2
  "$PY" -m pip install -q --no-index --find-links "$WHEELS" -e "$ROOT[hf]" -e "$ROOT/plugins/math" \
      -e "$ROOT/adapters/trl[backend]" || die "offline install from bench/wheels failed (see pip's output above)"
else
  PY=${PYTHON:-python3}
  echo "no bench/wheels; using $PY as is" >&2
fi
"$PY" -c 'import torch, transformers, trl, agentbridge_trl, agentbridge_math' 2>/dev/null \
  || die "$PY lacks torch/transformers/trl/agentbridge-trl; create bench/wheels with the pip download command at the top"
if [ "$DRY" != 1 ]; then
  "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    || die "torch in $PY cannot see the GPU (CPU-only torch wheel, or a driver/CUDA mismatch)"
fi

# ---- 2. a random-init Qwen2.5-0.5B-shaped model with builtin:tiny-qwen2.5's tokenizer ---------------------------
MODEL=$WORK/model-$([ "$DRY" = 1 ] && echo tiny || echo qwen2.5-0.5b-random)
DRY=$DRY MODEL=$MODEL "$PY" - <<'EOF' || die "building the random-init model failed"
import os
import torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
from agentbridge.models import resolve_model_path

out, dry = os.environ["MODEL"], os.environ["DRY"] == "1"
if not os.path.isfile(os.path.join(out, "config.json")):
    tok = AutoTokenizer.from_pretrained(resolve_model_path("builtin:tiny-qwen2.5"))
    shape = (dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                  intermediate_size=64) if dry else
             dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  intermediate_size=4864))
    config = Qwen2Config(vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
                         tie_word_embeddings=True, hidden_act="silu", bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **shape)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)  # float32 weights; the trainer runs bf16 mixed precision on the GPU
    model.save_pretrained(out)
    tok.save_pretrained(out)
n = sum(p.numel() for p in Qwen2ForCausalLM.from_pretrained(out).parameters())
print(f"model: {out} ({n / 1e6:.1f}M parameters)")
EOF

# ---- 3. train with agentbridge train (compile, validate, run) ---------------------------------------------------
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
AGENTBRIDGE=$(dirname "$PY")/agentbridge
[ -x "$AGENTBRIDGE" ] || die "no agentbridge CLI next to $PY"
START=$(date +%s)
"$AGENTBRIDGE" train examples/calculator.yaml -o "$RUN" "${SETS[@]}" || die "agentbridge train failed (see above)"
echo "wall time for agentbridge train: $(( $(date +%s) - START ))s" >&2

# ---- 4. the figures ---------------------------------------------------------------------------------------------
RUN=$RUN "$PY" - <<'EOF' || die "could not read $RUN/metrics.jsonl"
import json, os, statistics
run = os.environ["RUN"]
rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl")) if line.strip()]
if not rows:
    raise SystemExit("metrics.jsonl is empty")
generated = {}
for line in open(os.path.join(run, "episodes.jsonl")):
    ep = json.loads(line)
    generated[ep["step"]] = generated.get(ep["step"], 0) + sum(t["generated_tokens"] for t in ep["turns"])
later = rows[1:] or rows
med = statistics.median(r["time/step_s"] for r in later)
gen_tok = statistics.median(generated.get(r["step"], 0) for r in later)
rollout_s = statistics.median(r["time/rollout_s"] for r in later)
versions = json.load(open(os.path.join(run, "manifest.json"))).get("versions", {})
print(f"steps: {len(rows)}; first step {rows[0]['time/step_s']:.2f}s (includes warm-up); "
      f"median of steps 2+ below" if len(rows) > 1 else f"steps: {len(rows)}")
print(f"step time:            {med:.2f} s  (of which rollout {rollout_s:.2f} s)")
print(f"generated tokens/s:   {gen_tok / med:.0f} per step-second, {gen_tok / rollout_s:.0f} during rollout "
      f"({gen_tok:.0f} generated tokens/step)")
print(f"prompt+response tok/s: {statistics.median(r['throughput/tokens_per_s'] for r in later):.0f} "
      "(throughput/tokens_per_s)")
print(f"peak memory:          {max(r['memory/peak_gb'] for r in rows):.2f} GB (memory/peak_gb: GPU when CUDA, else RSS)")
print(f"versions: {versions}")
EOF
if [ "$DRY" != 1 ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi

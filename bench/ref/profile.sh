#!/usr/bin/env bash
# Profile TileInfer's DFlash step as the comparison did: 256 tokens after the 8k prompts, BF16.
# Gives GEMM / attention ms per step and busy % (compare with bench/ref/reference.csv, source line 31).
#
#   bench/ref/profile.sh                              # real weights (MODEL, DRAFT)
#   RANDOM_WEIGHTS=qwen3-4b bench/ref/profile.sh      # random weights, acceptance replayed
#
# The full profiles (kernels, layers, plots) go to $PROFILE_DIR (default $OUT/profile); one CSV of
# their summaries, with the run's provenance, to $OUT/profile_8k_<weights>_<gpu>.csv.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=${PYTHON:-python3}
MODEL=${MODEL:-Qwen/Qwen3-4B}
DRAFT=${DRAFT:-z-lab/Qwen3-4B-DFlash-b16}
NEW_TOKENS=${NEW_TOKENS:-256}
WEIGHTS=${WEIGHTS:-bf16}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}   # seconds per task's profile
OUT=${OUT:-bench/runs/profile-$(date +%Y%m%d-%H%M%S)}
PROFILE_DIR=${PROFILE_DIR:-$OUT/profile}
mkdir -p "$OUT" "$PROFILE_DIR"
# HTML figures need plotly (and narwhals); without them the tables alone
FIGURES=(); $PY -c "import plotly, narwhals" 2>/dev/null || FIGURES=(--csv-only)

if [[ -n "${RANDOM_WEIGHTS:-}" ]]; then
  read -r MODEL DRAFT < <($PY -c "from bench.ref.tileinfer_spec import prepare_random; print(*prepare_random('$RANDOM_WEIGHTS'))")
  # the comparison's tokens per step on the edit at 8k (reference.csv)
  ACCEPT=${ACCEPT_PROFILE:-$($PY -m bench.ref.reference tokens-per-step 8k edit)}
  REPLAY=(--accept-profile "$ACCEPT")
  NAME=$RANDOM_WEIGHTS ACCEPT_MODE="replay:$ACCEPT" COMMAND="RANDOM_WEIGHTS=$RANDOM_WEIGHTS bench/ref/profile.sh"
else
  REPLAY=()
  NAME=$(basename "$MODEL") ACCEPT_MODE=real COMMAND="MODEL=$MODEL DRAFT=$DRAFT bench/ref/profile.sh"
fi

for TASK in edit explain; do
  # The prompt's exact token ids for this model's tokenizer (bytes for random weights).
  $PY - "$MODEL" "$TASK" "$PROFILE_DIR/$TASK-8k.ids.json" <<'PY'
import json, sys
from pathlib import Path
from tileinfer_profiling.prompts import ByteTokenizer, load_prompt, tokenizer_from_path
model, task, out = sys.argv[1:]
try:
    from bench.ref.vllm_spec import local_checkpoint
    tok = tokenizer_from_path(local_checkpoint(model))
except Exception:  # random weights: no tokenizer
    tok = ByteTokenizer()
ids = load_prompt(task, "8k", tok, name=Path(model).name).ids
Path(out).write_text(json.dumps(ids))
PY
  timeout "$STEP_TIMEOUT" $PY -m tileinfer_profiling step --model "$MODEL" --draft "$DRAFT" --weights "$WEIGHTS" \
    --prompt-ids "$PROFILE_DIR/$TASK-8k.ids.json" --max-new-tokens "$NEW_TOKENS" "${REPLAY[@]}" \
    "${FIGURES[@]}" --out "$PROFILE_DIR/$TASK" > "$PROFILE_DIR/$TASK.log" 2>&1 \
    || echo "profile of $TASK failed or ran past ${STEP_TIMEOUT}s: see $PROFILE_DIR/$TASK.log" >&2
done
TAG=$($PY -c "from bench.ref.metric import gpu_tag; from tileinfer_profiling.run_info import gpu_name; print(gpu_tag(gpu_name(None)))")
[[ "$WEIGHTS" == bf16 ]] || COMMAND="WEIGHTS=$WEIGHTS $COMMAND"
$PY -m bench.ref.profile_summary "$PROFILE_DIR" --model "$NAME" --accept-mode "$ACCEPT_MODE" \
  --command "$COMMAND" --out "$OUT/profile_8k_${WEIGHTS}_$TAG.csv"
echo "profiles in $PROFILE_DIR"

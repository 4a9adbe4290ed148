#!/usr/bin/env bash
# Profile TileInfer's DFlash step as the comparison did: 256 tokens after the 8k prompts, BF16.
# Gives GEMM / attention ms per step and busy % (compare with bench/ref/reference.csv, source line 31).
#
#   bench/ref/profile.sh                              # real weights (MODEL, DRAFT)
#   RANDOM_WEIGHTS=qwen3-4b bench/ref/profile.sh      # random weights, acceptance replayed
set -euo pipefail
cd "$(dirname "$0")/../.."

MODEL=${MODEL:-Qwen/Qwen3-4B}
DRAFT=${DRAFT:-z-lab/Qwen3-4B-DFlash-b16}
NEW_TOKENS=${NEW_TOKENS:-256}
WEIGHTS=${WEIGHTS:-bf16}
OUT=${OUT:-bench/results/profile-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"

if [[ -n "${RANDOM_WEIGHTS:-}" ]]; then
  read -r MODEL DRAFT < <(python -c "from bench.ref.tileinfer_spec import prepare_random; print(*prepare_random('$RANDOM_WEIGHTS'))")
  # the comparison's tokens per step on the edit at 8k (reference.csv)
  REPLAY=(--accept-profile "${ACCEPT_PROFILE:-$(python -m bench.ref.reference tokens-per-step 8k edit)}")
else
  REPLAY=()
fi

for TASK in edit explain; do
  # The prompt's exact token ids for this model's tokenizer (bytes for random weights).
  python - "$MODEL" "$TASK" "$OUT/$TASK-8k.ids.json" <<'PY'
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
  python -m tileinfer_profiling step --model "$MODEL" --draft "$DRAFT" --weights "$WEIGHTS" \
    --prompt-ids "$OUT/$TASK-8k.ids.json" --max-new-tokens "$NEW_TOKENS" "${REPLAY[@]}" \
    --out "$OUT/$TASK"
done
echo "profiles in $OUT"

#!/usr/bin/env bash
# The comparison, both engines, all points, then results by feature.
#
#   bench/ref/run_all.sh                                   # real weights (MODEL, DRAFT below)
#   RANDOM_WEIGHTS=qwen3-4b bench/ref/run_all.sh           # random Qwen3-4B-shaped weights,
#                                                          # acceptance replayed from the comparison
# Rows go to $OUT/*.jsonl as each finishes (Ctrl-C keeps them); summaries to $OUT/*.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

MODEL=${MODEL:-Qwen/Qwen3-4B}
DRAFT=${DRAFT:-z-lab/Qwen3-4B-DFlash-b16}
POINTS=${POINTS:-1k,8k}
# the comparison's BF16 tokens per step at 1k (reference.csv): edit=7.1,explain=2.9
ACCEPT_PROFILE=${ACCEPT_PROFILE:-$(python -m bench.ref.reference accept-profile 1k)}
OUT=${OUT:-bench/results/run-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"

if [[ -n "${RANDOM_WEIGHTS:-}" ]]; then
  WEIGHTS_ARGS=(--random-weights "$RANDOM_WEIGHTS" --accept-profile "$ACCEPT_PROFILE")
else
  WEIGHTS_ARGS=(--model "$MODEL" --draft "$DRAFT")
fi

echo "== TileInfer: BF16/INT8 x DFlash on/off x $POINTS"
python -m bench.ref.tileinfer_spec "${WEIGHTS_ARGS[@]}" --points "$POINTS" \
  --weights bf16,int8 --dflash on,off --out "$OUT/tileinfer.jsonl"

echo "== vLLM: BF16/INT8 x DFlash k=15 x $POINTS"
if [[ -n "${RANDOM_WEIGHTS:-}" ]]; then
  echo "skipped: vLLM cannot replay an acceptance profile, so random weights say nothing about it"
elif ! python -c "import vllm" 2>/dev/null; then
  echo "skipped: vLLM is not installed in this environment (pip install vllm, then run again)"
else
  python -m bench.ref.vllm_spec --model "$MODEL" --draft "$DRAFT" --points "$POINTS" \
    --weights bf16,int8 --dflash on --out "$OUT/vllm.jsonl"
fi

echo "== Results by feature (1k, edit)"
python -m bench.features "${WEIGHTS_ARGS[@]}" --point 1k --task edit --out-dir "$OUT"

echo "== Summary"
python -m bench.ref.summary "$OUT"/*.jsonl --csv "$OUT/rows.csv" | tee "$OUT/summary.md"

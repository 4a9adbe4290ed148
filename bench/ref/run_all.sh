#!/usr/bin/env bash
# The comparison, complete: TileInfer in every configuration (BF16/INT8 x DFlash on/off x edit/explain x
# 1k/8k, fresh processes: 3 at 1k, 2 at 8k), results by feature, the step profile, the model sizes, and
# the engines a user would pick instead, on the same GPU, checkpoint and token ids.
#
#   bench/ref/run_all.sh                                    # every part (real weights: MODEL, DRAFT)
#   RANDOM_WEIGHTS=qwen3-4b bench/ref/run_all.sh 1k features  # some parts, random Qwen3-4B-shaped weights
#   CPUS=2-5 bench/ref/run_all.sh 1k                        # every worker process pinned to the same CPUs
#
# Parts, each sized for one call of at most ~8 minutes on an H200 (bench/ref/README.md):
#   1k        TileInfer, 1k, BF16/INT8 x DFlash on/off           -> $OUT/tileinfer.jsonl
#   8k-bf16   TileInfer, 8k, BF16 x DFlash on/off                -> $OUT/tileinfer.jsonl
#   8k-int8   TileInfer, 8k, INT8 x DFlash on/off                -> $OUT/tileinfer.jsonl
#   features  results by feature, 1k edit (bench/features.py)    -> $OUT/features_1k_edit_<gpu>.{csv,md}
#   profile   the step profile, 256 tokens after the 8k prompts  -> $OUT/profile_8k_bf16_<gpu>.csv
#   sizes     TileInfer, 1k, the Qwen3-0.6B/1.7B/8B shapes (SIZES) -> $OUT/sizes.jsonl
#   peers-1k  transformers eager / static+compile, DFlash reference, 1k -> $OUT/peers.jsonl
#   peers-8k  the same at 8k, replies capped at 128 tokens           -> $OUT/peers.jsonl
#   vllm      vLLM where it is installed (real weights only)     -> $OUT/vllm.jsonl
# Rows are appended and flushed as each prompt finishes, so a part killed midway keeps its rows; each
# worker process has a timeout. A summary of every row file in $OUT (default bench/runs/run-<time>) ends
# each call ($OUT/summary.md).
# The revision must be a clean commit (TILEINFER_GIT_REV where the tree has no .git); ALLOW_DIRTY=1 to
# measure anyway. `python -m bench.ref.collect DIR...` files the rows of several calls into bench/results.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1

PY=${PYTHON:-python3}
MODEL=${MODEL:-Qwen/Qwen3-4B}
DRAFT=${DRAFT:-z-lab/Qwen3-4B-DFlash-b16}
SIZES=${SIZES:-qwen3-0.6b qwen3-1.7b qwen3-8b}
SIZE_WEIGHTS=${SIZE_WEIGHTS:-bf16}
# The peers are slow (transformers eager decodes ~30 tok/s, the DFlash reference ~7 steps/s): 2 processes
# each, the DFlash reference's replies capped at 16 tokens (its step cost is the figure), and at 8k every
# peer's reply capped at 128 tokens; the rows' `note` says so.
PEER_PROCESSES_1K=${PEER_PROCESSES_1K:-2}
PEER_PROCESSES_8K=${PEER_PROCESSES_8K:-2}
PEER_NEW_TOKENS_1K=${PEER_NEW_TOKENS_1K:-dflash-ref=16}
PEER_NEW_TOKENS_8K=${PEER_NEW_TOKENS_8K:-128,dflash-ref=16}
# the comparison's BF16 tokens per step per point and task (reference.csv): 1k:edit=7.1,...,8k:edit=1.87,...
ACCEPT_PROFILE=${ACCEPT_PROFILE:-$($PY -m bench.ref.reference accept-profile 1k,8k)}
OUT=${OUT:-bench/runs/run-$(date +%Y%m%d-%H%M%S)}
PIN_ARGS=()
[[ -n "${CPUS:-}" ]] && PIN_ARGS=(--cpus "$CPUS")
mkdir -p "$OUT"
PARTS=("$@")
[[ ${#PARTS[@]} -eq 0 || "${PARTS[0]}" == all ]] && PARTS=(1k 8k-bf16 8k-int8 features profile sizes peers-1k peers-8k vllm)

REV=$($PY -c "from tileinfer_profiling.run_info import git_rev; print(git_rev())")
if [[ "$REV" == unknown || "$REV" == *-dirty || "$REV" == *-wip ]] && [[ -z "${ALLOW_DIRTY:-}" ]]; then
  echo "revision '$REV' is not a clean commit: commit, or set TILEINFER_GIT_REV=<commit> where the tree has" \
       "no .git (ALLOW_DIRTY=1 measures anyway)" >&2
  exit 2
fi

if [[ -n "${RANDOM_WEIGHTS:-}" ]]; then
  WEIGHTS_ARGS=(--random-weights "$RANDOM_WEIGHTS")
  SPEC_ARGS=("${WEIGHTS_ARGS[@]}" --accept-profile "$ACCEPT_PROFILE")
else
  WEIGHTS_ARGS=(--model "$MODEL" --draft "$DRAFT")
  SPEC_ARGS=("${WEIGHTS_ARGS[@]}")
fi

SECONDS=0
stamp() { echo "== [$(printf '%4d' $SECONDS) s] $*"; }

for PART in "${PARTS[@]}"; do
  case "$PART" in
    1k|8k-bf16|8k-int8)
      point=${PART%%-*}; weights=${PART#*-}; [[ "$PART" == 1k ]] && weights=bf16,int8
      stamp "TileInfer: $point, $weights x DFlash on/off"
      $PY -m bench.ref.tileinfer_spec "${SPEC_ARGS[@]}" "${PIN_ARGS[@]}" --points "$point" --weights "$weights" --dflash on,off \
        --timeout-s "$([[ $point == 1k ]] && echo 180 || echo 300)" --out "$OUT/tileinfer.jsonl" || true ;;
    features)
      stamp "Results by feature (1k, edit)"
      timeout 420 $PY -m bench.features "${SPEC_ARGS[@]}" --point 1k --task edit --out-dir "$OUT" \
        || echo "results by feature failed or ran past 420 s" >&2 ;;
    profile)
      stamp "Step profile: 256 tokens after the 8k prompts"
      OUT="$OUT" bench/ref/profile.sh || echo "the step profile failed" >&2 ;;
    sizes)
      if [[ -z "${RANDOM_WEIGHTS:-}" ]]; then
        echo "skipped: the model sizes run on random weights (RANDOM_WEIGHTS=qwen3-4b)"; continue
      fi
      for preset in $SIZES; do
        stamp "TileInfer: $preset, 1k, $SIZE_WEIGHTS x DFlash on/off"
        $PY -m bench.ref.tileinfer_spec "${PIN_ARGS[@]}" --random-weights "$preset" --accept-profile "$ACCEPT_PROFILE" --points 1k \
          --weights "$SIZE_WEIGHTS" --dflash on,off --timeout-s 180 --out "$OUT/sizes.jsonl" || true
      done ;;
    peers-1k|peers-8k)
      point=${PART#peers-}
      if [[ $point == 1k ]]; then procs=$PEER_PROCESSES_1K caps=$PEER_NEW_TOKENS_1K; else procs=$PEER_PROCESSES_8K caps=$PEER_NEW_TOKENS_8K; fi
      if ! $PY -c "import dflash" 2>/dev/null; then
        echo "note: the DFlash reference is not installed (pip install --no-deps dflash==0.1.0): its rows are skipped" >&2
        engines=hf-eager,hf-compile
      else
        engines=hf-eager,hf-compile,dflash-ref
      fi
      stamp "Peers: $engines, $point"
      $PY -m bench.peers.spec "${WEIGHTS_ARGS[@]}" "${PIN_ARGS[@]}" --points "$point" --engines "$engines" --processes "$procs" \
        --new-tokens "$caps" --timeout-s 300 --out "$OUT/peers.jsonl" || true ;;
    vllm)
      stamp "vLLM: BF16/INT8 x DFlash k=15"
      if [[ -n "${RANDOM_WEIGHTS:-}" ]]; then
        echo "skipped: vLLM cannot replay an acceptance profile, so random weights say nothing about it"
      elif ! $PY -c "import vllm" 2>/dev/null; then
        echo "skipped: vLLM is not installed in this environment (pip install vllm, then run again)"
      else
        $PY -m bench.ref.vllm_spec "${PIN_ARGS[@]}" --model "$MODEL" --draft "$DRAFT" --points 1k,8k --weights bf16,int8 \
          --dflash on --timeout-s 600 --out "$OUT/vllm.jsonl" || true
      fi ;;
    *)
      echo "unknown part '$PART': use 1k 8k-bf16 8k-int8 features profile sizes peers-1k peers-8k vllm (or all)" >&2
      exit 2 ;;
  esac
done

stamp "Summary of $OUT"
shopt -s nullglob
files=("$OUT"/*.jsonl)
if (( ${#files[@]} )); then
  $PY -m bench.ref.summary "${files[@]}" | tee "$OUT/summary.md"
  if [[ -f "$OUT/peers.jsonl" ]] && [[ -f "$OUT/tileinfer.jsonl" ]]; then
    $PY -m bench.peers.speedup "$OUT/tileinfer.jsonl" "$OUT/peers.jsonl" | tee -a "$OUT/summary.md"
  fi
else
  echo "no rows in $OUT"
fi
stamp "done"

#!/usr/bin/env bash
# One device call: GPU tests, long prompts, the comparison's metric on random weights, drafter attention.
# TILEINFER_GIT_REV must be set by the caller (the GPU machine's copy of the tree has no .git).
set -u
export PYTHONUNBUFFERED=1
out=${OUT:-bench/results}
export TILEINFER_BENCH_ROOT=${TILEINFER_BENCH_ROOT:-/tmp/tileinfer-bench}   # random checkpoints, written once
if ls .whl/dflash-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/dflash-*.whl \
    && export PYTHONPATH=/tmp/site
fi
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_dflash.py tests/test_default_model.py 2>&1 | tail -3 > "$out/gpu_tests.txt"
cat "$out/gpu_tests.txt"
python3 -c "from bench.ref.tileinfer_spec import prepare_random; prepare_random('qwen3-4b')"
timeout 200 python3 bench/long_prompt_bench.py --out "$out" 2>&1 | grep -v USDT | tail -25
python3 - <<PY
from tileinfer_profiling.sweeps import drafter_attention_sweep
df = drafter_attention_sweep((1024, 8192, 32768), (1, 4, 8, 16, 32))
df.to_csv("$out/drafter_attention_h200.csv", index=False)
cols = [c for c in ("context_len", "num_splits", "impl", "time_us", "gbs", "achieved_gbs") if c in df]
print(df[cols].to_string())
PY
spec="python3 -m bench.ref.tileinfer_spec --random-weights qwen3-4b"
timeout 150 $spec --accept-profile "$(python3 -m bench.ref.reference accept-profile 1k)" --points 1k --processes 1 \
  --out "$out/spec_1k.jsonl" 2>&1 | grep -v USDT | tail -12
timeout 110 $spec --accept-profile "$(python3 -m bench.ref.reference accept-profile 8k --tasks edit)" --points 8k \
  --tasks edit --dflash on --processes 1 --trials 3 \
  --out "$out/spec_8k.jsonl" 2>&1 | grep -v USDT | tail -8

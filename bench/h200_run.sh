#!/usr/bin/env bash
# One device call: GPU tests of the engine, then the engine benchmark with a step profile.
# TILEINFER_GIT_REV must be set by the caller (the GPU machine's copy of the tree has no .git).
set -u
export PYTHONUNBUFFERED=1
out=${OUT:-bench/results}
if ls .whl/dflash-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/dflash-*.whl \
    && export PYTHONPATH=/tmp/site
fi
timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider tests/test_model_vs_hf.py tests/test_dflash.py \
  tests/test_int8_engine.py "tests/test_pointwise_ops.py::test_qk_norm_rope_writes_the_caches" 2>&1 | tail -4 | tee "$out/gpu_tests.txt"
timeout "${BENCH_TIMEOUT:-300}" python3 bench/engine_bench.py --out "$out" --profile --repeats 3 ${BENCH_ARGS:-} 2>&1 \
  | grep -v USDT | tail -22

#!/usr/bin/env bash
# The whole test suite on a GPU machine, run as a user runs it (`make test`), recorded in bench/results/.
#
#   TILEINFER_GIT_REV=<revision> [DEADLINE=seconds] [WORKERS=n] bash bench/gpu_suite.sh [results dir]
#
# Offline machines install what the image lacks from wheels in .whl/ (PIP_ARGS); the machine's own torch
# and triton are used as they are. Writes gpu_tests_<gpu>.txt (revision, GPU, versions, command, the
# pytest summary line, failures, the slowest tests) and the full log beside it, one line per test as it
# ends; exits with pytest's status. DEADLINE interrupts pytest (SIGINT) so a run that is cut short still
# lists its failures.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-bench/results}}
mkdir -p "$out"
rev=${TILEINFER_GIT_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export TILEINFER_GIT_REV=$rev
workers=${WORKERS:-$(nproc)}
deadline=${DEADLINE:-0}
pip_args=${PIP_ARGS:-}
if [ -z "$pip_args" ] && [ -d .whl ]; then
  pip_args="--no-index --find-links .whl"
fi
log="$out/gpu_tests.log"
start=$(date +%s)
# -vv: pytest.ini's -q takes one back, and the log then names each test as it ends
# worksteal: an idle worker takes tests another has queued, so slow tests queued behind each other on one
# worker do not set the wall time (a run cut by DEADLINE at a660bb8 left two such tests unfinished)
pytest_args="-n $workers --dist worksteal -p no:cacheprovider -rfE -vv --durations=20"
timeout -s INT "$deadline" make test PIP_ARGS="$pip_args" PYTEST_ARGS="$pytest_args" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
elapsed=$(( $(date +%s) - start ))
versions=$(.venv/bin/python -c "import torch, triton; print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU', '|', torch.__version__, '|', triton.__version__)" 2>/dev/null || echo "unknown | unknown | unknown")
gpu=${versions%% |*}
tag=$(echo "$gpu" | grep -oE "H[12]00" | head -1 | tr 'H' 'h'); tag=${tag:-$(echo "$gpu" | tr 'A-Z ' 'a-z_')}
summary=$(grep -E "[0-9]+ (passed|failed|error)" "$log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')
{
  echo "revision: $rev"
  echo "gpu | torch | triton: $versions"
  echo "command: TILEINFER_GIT_REV=$rev bash bench/gpu_suite.sh  (make test PIP_ARGS=\"$pip_args\" PYTEST_ARGS=\"$pytest_args\")"
  echo "wall: ${elapsed} s, exit status $rc"
  echo "summary: ${summary:-none (set-up failed before pytest ran)}"
  grep -oE "(FAILED|ERROR) tests/[^ ]+" "$log" | sort -u | sed 's/^/  /'
  collected=$(grep -oE "\[[0-9]+ items\]" "$log" | tail -1 | tr -dc 0-9)
  ended=$(grep -cE "^\[gw[0-9]+\] .*(PASSED|SKIPPED|FAILED|ERROR|XFAIL|XPASS) tests/" "$log")
  echo "collected: ${collected:-?}, ended: $ended"
  # -vv names a test when a worker starts it and again when it ends: those started and never ended
  comm -23 <(grep -E "^tests/[^ ]+::" "$log" | sed 's/ *$//' | sort -u) \
           <(grep -E "^\[gw[0-9]+\] " "$log" | grep -oE "(PASSED|SKIPPED|FAILED|ERROR|XFAIL|XPASS) tests/.*$" | sed -E 's/^[A-Z]+ //; s/ *$//' | sort -u) \
    | sed 's/^/  not ended: /'
  echo "slowest:"
  grep -E "^[0-9.]+s (call|setup|teardown) " "$log" | head -5 | sed 's/^/  /'
} > "$out/gpu_tests_${tag}.txt"
cat "$out/gpu_tests_${tag}.txt"
exit "$rc"

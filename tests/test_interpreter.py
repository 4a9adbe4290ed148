"""Without a GPU every entry point that runs kernels runs Triton under its interpreter, whatever it imports
first: Triton defines its own library functions as it is imported, so tileinfer.ops must decide before
that (an entry point that imported triton first recorded every kernel as an InterpreterError)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
ENTRY_POINTS = ["tileinfer", "tileinfer.cli", "tileinfer_profiling", "tileinfer_profiling.cli",
                "tileinfer_profiling.notebook", "tileinfer_profiling.split_explorer", "bench.attention_bench",
                "bench.gemm_bench", "bench.pointwise_bench", "bench.engine_bench", "bench.long_prompt_bench",
                "bench.ref.tileinfer_spec", "bench.features"]
CHECK = ("import importlib, os, sys; os.environ.pop('TRITON_INTERPRET', None); importlib.import_module(sys.argv[1]); "
         "import triton.language as tl; print(type(tl.sum).__name__)")


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the kernels are compiled, not interpreted")
@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_entry_point_runs_triton_interpreted_without_a_gpu(module):
    run = subprocess.run([sys.executable, "-c", CHECK, module], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == "InterpretedFunction"

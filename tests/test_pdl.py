"""Programmatic Dependent Launch: off on the CPU and under the interpreter whatever the setting; when on,
a step kernel compiles for sm_90 with its grid-dependency wait and trigger and the launch flag."""

import os
import subprocess
import sys
from pathlib import Path

import torch

from tileinfer.ops import pdl

ROOT = Path(__file__).resolve().parents[1]

COMPILE = """
import torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver


class CompileOnly:  # an sm_90 device that compiles and never launches
    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self):
        return torch.device("cpu")


driver.set_active(CompileOnly())
from tileinfer.ops.rmsnorm import _rms_norm_kernel

x = torch.empty(2, 64, dtype=torch.bfloat16)
for on in (False, True):
    w = torch.empty(64, dtype=torch.bfloat16)
    k = _rms_norm_kernel.warmup(x, x, w, x, x, w, 64, 64, 64, 64, 64, 1e-6,
                                HAS_RESIDUAL=True, HAS_SCALE=False, BLOCK_H=64, PDL=on, grid=(2,),
                                **({"launch_pdl": True} if on else {}))
    ptx = k.asm["ptx"]
    print(on, "griddepcontrol.wait" in ptx, "griddepcontrol.launch_dependents" in ptx, k.metadata.launch_pdl)
"""


def test_off_on_the_cpu_whatever_the_setting():
    was = pdl.is_enabled()
    try:
        pdl.set_enabled(True)
        assert not pdl.enabled_for(torch.device("cpu"))
        assert pdl.launch_options(torch.device("cpu")) == {"PDL": False}
    finally:
        pdl.set_enabled(was)


def test_a_step_kernel_compiles_for_sm90_with_pdl():
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", COMPILE], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["False False False False", "True True True True"], out.stdout

"""The public DFlash reference (`pip install --no-deps dflash==0.1.0`): `dflash.model.dflash_generate` on a
transformers target and its `DFlashDraftModel`, eager, dynamic caches.

With random weights its drafts are almost never accepted (~1 token per step), so its decode tok/s is its
step rate; the row also carries the step split into the drafter pass and the 16-token verify forward,
timed apart over one more reply, which is what its step costs at any acceptance.
"""

import time
from importlib import metadata

import torch

from bench.peers import hf
from bench.peers.hf import Reply

ENGINE = "dflash"
MODE = "eager"


def version():
    try:
        return metadata.version("dflash")
    except metadata.PackageNotFoundError:
        return ""


def load_drafter(path, device, dtype=torch.bfloat16):
    from dflash.model import DFlashDraftModel
    return DFlashDraftModel.from_pretrained(str(path), dtype=dtype).to(device).eval()


class _Timed:
    """Wraps a module's forward: wall ms of every call, the device synchronized around it."""

    def __init__(self, module):
        self.module, self.forward, self.ms = module, module.forward, []

    def __call__(self, *args, **kwargs):
        sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        sync()
        t0 = time.perf_counter()
        out = self.forward(*args, **kwargs)
        sync()
        self.ms.append((time.perf_counter() - t0) * 1e3)
        return out

    def __enter__(self):
        self.module.forward = self
        return self

    def __exit__(self, *exc):
        del self.module.forward  # back to the class's forward


class DFlashRefRunner:
    """`dflash_generate` greedy with the drafter's block; `reply` returns its acceptance lengths too."""

    engine = ENGINE
    mode = MODE
    dflash = True

    def __init__(self, target, drafter, stop_ids=None):
        import dflash.model as dm
        self.dm, self.target, self.drafter = dm, target, drafter
        self.stop_ids = list(stop_ids) if stop_ids else None
        self.block_size = int(drafter.block_size)
        self.version = version()
        self.note = f"on transformers {hf.version()}"
        if target.device.type != "cuda":  # its stats timer synchronizes CUDA
            dm._cuda_time = time.perf_counter

    def prepare(self, ids, new_tokens):
        pass

    def reply(self, ids, new_tokens):
        x = torch.tensor([ids], device=self.target.device)
        out = self.dm.dflash_generate(self.drafter, self.target, x, max_new_tokens=new_tokens,
                                      stop_token_ids=self.stop_ids, return_stats=True)
        tokens = out.output_ids[0, len(ids):].tolist()
        acceptance = list(out.acceptance_lengths)
        tps = sum(acceptance) / len(acceptance) if acceptance else 1.0
        return Reply(tokens, steps=len(acceptance), tokens_per_step=tps, acceptance=acceptance)

    def pass_times(self, ids, new_tokens):
        """(drafter, verify) ms per step over one reply: every drafter call, every target call but the
        prefill (the first)."""
        with _Timed(self.drafter) as drafter, _Timed(self.target) as target:
            reply = self.reply(ids, new_tokens)
        steps = max(reply.steps, 1)
        return sum(drafter.ms) / steps, sum(target.ms[1:]) / steps

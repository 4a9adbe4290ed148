"""Column flow from one kernel to the skinny GEMM after it (the MLP's gate_up to its down projection, the
decode attention to the o projection, and across the RMSNorms: the o projection to the gate_up, the down
projection to the next layer's qkv): the producer counts the columns of its output it has stored (in
column-rows: a tile of all M rows counts its columns × M, an attention row block its columns × its rows),
FLOW_CHUNK columns to a counter, and the consumer's programs, launched while the producer still runs
(PDL), wait for the counters of the K-blocks they are about to read instead of for the producer's last
program. A down program whose K range the producer's first tiles make starts on it while the producer's
last wave runs.

Why it cannot deadlock: under PDL the consumer's programs become resident only once every producer program has
started (each triggers its dependents first thing), so no producer program waits for a slot a spinning
consumer holds.

Why a consumer reads only its own producer's counts: the consumer's last program to finish (a count after the
chunks) clears its set, and each producer launch counts into the next of its pair's RING sets. A consumer
starts (PDL) once its producer's programs have, and so may start while the consumer before it, of the same
pair, still runs and has not cleared its set yet: had they shared one set, it would read the earlier
producer's full counts and go on before its own producer stored a column (seen on an H100 with other
processes' kernels interleaved). With a ring, the earlier consumer still running on this one's set would be
RING pairs back: every kernel here waits for its predecessor's grid before it exits, so all the launches
between would be resident at once, at least 2·RING + 1 = 129 grids, more than the 128 a GPU runs together. A
consumer skips the grid-dependency wait at its start but makes it before it exits, so a grid's completion
still implies its predecessor's, and a chain of flows (o → gate_up → down → qkv) stays ordered.

Each pair has counters of its own (`PAIRS`), and each consumer its arrival counters and split-K scratch
(`consumer_partials`): a consumer's programs run beside its producer's, which may be a consumer itself. The
consumer reads nothing else the producer's predecessor writes before its first flow wait (residual rows and
row sums come in its epilogue, after all of its tile's K), and writes nothing but its split-K partials before
a tile's whole K is counted: when every producer program has stored its tiles, so is done with its inputs, and
when the consumer of the pair before it has finished, since a producer signals only after a grid-dependency
wait (its own, or in a chain of flows the decode attention's) that follows that consumer.

A producer's counts must meet their consumer: a pair produced and not consumed would leave full counters
for the next consumer to read stale columns by. `produced`/`consumed` keep that book on the host, per device
and pair, and a producer whose last counts were never consumed (an exception between the two launches)
has its counters zeroed first.
"""

import os

import torch
import triton
import triton.language as tl

from tileinfer.errors import ConfigError
from tileinfer.ops import INTERPRET
from tileinfer.ops.switches import Switch

# Where the MLP's down projection is fed by its gate_up's flow (`linear.mlp_add`): "on" every skinny MLP,
# "off" none, "int8" (the default) where the gate_up is an INT8 GEMV. On an H100 (Qwen3-4B shape, random
# weights, 1k; bench/results/floor_mlp_flow_h100.csv) INT8 plain decode went 333 -> 386 tok/s with it: its
# gate_up is bound by the int8 conversion, and the down projection's weight streams beside it. BF16 plain
# decode went 289 -> 282 (its gate_up is bound by bytes already) and the DFlash steps were slower. Against
# the H100's full tunes (b615014, floor_flows_h100.csv, one run) INT8 plain decode went 478.5 -> 466.4 with it:
# the default stands until both GPUs are measured again.
MLP_FLOW_MODES = ("off", "on", "int8")
# The o projection fed by the decode attention's flow (`Ops.attention_flows`): off, since on an H100 BF16 plain
# decode went 288.9 -> 284.4 tok/s with it (bench/results/floor_flows_h100.csv)
O_FLOW = Switch("TILEINFER_O_FLOW")
set_o_flow, o_flow_label = O_FLOW.set, O_FLOW.label


class _FlowSetting:
    def __init__(self, env: str, default: str, what: str):
        self.what = what
        self.mode = os.environ.get(env, default)
        if self.mode not in MLP_FLOW_MODES:
            raise ConfigError(f"{env} must be one of {', '.join(MLP_FLOW_MODES)}, got {self.mode!r}")

    def set(self, mode: str) -> None:
        if mode not in MLP_FLOW_MODES:
            raise ValueError(f"{self.what} is one of {', '.join(MLP_FLOW_MODES)}, got {mode!r}")
        self.mode = mode

    def label(self) -> str:
        return self.mode

    def flows(self, int8_gemv: bool) -> bool:
        """Whether a pair whose deciding GEMM is (`int8_gemv`) or is not an INT8 GEMV runs with the flow."""
        return self.mode == "on" or (self.mode == "int8" and int8_gemv)


MLP_FLOW = _FlowSetting("TILEINFER_MLP_FLOW", "int8", "MLP flow")
set_mlp_flow, mlp_flow_label = MLP_FLOW.set, MLP_FLOW.label
# The folded-norm projections fed by the residual projection before them (`Ops.residual_flows`): the
# gate_up by the o projection, the next layer's qkv by the down projection; "int8": where that consumer is
# an INT8 GEMV. Off: on an H100 it slowed INT8 plain decode 377.9 -> 254.4 tok/s ("int8") and BF16 288.9 ->
# 262.1 ("on"; bench/results/floor_flows_h100.csv), the consumers' GEMVs waiting where they would stream.
RES_FLOW = _FlowSetting("TILEINFER_RES_FLOW", "off", "residual flow")
set_res_flow, res_flow_label = RES_FLOW.set, RES_FLOW.label

FLOW_CHUNK: tl.constexpr = tl.constexpr(512)  # producer columns per counter
FLOW_SCAN: tl.constexpr = tl.constexpr(16)  # counters a waiting consumer reads at once
SLEEP: tl.constexpr = tl.constexpr(not INTERPRET)  # back off between polls (the interpreter has no PTX)

_KEPT: dict = {}
_RETIRED: list = []  # outgrown buffers stay allocated: CUDA graphs captured on them still replay
SET_SLOTS = 1024  # counters in one set: a chunk's each (523,776 columns at most), then the finish count
RING = 64  # counter sets per pair, each producer launch taking the next (see the module's docstring)


PAIRS = ("mlp", "o", "gate_up", "qkv")  # gate_up -> down, attention -> o, o -> gate_up, down -> next qkv
_NEXT: dict = {}  # (device, pair) -> the ring's set its next producer counts into
_UNCONSUMED: dict = {}  # (device, pair) -> the set its last producer counted into, until a consumer takes it


def flow_counters(device: torch.device, columns: int, pair: str) -> torch.Tensor:
    """The int32 counter sets of `pair` (one of PAIRS) on `device`, [RING, SET_SLOTS]: in each, a counter per
    FLOW_CHUNK of a flow's `columns` producer columns, then the consumer's finish count. Kept for the process;
    every flow launch leaves its set zeroed."""
    _check_pair(pair)
    if triton.cdiv(columns, FLOW_CHUNK.value) + 1 > SET_SLOTS:
        raise ValueError(f"a flow carries at most {(SET_SLOTS - 1) * FLOW_CHUNK.value} columns, got {columns}")
    return _kept(f"counters {pair}", device, RING * SET_SLOTS, torch.int32).view(RING, SET_SLOTS)


def _device(device) -> torch.device:
    """`device` with its index: "cuda" and "cuda:0" are one device's buffers and bookkeeping."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _check_pair(pair: str) -> None:
    if pair not in PAIRS:
        raise ValueError(f"a flow's pair is one of {', '.join(PAIRS)}, got {pair!r}")


def produced(device: torch.device, pair: str, columns: int) -> torch.Tensor:
    """Book a producer launch of `pair` on `device` with `columns` output columns: the counter set its counts
    go to, the ring's next. A set an earlier producer left unconsumed is zeroed first."""
    sets = flow_counters(device, columns, pair)
    key = (_device(device), pair)
    if key in _UNCONSUMED:
        sets[_UNCONSUMED[key]].zero_()
    _UNCONSUMED[key] = slot = _NEXT.get(key, 0)
    _NEXT[key] = (slot + 1) % RING
    return sets[slot]


def consumer_counters(device: torch.device, pair: str, columns: int) -> torch.Tensor:
    """The counter set of `pair`'s last producer on `device`, for the consumer launched after it; a consumer
    with no producer waiting would spin forever, so that is an error."""
    sets = flow_counters(device, columns, pair)
    key = (_device(device), pair)
    if key not in _UNCONSUMED:
        raise ValueError(f"a {pair!r} flow consumer is launched right after its producer, and none is waiting")
    return sets[_UNCONSUMED[key]]


def consumed(device: torch.device, pair: str) -> None:
    """Book a consumer launch of `pair` on `device`: it leaves the counters zeroed."""
    _check_pair(pair)
    _UNCONSUMED.pop((_device(device), pair), None)


def unconsumed(device: torch.device) -> list[str]:
    """The pairs on `device` whose last producer's counts no consumer has taken."""
    device = _device(device)
    return sorted(p for d, p in _UNCONSUMED if d == device)


def consumer_partials(device: torch.device, shape: tuple, pair: str, kind: str = "partials") -> torch.Tensor:
    """fp32 scratch of `shape` for the split-K partials (or another `kind` of per-split scratch, such as a
    norm's Σx²) of `pair`'s consumer, outside the caching allocator: a buffer torch.empty handed it could be
    one the producer, still running, had and freed; and each consumer has its own, since a consumer may run
    beside the one before it."""
    _check_pair(pair)
    n = 1
    for d in shape:
        n *= d
    return _kept(f"{kind} {pair}", device, n, torch.float32)[:n].view(shape)


def _kept(kind: str, device: torch.device, n: int, dtype: torch.dtype) -> torch.Tensor:
    device = _device(device)
    buf = _KEPT.get((kind, device))
    if buf is None or buf.numel() < n:
        if buf is not None:
            _RETIRED.append(buf)
        buf = _KEPT[(kind, device)] = torch.zeros(n, dtype=dtype, device=device)
    return buf


@triton.jit
def _backoff(v):
    if SLEEP:
        tl.inline_asm_elementwise("nanosleep.u32 200;\n\tmov.u32 $0, $1;", "=r,r", [v], dtype=tl.int32,
                                  is_pure=False, pack=1)


@triton.jit
def flow_ready(flow_ptr, ready, need, K, M, SCAN: tl.constexpr = FLOW_SCAN):
    """Wait until x's columns below `need` are stored in all M rows, given those below `ready` are: SCAN
    counters from `ready`'s chunk on are read together (acquire) and the bound moves to the first chunk
    short of its columns × M; reads repeat, with a back-off, until it reaches `need`. Returns the new
    bound. A narrow SCAN for a wait of a chunk or two keeps the waiting loop's registers few."""
    while ready < need:
        c0 = ready // FLOW_CHUNK
        cs = c0 + tl.arange(0, SCAN)
        live = cs * FLOW_CHUNK < K
        got = tl.atomic_add(flow_ptr + cs, 0, mask=live, sem="acquire")
        full = (got >= tl.minimum(FLOW_CHUNK, K - cs * FLOW_CHUNK) * M) | (~live)
        short = tl.min(tl.where(full, SCAN, tl.arange(0, SCAN)), axis=0)
        moved = tl.maximum(ready, (c0 + short) * FLOW_CHUNK)
        if moved == ready:
            _backoff(ready)
        ready = moved
    return ready


@triton.jit
def flow_signal(flow_ptr, n0, n_end, rows):
    """Count the stored columns [n0, n_end) of `rows` rows of the producer's output into their chunks, in
    column-rows (release: the stores, ordered before by the caller's barrier, are visible to whoever
    acquires the count)."""
    for c in range(n0 // FLOW_CHUNK, (n_end - 1) // FLOW_CHUNK + 1):
        cols = tl.minimum(n_end, (c + 1) * FLOW_CHUNK) - tl.maximum(n0, c * FLOW_CHUNK)
        tl.atomic_add(flow_ptr + c, cols * rows, sem="release")


@triton.jit
def flow_finish(flow_ptr, K, programs):
    """The consumer program's last count: itself finished; the last of `programs` clears the counters (the
    caller then waits for the producer's grid, `tileinfer.ops.flow`'s ordering)."""
    chunks = tl.cdiv(K, FLOW_CHUNK)
    if tl.atomic_add(flow_ptr + chunks, 1, sem="acq_rel") == programs - 1:
        for c in range(chunks):
            tl.atomic_xchg(flow_ptr + c, 0, sem="relaxed")
        tl.atomic_xchg(flow_ptr + chunks, 0, sem="relaxed")

"""Kernel sweeps as DataFrames: attention over split counts (vs SDPA), GEMMs over M and weight types.

Every row carries gpu ("cpu" without one), torch, triton, git_rev and the timer used. On a GPU each
point is the median of `do_bench_cudagraph` with the inputs rotated across enough copies to miss L2;
on a CPU, wall clock over tiny shapes (the Triton kernels then run under the interpreter).
`best_splits` and `gemm_floor_table` summarize sweeps, live or recorded.
"""

import pandas as pd
import torch
import torch.nn.functional as F

from tileinfer.ops.decode_attention import decode_attention
from tileinfer.ops.linear import Linear, linear, linear_ref, quantize_linear
from tileinfer.shapes import QWEN3_4B, QWEN3_4B_DFLASH
from tileinfer_profiling.roofline import add_achieved, attention_bytes, attention_flops, linear_bytes, linear_flops
from tileinfer_profiling.run_info import resolve_device, run_info
from tileinfer_profiling.timing import bench_us, copies_for, rotating


def _time(fn, device, rep_ms):
    """(µs, timer, error): one failing point (a shape a kernel rejects) becomes a row with its error."""
    try:
        t_us, timer = bench_us(fn, device, rep_ms=rep_ms)
        return t_us, timer, ""
    except Exception as e:  # noqa: BLE001 — recorded in the row, the sweep goes on
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return float("nan"), "failed", f"{type(e).__name__}: {e}"[:300]


def _bar(total, desc, progress):
    """A progress bar on stderr over `total` points when `progress`, else one that shows nothing."""
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="point", disable=not progress, leave=False)


def _ours_attention(q, k_cache, v_cache, kv_len_t, causal, num_splits):
    return decode_attention(q, k_cache, v_cache, kv_len_t, causal=causal, num_splits=num_splits)


def _sdpa(q_len, kv_len, causal):
    """(label, fn(q, k_cache, v_cache)) — F.scaled_dot_product_attention on the cache's layout."""
    mask = None
    if causal and q_len > 1:
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(q_len, kv_len)

    def run(q, k_cache, v_cache):
        q4 = q.transpose(0, 1).unsqueeze(0)
        k4 = k_cache[:kv_len].transpose(0, 1).unsqueeze(0)
        v4 = v_cache[:kv_len].transpose(0, 1).unsqueeze(0)
        return F.scaled_dot_product_attention(q4, k4, v4, attn_mask=mask, enable_gqa=True)

    return ("sdpa causal lower-right" if mask is not None else "sdpa"), run


def _attention_rows(kind, kv_lens, q_lens, num_splits_list, causal, num_q_heads, num_kv_heads, head_dim,
                    dtype, device, sdpa, ceilings, rep_ms, extra=None, progress=False):
    device = resolve_device(device)
    info = run_info(device)
    rows = []
    bar = _bar(len(kv_lens) * len(q_lens) * (len(num_splits_list) + bool(sdpa)), kind, progress)
    for kv_len in kv_lens:
        for q_len in q_lens:
            cache_bytes = 2 * kv_len * num_kv_heads * head_dim * dtype.itemsize

            def make(i, kv_len=kv_len, q_len=q_len):
                g = torch.Generator(device="cpu").manual_seed(i)
                k = torch.randn(kv_len, num_kv_heads, head_dim, generator=g).to(device, dtype)
                v = torch.randn(kv_len, num_kv_heads, head_dim, generator=g).to(device, dtype)
                q = torch.randn(q_len, num_q_heads, head_dim, generator=g).to(device, dtype)
                return q, k, v, torch.tensor([kv_len], dtype=torch.int32, device=device)

            pool = [make(i) for i in range(copies_for(cache_bytes, device))]
            common = dict(kv_len=kv_len, q_len=q_len, causal=causal, num_q_heads=num_q_heads,
                          num_kv_heads=num_kv_heads, head_dim=head_dim, dtype=str(dtype).removeprefix("torch."),
                          flops=attention_flops(kv_len, q_len, num_q_heads, head_dim, causal), **(extra or {}))
            for s in num_splits_list:
                nxt = rotating(pool)

                def call(s=s, nxt=nxt):
                    q, k, v, kv_t = nxt()
                    return _ours_attention(q, k, v, kv_t, causal, s)

                t_us, timer, error = _time(call, device, rep_ms)
                bar.update()
                rows.append(dict(impl="ours", impl_source="triton decode_attention", num_splits=s, time_us=t_us,
                                 timer=timer, error=error,
                                 bytes=attention_bytes(kv_len, q_len, num_kv_heads, head_dim, dtype.itemsize,
                                                       num_q_heads=num_q_heads, num_splits=s), **common))
            if sdpa:
                label, run = _sdpa(q_len, kv_len, causal)
                try:
                    run(*pool[0][:3])
                except RuntimeError as e:
                    # the lower-right causal mask has no kernel here: time the unmasked call (same reads)
                    label, run = f"sdpa non-causal (causal failed: {type(e).__name__})", _sdpa(q_len, kv_len, False)[1]
                nxt = rotating(pool)
                t_us, timer, error = _time(lambda nxt=nxt, run=run: run(*nxt()[:3]), device, rep_ms)
                bar.update()
                rows.append(dict(impl="sdpa", impl_source=label, num_splits=float("nan"), time_us=t_us, timer=timer,
                                 error=error,
                                 bytes=attention_bytes(kv_len, q_len, num_kv_heads, head_dim, dtype.itemsize,
                                                       num_q_heads=num_q_heads), **common))
            del pool
    bar.close()
    df = add_achieved(pd.DataFrame(rows), ceilings)
    df.insert(0, "sweep", kind)
    for key, value in info.items():
        df[key] = value
    return df


def attention_sweep(kv_lens=(1024, 8192, 32768), q_lens=(1, 16), num_splits_list=(1, 2, 4, 8, 16, 32), *,
                    causal=True, num_q_heads=QWEN3_4B.q_heads, num_kv_heads=QWEN3_4B.kv_heads,
                    head_dim=QWEN3_4B.head_dim, dtype=torch.bfloat16,
                    device=None, sdpa=True, ceilings=None, rep_ms=50, progress=False):
    """Our split-KV decode attention at each (kv_len, q_len, num_splits), plus one SDPA row per
    (kv_len, q_len). Queries are the last q_len positions (causal within the block). Defaults: Qwen3-4B heads.
    `progress`: a bar on stderr, one step per point.

    Columns: sweep, impl (ours/sdpa), impl_source, num_splits, time_us, timer, bytes, flops, kv_len,
    q_len, ..., gbs, tflops, frac_read_bw, frac_bf16_flops, floor_us, gpu, device, torch, triton, git_rev.
    """
    return _attention_rows("attention", kv_lens, q_lens, num_splits_list, causal, num_q_heads, num_kv_heads,
                           head_dim, dtype, device, sdpa, ceilings, rep_ms, progress=progress)


def drafter_attention_sweep(kv_lens=(1024, 8192, 32768), num_splits_list=(1, 2, 4, 8, 16, 32), *,
                            block_size=QWEN3_4B_DFLASH.block_size,
                            num_q_heads=QWEN3_4B.q_heads, num_kv_heads=QWEN3_4B.kv_heads,
                            head_dim=QWEN3_4B.head_dim, dtype=torch.bfloat16, device=None,
                            sdpa=True, ceilings=None, rep_ms=50, progress=False):
    """The DFlash drafter's attention: block_size queries over kv_len context positions + the block,
    not causal. Rows as `attention_sweep`, kv_len = context + block; context_len says the context."""
    df = _attention_rows("drafter-attention", [n + block_size for n in kv_lens], [block_size], num_splits_list,
                         False, num_q_heads, num_kv_heads, head_dim, dtype, device, sdpa, ceilings, rep_ms,
                         progress=progress)
    df.insert(df.columns.get_loc("kv_len"), "context_len", df["kv_len"] - block_size)
    return df


def _make_linear(w, weights):
    lin = Linear(weight=w)
    return quantize_linear(lin) if weights == "int8" else lin


def gemm_sweep(shapes=None, ms=(1, 16), weights=("bf16", "int8"), impls=("ours", "cublas"), *,
               dtype=torch.bfloat16, device=None, ceilings=None, rep_ms=50, progress=False):
    """y = x @ Wᵀ for each shape × m × weight type × implementation (`progress`: a bar on stderr).

    `shapes`: {name: (n, k)} or [(name, n, k)]; default Qwen3-4B's qkv, o, gate_up, down. "ours" is
    `tileinfer.ops.linear.linear`, "cublas" is `linear_ref` (F.linear; INT8: dequantize then F.linear).
    Weights are rotated across copies so each call reads them from HBM.
    """
    device = resolve_device(device)
    if shapes is None:
        shapes = QWEN3_4B.linears()
    elif isinstance(shapes, dict):
        shapes = [(name, n, k) for name, (n, k) in shapes.items()]
    funcs = {"ours": linear, "cublas": linear_ref}
    sources = {"ours": "triton linear", "cublas": "linear_ref"}
    info = run_info(device)
    rows = []
    bar = _bar(len(shapes) * len(weights) * len(ms) * len(impls), "gemm", progress)
    for name, n, k in shapes:
        for wt in weights:
            copies = copies_for(linear_bytes(n, k, 1, wt), device)
            g = torch.Generator(device="cpu").manual_seed(0)
            lins = [_make_linear((torch.randn(n, k, generator=g) * k**-0.5).to(device, dtype), wt)
                    for _ in range(copies)]
            for m in ms:
                x = torch.randn(m, k, generator=g).to(device, dtype)
                for impl in impls:
                    nxt = rotating(lins)
                    fn = funcs[impl]
                    t_us, timer, error = _time(lambda fn=fn, nxt=nxt, x=x: fn(x, nxt()), device, rep_ms)
                    bar.update()
                    rows.append(dict(shape=name, n=n, k=k, m=m, weights=wt, impl=impl,
                                     impl_source=sources[impl],
                                     time_us=t_us, timer=timer, error=error, bytes=linear_bytes(n, k, m, wt),
                                     flops=linear_flops(n, k, m)))
            del lins
    bar.close()
    df = add_achieved(pd.DataFrame(rows), ceilings)
    df.insert(0, "sweep", "gemm")
    for key, value in info.items():
        df[key] = value
    return df


def best_splits(sweep):
    """Per (kv_len, q_len) of an attention sweep: the fastest split count, its time, SDPA's time and the
    speed-up over SDPA."""
    ours = sweep[sweep["impl"] == "ours"]
    best = ours.loc[ours.groupby(["kv_len", "q_len"])["time_us"].idxmin(), ["kv_len", "q_len", "num_splits", "time_us"]]
    one = ours[ours["num_splits"] == 1].set_index(["kv_len", "q_len"])["time_us"].rename("one_split_us")
    sdpa = sweep[sweep["impl"] == "sdpa"].groupby(["kv_len", "q_len"])["time_us"].first().rename("sdpa_us")
    out = best.set_index(["kv_len", "q_len"]).join(one).join(sdpa)
    out = out.round({"time_us": 2, "one_split_us": 2, "sdpa_us": 2})
    out["vs_sdpa"] = out["sdpa_us"] / out["time_us"]  # unrounded: under the interpreter it is far below 0.01
    return out.rename(columns={"num_splits": "best_num_splits", "time_us": "best_us"}).reset_index()


def gemm_floor_table(df):
    """Time (µs) of each implementation of a GEMM sweep beside its floor, one row per shape × m × weights."""
    wide = df.pivot_table(index=["shape", "m", "weights"], columns="impl", values="time_us", sort=False)
    wide["floor_us"] = df.groupby(["shape", "m", "weights"], sort=False)["floor_us"].first()
    return wide.round(2)

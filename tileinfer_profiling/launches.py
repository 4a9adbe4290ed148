"""Each launch of a decoding step, timed where the step runs: inside its CUDA graph.

Kernels replayed from a graph carry no layer scopes, but a step's graph replays the launches its eager
run issues, in the same order. `launch_sites` names each launch of one step from the eager trace
(model, layer, part, and its rank among that part's launches of its kernel class) and times it from the
graph trace, walking the graph's kernels against that sequence: a kernel that is not the next one
expected (a copy the eager run does not make) is counted as unattributed and skipped.
"""

import math
from collections import Counter

import pandas as pd

from tileinfer import byte_model
from tileinfer.shapes import ModelShape

SITE_COLUMNS = ["site", "model", "layer", "part", "kernel_class", "rank", "name"]


def _in_steps(kernels: pd.DataFrame, attributed: bool = True) -> pd.DataFrame:
    """The kernels of decoding steps, in start order: those of a phase other than prefill (`attributed`,
    as an eager trace has them), or every kernel outside prefill (a graph's replays carry no phase)."""
    keep = kernels["phase"] != "prefill"
    if attributed:
        keep &= kernels["phase"].notna()
    return kernels[keep].sort_values("start_us", kind="stable").reset_index(drop=True)


def _steps(k: pd.DataFrame) -> pd.Series:
    """A step number for each in-step kernel: a step begins where the phase returns to the first kernel's
    (a plain step: decode, accept; a DFlash step: drafter, verify, accept)."""
    first = k["phase"].iloc[0]
    return ((k["phase"] == first) & (k["phase"].shift() != first)).cumsum()


def step_sequence(eager: pd.DataFrame) -> pd.DataFrame:
    """The launches of one decoding step of the eager trace, in order (SITE_COLUMNS): those of its most
    common step, the first of them on a tie (a request's first and last steps may launch more or fewer).
    `rank` numbers a part's launches of one kernel class (a layer's attention GEMMs: 0 is qkv, 1 is o_proj)."""
    k = _in_steps(eager)
    if not len(k):
        raise ValueError("the eager trace has no decoding steps")
    steps = [g for _, g in k.groupby(_steps(k), sort=True)]
    names, _ = Counter(tuple(g["name"]) for g in steps).most_common(1)[0]
    one = next(g for g in steps if tuple(g["name"]) == names)
    one = one[["model", "layer", "part", "kernel_class", "name"]].reset_index(drop=True)
    one["site"] = range(len(one))
    one["rank"] = one.groupby(["model", "layer", "part", "kernel_class"], dropna=False).cumcount()
    return one[SITE_COLUMNS]


def align(sequence: pd.DataFrame, kernels: pd.DataFrame, confirm: int = 3) -> pd.Series:
    """The site of each decoding-step kernel of `kernels` (in start order), -1 where none fits. A kernel
    takes the launch `sequence` expects next if it has that name; otherwise the site, nearest after the
    expected one, where it and the `confirm` - 1 kernels after it match the sequence (a graph leaves out
    what only the eager run launches, e.g. a copy, and a traced run may replay the drafter's graph where
    the target's launches were expected); -1 where there is none (a launch the eager step did not make)."""
    names, n = sequence["name"].tolist(), len(sequence)
    trace = kernels["name"].tolist()
    sites, j = [], 0
    for i, name in enumerate(trace):
        if name == names[j]:
            sites.append(j)
            j = (j + 1) % n
            continue
        window = trace[i:i + confirm]
        found = next((c % n for c in range(j, j + n)
                      if all(names[(c + d) % n] == w for d, w in enumerate(window))), None)
        if found is None:
            sites.append(-1)
        else:
            sites.append(found)
            j = (found + 1) % n
    return pd.Series(sites, index=kernels.index, dtype=int)


def launch_sites(eager: pd.DataFrame, graphs: pd.DataFrame | None = None) -> tuple[pd.DataFrame, float]:
    """(one row per launch of a decoding step: SITE_COLUMNS, `own_us` and `duration_us` (means over the
    steps, from `graphs`, else from the eager trace), `timed_in` ("graphs"/"eager"), `calls`; the share
    of the timed trace's kernels left unattributed)."""
    sequence = step_sequence(eager)
    timed_in = "graphs" if graphs is not None and len(graphs) else "eager"
    k = _in_steps(graphs, attributed=False) if timed_in == "graphs" else _in_steps(eager)
    k = k.assign(site=align(sequence, k))
    unattributed = float((k["site"] < 0).mean()) if len(k) else 0.0
    times = (k[k["site"] >= 0].groupby("site")
             .agg(own_us=("own_us", "mean"), duration_us=("duration_us", "mean"), calls=("own_us", "size")))
    out = sequence.merge(times, left_on="site", right_index=True, how="left")
    out["timed_in"] = timed_in
    return out.reset_index(drop=True), unattributed


def target_roles(sites: pd.DataFrame, config, kv_len: int, weights: str = "bf16") -> pd.DataFrame:
    """`sites` with `role` (a target layer's qkv / o / gate_up / down GEMM, its attention, the LM head; else
    the kernel class) and `floor_bytes`, the weight or K/V bytes that launch must read (NaN for others)."""
    shape = ModelShape.of(config)
    linears = [(name, byte_model.linear_weight_bytes(n, k, weights)) for name, n, k in shape.linears()]
    kv_layer = kv_len * byte_model.kv_bytes_per_position(shape, byte_model.compute_bytes(weights)) // shape.layers
    roles, floors = [], []
    for s in sites.itertuples():
        role, floor = s.kernel_class, math.nan
        in_layer = s.model == "target" and not pd.isna(s.layer)
        if in_layer and s.kernel_class == "gemm" and s.rank < 2:
            role, floor = linears[s.rank + (2 if s.part == "mlp" else 0)]
        elif in_layer and s.kernel_class == "attention":
            role, floor = "attention", kv_layer
        elif s.model == "target" and pd.isna(s.layer) and s.kernel_class == "gemm":
            role, floor = "lm_head", byte_model.linear_weight_bytes(shape.vocab, shape.hidden, weights)
        roles.append(role)
        floors.append(floor)
    return sites.assign(role=roles, floor_bytes=floors)


def role_summary(sites: pd.DataFrame) -> pd.DataFrame:
    """A launch table (`target_roles`' rows) per model and role: launches per step, µs per step and per
    launch (own times), the bytes per step and the GB/s they were read at; most time first."""
    g = sites.groupby(["model", "role"], dropna=False)
    out = g.agg(launches=("site", "size"), us_per_step=("own_us", "sum"), us_per_launch=("own_us", "mean"),
                bytes_per_step=("floor_bytes", lambda b: b.sum(min_count=1))).reset_index()
    out["gb_s"] = out["bytes_per_step"] / out["us_per_step"] / 1e3
    return out.sort_values("us_per_step", ascending=False, ignore_index=True)

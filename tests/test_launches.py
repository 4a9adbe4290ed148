"""tileinfer_profiling.launches: a step's launches named from the eager trace, timed from the graph trace."""

import math

import pandas as pd
import pytest

from tileinfer.shapes import ModelShape
from tileinfer_profiling.launches import align, launch_sites, role_summary, step_sequence, target_roles

# one decoding step of a two-layer target: qkv, rope, attention, o, gate_up, down per layer, then the LM head
LAYER = [("gemm", "attention", "_skinny_gemm_kernel"), ("norm_rope", "attention", "_qk_norm_rope_kernel"),
         ("attention", "attention", "_split_kv_attention_kernel"), ("gemm", "attention", "_skinny_gemm_kernel"),
         ("gemm", "mlp", "_skinny_gemm_kernel"), ("gemm", "mlp", "_skinny_gemm_kernel")]


def step(layers=2):
    rows = [dict(kernel_class=c, part=p, name=n, model="target", layer=float(i), phase="decode")
            for i in range(layers) for c, p, n in LAYER]
    rows.append(dict(kernel_class="gemm", part=None, name="_skinny_gemm_kernel", model="target", layer=math.nan,
                     phase="decode"))
    rows.append(dict(kernel_class="other", part=None, name="accept_kernel", model="target", layer=math.nan,
                     phase="accept"))
    return rows


def trace(steps, own=lambda i: 1.0 + i, extra=None):
    """Kernels of `steps` decoding steps after a prefill kernel; `extra`: a kernel name inserted after the
    first kernel of each step (a copy the eager run does not make)."""
    rows = [dict(kernel_class="gemm", part=None, name="prefill_gemm", model="target", layer=math.nan, phase="prefill")]
    for s in range(steps):
        for i, r in enumerate(step()):
            rows.append({**r, "own_us": own(i), "duration_us": 2 * own(i)})
            if extra and i == 0:
                rows.append(dict(kernel_class="other", part=None, name=extra, model="target", layer=math.nan,
                                 phase="decode", own_us=100.0, duration_us=100.0))
    for t, r in enumerate(rows):
        r["start_us"] = float(t)
    return pd.DataFrame(rows)


def test_a_steps_launches_are_named_in_order_with_their_rank_in_the_part():
    seq = step_sequence(trace(3))
    assert len(seq) == 14 and seq["site"].tolist() == list(range(14))
    first = seq[seq["layer"] == 0]
    assert first["rank"].tolist() == [0, 0, 0, 1, 0, 1]  # qkv, rope, attention, o; gate_up, down


def test_the_most_common_step_names_the_launches():
    odd = trace(3)
    last = odd.index[odd["phase"] == "decode"][-1]
    odd.loc[last, "name"] = "another_kernel"  # the last step launches something else
    assert "another_kernel" not in set(step_sequence(odd)["name"])
    with pytest.raises(ValueError, match="no decoding steps"):
        step_sequence(trace(0))


def test_graph_kernels_take_the_site_of_the_launch_expected_next():
    seq = step_sequence(trace(2))
    graphs = trace(2, own=lambda i: 10.0 * (i + 1), extra="memcpy")
    graphs.loc[graphs["phase"] != "prefill", "phase"] = None  # replayed kernels carry no step scope
    sites = align(seq, graphs[graphs["phase"] != "prefill"].reset_index(drop=True))
    assert (sites == -1).sum() == 2 and sorted(set(sites) - {-1}) == list(range(14))
    table, unattributed = launch_sites(trace(2), graphs)
    assert unattributed == pytest.approx(2 / 30)
    assert table["own_us"].tolist() == [10.0 * (i + 1) for i in range(14)]
    assert (table["calls"] == 2).all() and (table["timed_in"] == "graphs").all()
    eager_only, _ = launch_sites(trace(2), None)
    assert (eager_only["timed_in"] == "eager").all() and eager_only["own_us"].tolist() == [1.0 + i for i in range(14)]


def test_a_launch_the_graph_leaves_out_does_not_stop_the_ones_after_it():
    seq = step_sequence(trace(2))
    graphs = trace(2, own=lambda i: 10.0 * (i + 1))
    graphs = graphs[graphs["name"] != "_qk_norm_rope_kernel"].reset_index(drop=True)
    graphs.loc[graphs["phase"] != "prefill", "phase"] = None
    table, unattributed = launch_sites(trace(2), graphs)
    assert unattributed == 0
    rope = table["name"] == "_qk_norm_rope_kernel"
    assert table.loc[rope, "own_us"].isna().all()
    assert table.loc[~rope, "own_us"].tolist() == [10.0 * (i + 1) for i in range(14) if not rope[i]]


def test_a_kernel_off_the_expected_launch_takes_the_site_its_neighbours_confirm():
    drafter, target = ["copy", "add", "gemm", "norm", "gemm", "rope"], ["add", "gemm", "rope", "attn", "gemm", "gemm"]
    seq = pd.DataFrame({"name": drafter + target})
    # a drafter replay without its first two launches where the target's first was expected: its first gemm
    # is the drafter's (followed by norm, gemm), not the target's nearest one
    kernels = pd.DataFrame({"name": drafter + drafter[2:] + target + ["memcpy"]})
    assert align(seq, kernels).tolist() == [*range(6), 2, 3, 4, 5, *range(6, 12), -1]


def test_roles_carry_the_bytes_they_must_read():
    shape = ModelShape(hidden=64, intermediate=96, layers=2, q_heads=4, kv_heads=2, head_dim=16, vocab=500)
    table, _ = launch_sites(trace(1))
    roles = target_roles(table, shape, kv_len=100)
    assert roles["role"].tolist()[:6] == ["qkv", "norm_rope", "attention", "o", "gate_up", "down"]
    assert roles["role"].iloc[-2] == "lm_head" and roles["role"].iloc[-1] == "other"
    by = roles.groupby("role")["floor_bytes"].first()
    assert by["qkv"] == shape.qkv_rows * 64 * 2 and by["down"] == 64 * 96 * 2 and by["lm_head"] == 500 * 64 * 2
    assert by["attention"] == 2 * 100 * 2 * 16 * 2  # K and V of one layer's 2 KV heads over 100 positions
    assert math.isnan(by["norm_rope"])
    int8 = target_roles(table, shape, kv_len=100, weights="int8").groupby("role")["floor_bytes"].first()
    assert int8["gate_up"] == 2 * 96 * 64 + 2 * 96 * 4  # one byte a weight and an fp32 scale a row


def test_roles_summed_per_step():
    shape = ModelShape(hidden=64, intermediate=96, layers=2, q_heads=4, kv_heads=2, head_dim=16, vocab=500)
    table, _ = launch_sites(trace(1, own=lambda i: 2.0))
    summary = role_summary(target_roles(table, shape, kv_len=100)).set_index("role")
    assert summary.loc["qkv", "launches"] == 2 and summary.loc["qkv", "us_per_step"] == 4.0
    assert summary.loc["qkv", "gb_s"] == pytest.approx(2 * shape.qkv_rows * 64 * 2 / 4.0 / 1e3)
    assert math.isnan(summary.loc["norm_rope", "gb_s"])  # no bytes of its own counted
    assert summary["us_per_step"].is_monotonic_decreasing

"""bench/floor_bench.py end to end on the tiny preset: a row per weights × mode × accept × linears, each
beside its floor, with the columns the floor table is read by."""

import json

import pandas as pd
import pytest
import torch

from bench import floor_bench
from tileinfer.ops import decode_attention, gemm_configs
from tileinfer.ops.tuning import section
from tileinfer.random_weights import TINY

REQUIRED = {"model", "weights", "mode", "point", "accept", "tok_s", "step_ms", "floor_ms", "fraction_of_floor",
            "launches_per_layer", "us_per_layer_over_floor", "pdl", "kv_prefetch", "early_kv", "l2_ahead", "git_rev", "command",
            "gpu", "weights_kind"}


def tuned_kv_prefetch():
    """What the table must say the attention prefetched: nothing on a CPU, else the GPU's tuned rows."""
    if not torch.cuda.is_available():
        return "off"
    rows = section(torch.device("cuda"), "decode_attention").get("prefetch_rows", -1)
    return {0: "off", -1: "on"}.get(rows, str(rows))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("floor")
    floor_bench.main(["--models", "tiny", "--points", "tiny", "--new-tokens", "6", "--repeats", "1", "--pdl", "off",
                      "--bandwidth-gbs", "50", "--launches", "--out", str(out), "--root", str(out / "checkpoints")])
    return out


@pytest.fixture(scope="module")
def table(run):
    (path,) = [p for p in run.glob("floor_*.csv") if not p.name.startswith(("floor_launches_", "floor_gaps_"))]
    return pd.read_csv(path)


def test_each_launch_of_a_step_beside_the_bytes_its_role_reads(run):
    (path,) = run.glob("floor_launches_*.csv")
    sites = pd.read_csv(path)
    assert set(zip(sites["weights"], sites["mode"])) == {("bf16", "plain"), ("bf16", "dflash"), ("int8", "plain"),
                                                         ("int8", "dflash")}
    assert (sites["model"] == "tiny").all() and set(sites["network"]) == {"target", "drafter"}
    plain = sites[(sites["weights"] == "bf16") & (sites["mode"] == "plain")]
    for role in ("qkv", "o", "gate_up", "down"):
        assert (plain["role"] == role).sum() == TINY.layers
    assert (plain["role"] == "lm_head").sum() == 1
    timed = sites.dropna(subset=["floor_bytes"])
    assert timed["floor_us"].tolist() == pytest.approx((timed["floor_bytes"] / 50e9 * 1e6).tolist())
    assert (sites["timed_in"] == ("graphs" if torch.cuda.is_available() else "eager")).all()
    assert (sites["own_us"] >= 0).all() and sites["git_rev"].notna().all()


def test_where_the_gpu_idled_between_a_steps_kernels(run, capsys):
    (path,) = run.glob("floor_gaps_*.csv")
    gaps = pd.read_csv(path)
    assert {"before", "after", "us_per_step", "per_step", "mean_us", "git_rev", "l2_ahead"} <= set(gaps.columns)
    assert set(zip(gaps["weights"], gaps["mode"])) <= {("bf16", "plain"), ("bf16", "dflash"), ("int8", "plain"),
                                                       ("int8", "dflash")}
    assert (gaps["us_per_step"] > 0).all() and (gaps["mean_us"] > 0).all()
    floor_bench.print_gaps(gaps.to_dict("records"))
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("idle µs per step") and lines[1].split()[:4] == ["tiny", *gaps.iloc[0][["weights", "mode", "point"]]]


def test_a_row_per_configuration_beside_its_floor(table):
    assert REQUIRED <= set(table.columns)
    keys = list(zip(table["weights"], table["mode"], table["linears"]))
    assert keys == [("bf16", "plain", "triton"), ("bf16", "dflash", "triton"), ("int8", "plain", "triton"),
                    ("int8", "dflash", "triton"), ("bf16", "plain", "cublas")]
    assert (table["accept"][table["mode"] == "dflash"] == "replay:3.0").all()
    assert (table["weights_kind"] == "random").all() and (table["pdl"] == "off").all()
    assert (table["kv_prefetch"] == tuned_kv_prefetch()).all()
    assert (table["early_kv"] == "off").all()
    assert table["fraction_of_floor"].tolist() == pytest.approx((table["floor_ms"] / table["step_ms"]).tolist())
    over = (table["step_ms"] - table["floor_ms"]) * 1e3 / TINY.layers
    assert table["us_per_layer_over_floor"].tolist() == pytest.approx(over.tolist())
    assert (table["launches_per_layer"] > 0).all() and (table["launches_per_step"] > table["launches_per_layer"]).all()
    plain = table[table["mode"] == "plain"].set_index(["weights", "linears"])["floor_ms"]
    bf16, int8 = plain["bf16", "triton"], plain["int8", "triton"]
    assert int8 < bf16  # an INT8 step reads fewer weight bytes


@pytest.mark.parametrize("args,message", [
    (["--points", "3k"], "--points: unknown 3k"),
    (["--points", "tiny", "--pdl", "maybe"], "--pdl: unknown maybe"),
    (["--points", "tiny", "--kv-prefetch", "yes"], "--kv-prefetch: unknown yes"),
    (["--points", "tiny", "--step-kv", "both"], "--step-kv: unknown both"),
    (["--points", "tiny", "--early-kv", "soon"], "--early-kv: unknown soon"),
    (["--points", "tiny", "--early-epilogue", "late"], "--early-epilogue: unknown late"),
    (["--points", "tiny", "--num-splits", "auto,0"], "--num-splits takes auto or counts >= 1, got 0"),
    (["--points", "tiny", "--prefetch-ahead", "0,-2"], "--prefetch-ahead takes non-negative integers"),
    (["--points", "tiny", "--stream-k", "one"], "--stream-k takes non-negative integers"),
    (["--points", "tiny", "--block-sizes", "4,1"], "--block-sizes takes blocks of 2 tokens or more, got 1"),
])
def test_unknown_value_is_named(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        floor_bench.main(["--models", "tiny", *args, "--out", str(tmp_path)])
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("floor_*.csv"))


def test_fused_norms_measured_beside_unfused(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEINFER_EXACT", "0")  # fused layers are for one-token steps outside exact mode
    floor_bench.main(["--models", "tiny", "--points", "tiny", "--weights", "bf16", "--new-tokens", "6", "--repeats",
                      "1", "--pdl", "off", "--fuse-norms", "off,on", "--bandwidth-gbs", "50", "--out", str(tmp_path),
                      "--root", str(tmp_path / "checkpoints")])
    (path,) = tmp_path.glob("floor_*.csv")
    table = pd.read_csv(path)
    keys = list(zip(table["mode"], table["linears"], table["fuse_norms"]))
    assert keys == [("plain", "triton", "off"), ("dflash", "triton", "off"), ("plain", "cublas", "off"),
                    ("plain", "triton", "on"), ("dflash", "triton", "on")]
    launches = table[table["linears"] == "triton"].set_index(["mode", "fuse_norms"])["launches_per_layer"]
    # the RMSNorms fold into the GEMMs (on an H200, 8 launches per layer become 6; the CPU counts torch ops)
    assert launches["plain", "on"] < launches["plain", "off"] and launches["dflash", "on"] < launches["dflash", "off"]


def test_the_time_beyond_the_floor_is_told_per_role_most_first(capsys):
    site = dict(model="qwen3-4b", weights="bf16", mode="plain", network="target")
    floor_bench.print_over_floor([
        {**site, "role": "qkv", "own_us": 10.0, "floor_us": 8.0}, {**site, "role": "qkv", "own_us": 10.0, "floor_us": 8.0},
        {**site, "role": "attention", "own_us": 9.0, "floor_us": 1.0},
        {**site, "role": "other", "own_us": 50.0, "floor_us": float("nan")},  # no bytes it must read
        {**site, "network": "drafter", "role": "gemm", "own_us": 99.0, "floor_us": 1.0}])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.split() == ["qwen3-4b", "bf16", "plain", "attention", "8,", "qkv", "4"]
    # a setting the run varied gets a line of each value
    floor_bench.print_over_floor([
        {**site, "l2_ahead": "off", "pdl": "on", "role": "o", "own_us": 9.0, "floor_us": 5.0},
        {**site, "l2_ahead": "on", "pdl": "on", "role": "o", "own_us": 6.0, "floor_us": 5.0}])
    lines = capsys.readouterr().out.strip().splitlines()[-2:]
    assert [line.split() for line in lines] == [["qwen3-4b", "bf16", "plain", "l2_ahead", "off,", "o", "4"],
                                                ["qwen3-4b", "bf16", "plain", "l2_ahead", "on,", "o", "1"]]


def tiny_rows(tmp_path, *switches):
    """floor_bench's rows for the tiny preset in BF16, PDL off, no cuBLAS baseline, with `switches` varied."""
    floor_bench.main(["--models", "tiny", "--points", "tiny", "--weights", "bf16", "--new-tokens", "4", "--repeats",
                      "1", "--pdl", "off", "--no-cublas", "--bandwidth-gbs", "50", "--out", str(tmp_path),
                      "--root", str(tmp_path / "checkpoints"), *switches])
    (path,) = tmp_path.glob("floor_*.csv")
    return pd.read_csv(path, dtype={"num_splits": str})


def test_early_kv_and_split_counts_measured_each(tmp_path):
    before = decode_attention.early_kv_label()
    table = tiny_rows(tmp_path, "--early-kv", "off,on,after", "--num-splits", "auto,2")
    assert list(zip(table["mode"], table["early_kv"], table["num_splits"])) == [
        ("plain", "off", "auto"), ("dflash", "off", "auto"), ("plain", "off", "2"), ("dflash", "off", "2"),
        ("plain", "on", "auto"), ("dflash", "on", "auto"), ("plain", "on", "2"), ("dflash", "on", "2"),
        ("plain", "after", "auto"), ("dflash", "after", "auto"), ("plain", "after", "2"), ("dflash", "after", "2")]
    assert decode_attention.early_kv_label() == before  # as it was before the run


def test_prefetch_ahead_and_stream_k_measured_each(tmp_path):
    """`--prefetch-ahead 0,4`: every GEMM as tuned, then asking L2 for the K-block 4 ahead in its loop;
    `--stream-k 0,1`: the GEMMs per tile, then as stream-K; each row labelled, both settings back to 0
    after the run."""
    table = tiny_rows(tmp_path, "--prefetch-ahead", "0,4", "--stream-k", "0,1")
    assert list(zip(table["mode"], table["prefetch_ahead"], table["stream_k"])) == [
        (mode, ahead, streams) for ahead in (0, 4) for streams in (0, 1) for mode in ("plain", "dflash")]
    assert gemm_configs.prefetch_ahead() == 0 and gemm_configs.stream_k() == 0


def test_early_epilogue_and_l2_ahead_measured_each(tmp_path, monkeypatch):
    """`--early-epilogue off,on`: the fused one-token layers with the GEMMs' row sums and residual rows read
    after the K loop, then right after the wait; `--l2-ahead off,on`: the attention without and with asking
    L2 for o_proj's weight; each row labelled, both switches as they were after the run."""
    from tileinfer.ops import skinny_gemm

    monkeypatch.setenv("TILEINFER_EXACT", "0")  # fused layers are for one-token steps outside exact mode
    before = skinny_gemm.early_epilogue_label(), decode_attention.l2_ahead_label()
    table = tiny_rows(tmp_path, "--early-epilogue", "off,on", "--l2-ahead", "on,off")
    assert list(zip(table["mode"], table["early_epilogue"], table["l2_ahead"])) == [
        (mode, sums, ahead) for sums in ("off", "on") for ahead in ("on", "off") for mode in ("plain", "dflash")]
    assert (skinny_gemm.early_epilogue_label(), decode_attention.l2_ahead_label()) == before


def test_mlp_flow_measured_each(tmp_path, monkeypatch):
    """`--mlp-flow on,off`: the steps with each MLP's down projection fed by its gate_up's flow, then
    without, both with the o projections fed by their attention's (`--o-flow on`) and the folded-norm
    projections by the residual ones (`--res-flow on`); each row labelled, the switches as they were after
    the run."""
    from tileinfer.ops import flow

    before = flow.mlp_flow_label(), flow.o_flow_label(), flow.res_flow_label()
    table = tiny_rows(tmp_path, "--mlp-flow", "on,off", "--o-flow", "on", "--res-flow", "on")
    assert list(zip(table["mode"], table["mlp_flow"], table["o_flow"], table["res_flow"])) == [
        (mode, flows, "on", "on") for flows in ("on", "off") for mode in ("plain", "dflash")]
    assert (flow.mlp_flow_label(), flow.o_flow_label(), flow.res_flow_label()) == before


def test_a_configs_file_measured_in_place_of_the_installed_one(tmp_path, monkeypatch):
    """`--configs installed,FILE,heuristic`: the steps with the machine's installed configs, with the file's in
    their place (this machine is "cpu" without a GPU) and with no tuned entries, each row labelled; the file is
    what the kernels read inside."""
    from bench import tuned_override
    from tileinfer.ops import tuning

    gpu = tuning.gpu_of(torch.device("cuda")) if torch.cuda.is_available() else "cpu"
    path = tmp_path / "before.json"
    path.write_text(json.dumps({"gpu": gpu, "skinny_gemm": {}}))
    served = []
    replaced = tuned_override.replaced

    def spy(configs):
        served.append(configs)
        return replaced(configs)

    monkeypatch.setattr(tuned_override, "replaced", spy)
    table = tiny_rows(tmp_path / "out", "--configs", f"installed,{path},heuristic")
    assert list(zip(table["mode"], table["configs"])) == [
        (mode, configs) for configs in ("installed", str(path), "heuristic") for mode in ("plain", "dflash")]
    assert served == [None, {"gpu": gpu, "skinny_gemm": {}}, {"gpu": gpu}]


def test_another_gpus_configs_file_is_refused_before_anything_runs(tmp_path, capsys):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"gpu": "Some Other GPU", "skinny_gemm": {}}))
    with pytest.raises(SystemExit):
        floor_bench.main(["--models", "tiny", "--points", "tiny", "--configs", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert "--configs:" in err and "holds the configs of 'Some Other GPU'" in err
    assert not (tmp_path / "out").exists()


def test_dflash_steps_measured_in_each_block_that_holds_the_replay(tmp_path, capsys):
    """`--block-sizes 2,4`: the tiny preset replays 3 tokens a step, which blocks of 2 cannot hold (said, no
    row); blocks of 4 get a row, the plain step a block of 1."""
    table = tiny_rows(tmp_path, "--block-sizes", "2,4")
    assert list(zip(table["mode"], table["block"], table["accept"])) == [("plain", 1, "-"), ("dflash", 4, "replay:3.0")]
    assert table.loc[1, "tokens_per_step"] <= 4
    assert "tiny tiny: no replay fits blocks of 2 (3.0 tokens a step)" in capsys.readouterr().out


def test_a_block_past_the_drafters_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit):
        floor_bench.main(["--models", "tiny", "--points", "tiny", "--block-sizes", "4,64", "--bandwidth-gbs", "50",
                          "--out", str(tmp_path / "out"), "--root", str(tmp_path / "checkpoints")])
    assert "--block-sizes: 64 past tiny's drafter block of" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

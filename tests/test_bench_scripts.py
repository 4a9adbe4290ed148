import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.ref import summary
from bench.ref.metric import ROW_FIELDS, append_jsonl
from tests.test_bench_metric import make_row
from tileinfer_profiling.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
REF = REPO / "bench" / "ref"


@pytest.mark.parametrize("script", ["run_all.sh", "profile.sh"])
def test_scripts_parse(script):
    path = REF / script
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_profile_sh_calls_the_step_profiler_with_flags_it_takes():
    text = (REF / "profile.sh").read_text()
    command = text[text.index("-m tileinfer_profiling step"):].split("\ndone")[0]
    flags = re.findall(r"(--[a-z-]+)", command)
    step = build_parser()._subparsers._group_actions[0].choices["step"]
    assert flags and set(flags) <= set(step._option_string_actions), flags


def test_summary_cli(tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    for i, v in enumerate([420.0, 421.0, 440.0]):
        append_jsonl(rows, make_row(process=i, decode_tok_s=v))
    summary.main([str(rows), "--csv", str(tmp_path / "rows.csv")])
    out = capsys.readouterr()
    assert "**disagree**" in out.out and "disagree" in out.err
    assert (tmp_path / "rows.csv").read_text().splitlines()[0] == ",".join(ROW_FIELDS)


@pytest.mark.slow
@pytest.mark.parametrize("script, csv", [("gemm_bench.py", "gemm_h200.csv"), ("attention_bench.py", "attention.csv")])
def test_kernel_benchmarks_run_their_smoke_shapes(script, csv, tmp_path):
    """A fresh process on this machine (the Triton interpreter without a GPU): every kernel runs and checks."""
    import pandas as pd

    run = subprocess.run([sys.executable, f"bench/{script}", "--smoke", "--out", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    df = pd.read_csv(tmp_path / csv)
    assert len(df) and not df.astype(str).apply(lambda c: c.str.contains("Error")).any().any()
    if "ok" in df:
        assert df.loc[df["section"] == "check", "ok"].all()


def test_host_work_rows_tell_the_call_from_its_prefill(tmp_path, capsys):
    import pandas as pd

    from bench import host_work

    host_work.main(["--smoke", "--profile", "--out", str(tmp_path)])
    df = pd.read_csv(next(tmp_path.glob("host_work_*.csv"))).set_index("what")
    call, window = df.loc["generate(ids, 1): the call", "ms"], df.loc["generate(ids, 1): the engine's prefill window", "ms"]
    assert 0 < window <= call and df.loc["generate(ids, 1): outside the window", "ms"] >= 0
    after = "generate(ids, 1) after a 8-token reply"
    assert 0 < df.loc[f"{after}: the engine's prefill window", "ms"] <= df.loc[f"{after}: the call", "ms"]
    assert df.loc[f"{after}: outside the window", "ms"] >= 0
    assert {"memory plan (check_budget)", "request checks (_check_request)"} <= set(df.index)
    assert (df["max_ms"] >= df["ms"]).all() and (df["weights_kind"] == "embedded pair").all()
    assert "outside the window" in capsys.readouterr().out
    table = next(tmp_path.glob("host_work_profile_*.txt")).read_text()
    assert "3 calls of generate(ids, 1)" in table and "tottime" in table and str(REPO) not in table


def test_acceptance_measures_the_benchmark_seeds_and_prints_their_means(tmp_path, capsys):
    import pandas as pd

    from bench import acceptance

    out = tmp_path / "acceptance.csv"
    acceptance.main(["--points", "1k", "--seeds", "2", "--heldout", "0", "--out", str(out)])
    df = pd.read_csv(out)
    assert sorted(df["source"].unique()) == ["julia:seed=0", "julia:seed=1"] and len(df) == 4
    assert df["lossless"].all() and (df["exact"] == "on").all() and (df["block"] == 16).all()
    printed = capsys.readouterr().out
    for task in ("edit", "explain"):
        mean = df.loc[df["task"] == task, "mean_tokens_per_step"].mean()
        assert f"mean benchmark {task:8} 1k  block 16 {mean:6.2f} tokens/step over 2 prompts" in printed


def test_acceptance_decodes_each_prompt_with_each_block(tmp_path, capsys):
    """A row per prompt and block, every reply lossless; no step commits more tokens than its block holds."""
    import pandas as pd

    from bench import acceptance

    out = tmp_path / "acceptance.csv"
    acceptance.main(["--points", "1k", "--seeds", "1", "--heldout", "0", "--block-sizes", "4,16", "--out", str(out)])
    df = pd.read_csv(out)
    assert len(df) == 4 and sorted(df["block"]) == [4, 4, 16, 16] and df["lossless"].all()
    for _, row in df.iterrows():
        sizes = [int(pair.split(":")[0]) for pair in row["histogram"].split()]
        assert max(sizes) <= row["block"] and row["mean_tokens_per_step"] <= row["block"]
    printed = capsys.readouterr().out
    assert "block  4" in printed and "block 16" in printed


def test_acceptance_refuses_a_block_past_the_drafters(tmp_path, capsys):
    from bench import acceptance

    with pytest.raises(SystemExit):
        acceptance.main(["--seeds", "1", "--heldout", "0", "--block-sizes", "4,17", "--out", str(tmp_path / "a.csv")])
    assert "--block-sizes 4,17" in capsys.readouterr().err and not (tmp_path / "a.csv").exists()


@pytest.mark.parametrize("seeds", ["-1", "9"])
def test_acceptance_refuses_seeds_the_benchmark_lacks(seeds, tmp_path, capsys):
    from bench import acceptance

    with pytest.raises(SystemExit):
        acceptance.main(["--seeds", seeds, "--out", str(tmp_path / "a.csv")])
    assert "--seeds" in capsys.readouterr().err and not (tmp_path / "a.csv").exists()


def test_prefill_profile_rows_per_weights_and_kernel(tmp_path, capsys):
    import pandas as pd

    from bench import prefill_profile

    prefill_profile.main(["--out", str(tmp_path), "--model", "tiny", "--tokens", "40", "--repeats", "1",
                          "--root", str(tmp_path / "ckpt")])
    df = pd.read_csv(next(tmp_path.glob("prefill_profile_*.csv")))
    assert set(df["weights"]) == {"bf16", "int8"} and (df["tokens"] == 40).all()
    assert (df["gpu_ms"] > 0).all() and (df["prefill_ms"] > 0).all() and (df["weights_kind"] == "random").all()
    assert ((df["host_ms"] > 0) & (df["host_ms"] <= df["prefill_ms"])).all()
    for _, kind in df.groupby("weights"):
        assert kind["kernel_ms"].iloc[0] == pytest.approx(kind["gpu_ms"].sum())
    assert "tiny int8 40 tokens in chunks of 4096, scales deferred: prefill" in capsys.readouterr().out
    # one repeat's wall, the profiled call's own wall; a kernel timeline on a GPU only
    assert (df["prefill_walls_ms"].astype(float) == df["prefill_ms"].round(2)).all()
    assert (df["profiled_wall_ms"] > 0).all()
    if torch.cuda.is_available():
        assert (df["kernel_span_ms"] > 0).all() and (df["idle_in_span_ms"] >= 0).all()
        assert (df["idle_in_span_ms"] <= df["kernel_span_ms"]).all()
    else:
        assert df["kernel_span_ms"].isna().all() and df["idle_in_span_ms"].isna().all()
    with pytest.raises(SystemExit):
        prefill_profile.main(["--out", str(tmp_path), "--weights", "fp8"])


def test_prefill_profile_chunk_sizes(tmp_path, capsys):
    import pandas as pd

    from bench import prefill_profile

    prefill_profile.main(["--out", str(tmp_path), "--model", "tiny", "--tokens", "40", "--repeats", "1",
                          "--weights", "bf16", "--chunk", "16,64", "--root", str(tmp_path / "ckpt")])
    df = pd.read_csv(next(tmp_path.glob("prefill_profile_*.csv")))
    assert set(df["chunk"]) == {16, 64}
    out = capsys.readouterr().out
    assert "in chunks of 16:" in out and "in chunks of 64:" in out
    # three chunks of 16 launch three times the layers' kernels that one chunk of 64 does
    calls = df.groupby("chunk")["calls"].sum()
    assert calls[16] > calls[64]
    for bad in ("0", "4k", "16,"):
        with pytest.raises(SystemExit):
            prefill_profile.main(["--out", str(tmp_path / "bad"), "--chunk", bad])
        assert "--chunk" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_prefill_profile_int8_scales_deferred_and_in_passes(tmp_path, capsys):
    """INT8 prefills with each product's scale left to its reader and in passes of their own, in turn; BF16
    once; the switch as it was afterwards."""
    import pandas as pd

    from bench import prefill_profile
    from tileinfer.ops.linear import DEFER_SCALES

    prefill_profile.main(["--out", str(tmp_path), "--model", "tiny", "--tokens", "40", "--repeats", "1",
                          "--defer-scales", "off,on", "--root", str(tmp_path / "ckpt")])
    df = pd.read_csv(next(tmp_path.glob("prefill_profile_*.csv")))
    runs = df.drop_duplicates(["weights", "defer_scales"])[["weights", "defer_scales"]]
    assert sorted(map(tuple, runs.values)) == [("bf16", "-"), ("int8", "off"), ("int8", "on")]
    out = capsys.readouterr().out
    assert "int8 40 tokens in chunks of 4096, scales in passes:" in out and "scales deferred:" in out
    assert DEFER_SCALES.on
    with pytest.raises(SystemExit):
        prefill_profile.main(["--out", str(tmp_path / "bad"), "--defer-scales", "on,maybe"])
    assert "--defer-scales" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_kernel_timeline_busy_time_and_span():
    from bench.prefill_profile import busy_and_span

    assert busy_and_span([]) == (0.0, 0.0)
    # overlapping, nested, touching and separate intervals, out of order: busy 0-5 and 6-8, span 0-8
    assert busy_and_span([(6, 8), (0, 3), (1, 2), (2, 5), (5, 5)]) == (7, 8)
    assert busy_and_span([(10.0, 12.5), (12.5, 13.0)]) == (3.0, 3.0)


def test_prefill_attention_bench_checks_every_variant(tmp_path, capsys):
    import pandas as pd

    from bench import prefill_attention_bench

    path = prefill_attention_bench.main(["--smoke", "--out", str(tmp_path)])
    df = pd.read_csv(path)
    ours = df[df["impl"] == "ours"]
    # every tile × order × softmax tile, and each tile by TMA (fp32 here: those fall back to pointer loads)
    assert len(ours) == 2 * 2 * 2 + 2 and (ours["ms"] > 0).all() and (ours["inputs"] == "random").all()
    assert not ours["tma"].astype(bool).any()
    assert (ours["max_abs_diff"] < 1e-4).all()
    # the default's tiles in the other order: the same bits
    same_tiles = (ours["block_m"] == 16) & (ours["block_n"] == 16) & ~ours["fast_softmax"].astype(bool)
    assert same_tiles.sum() == 2 and (ours.loc[same_tiles, "max_abs_diff"] == 0).all()
    assert prefill_attention_bench.visible_keys(4, 4) == 10 and prefill_attention_bench.visible_keys(2, 5) == 9
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="queries <= keys"):
        prefill_attention_bench.main(["--chunks", "8/4", "--out", str(tmp_path)])


def test_a_tune_installs_its_winners_and_keeps_the_file_it_replaced(tmp_path, monkeypatch):
    """gemm_bench's install: the winners merged into the GPU's file (other entries kept), a copy of the new
    file and the file as it was under --out, the two that `floor_bench.py --configs` compares."""
    import json

    from bench.gemm_bench import install_table
    from tileinfer.ops import tuning

    monkeypatch.setattr(tuning, "CONFIG_DIR", tmp_path / "configs")
    tuning.clear_cache()
    out = tmp_path / "out"
    out.mkdir()
    try:
        kept = {"64x64": {"m1": {"bf16": {"block_n": 8, "block_k": 64}}}}
        tuning.write_section("Test GPU 9", "skinny_gemm", kept)
        before = (tmp_path / "configs" / "test_gpu_9.json").read_text()
        install_table("Test GPU 9", {"128x64": {"m16": {"int8": {"block_n": 32, "block_k": 64}}}}, out)
        installed = json.loads((tmp_path / "configs" / "test_gpu_9.json").read_text())
        assert installed["skinny_gemm"] == {**kept, "128x64": {"m16": {"int8": {"block_n": 32, "block_k": 64}}}}
        assert (out / "test_gpu_9.before.json").read_text() == before
        assert json.loads((out / "test_gpu_9.json").read_text()) == installed
    finally:
        tuning.clear_cache()

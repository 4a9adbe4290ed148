import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from tests.helpers import tiny_pair
from tileinfer_profiling import sweeps
from tileinfer_profiling.cli import main

REPO = Path(__file__).resolve().parents[1]
REFERENCE_CSV = REPO / "bench" / "ref" / "reference.csv"


def test_sweep_gemm_writes_csv_and_html(tmp_path, capsys):
    assert main(["sweep", "gemm", "--ms", "1", "--weights", "int8", "--impls", "ours", "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "gemm.csv", keep_default_na=False)
    assert len(df) >= 2 and {"gpu", "torch", "triton", "git_rev", "timer"} <= set(df.columns)
    assert set(df["impl"]) == {"ours"} and (df["m"] == 1).all() and (df["weights"] == "int8").all()
    assert (df["error"] == "").all() and len(df) == df["shape"].nunique()
    html = (tmp_path / "gemm.html").read_text()
    assert 'src="plotly.min.js"' in html and len(html) < 200_000  # plotly.js once per directory, beside it
    assert (tmp_path / "plotly.min.js").stat().st_size > 1_000_000  # the pages need no network


def test_sweep_attention_tiny(tmp_path):
    assert main(["sweep", "attention", "--kv-lens", "32", "--q-lens", "2", "--num-splits", "1",
                 "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "attention.csv", keep_default_na=False)
    assert list(df["impl"]) == ["ours", "sdpa"] and (df["kv_len"] == 32).all()
    assert (df["error"] == "").all()
    assert (tmp_path / "attention.html").exists()


@pytest.mark.slow
def test_the_tileinfer_command_sweeps_attention_on_a_cpu(tmp_path):
    """The console script in a fresh process: every "ours" row is timed (Triton under the interpreter)."""
    run = subprocess.run([str(Path(sys.executable).with_name("tileinfer")), "profile", "sweep", "attention",
                          "--kv-lens", "64", "--q-lens", "1,4", "--num-splits", "1,2", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    df = pd.read_csv(tmp_path / "attention.csv", keep_default_na=False)
    ours = df[df["impl"] == "ours"]
    assert len(ours) == 4 and (ours["error"] == "").all() and (ours["time_us"] > 0).all()
    assert set(ours["impl_source"]) == {"triton decode_attention"}


def test_a_sweep_whose_rows_all_fail_exits_non_zero(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("kernel broke")

    monkeypatch.setattr(sweeps, "_ours_attention", broken)
    assert main(["sweep", "attention", "--kv-lens", "32", "--q-lens", "1", "--num-splits", "1,2",
                 "--out", str(tmp_path)]) == 1
    assert "every 'ours' row failed; the first: RuntimeError: kernel broke" in capsys.readouterr().err
    df = pd.read_csv(tmp_path / "attention.csv", keep_default_na=False)  # the rows are written all the same
    assert (df.loc[df["impl"] == "sdpa", "error"] == "").all()


def test_compare_writes_fractions(tmp_path):
    main(["compare", "--reference", str(REFERENCE_CSV), "--out", str(tmp_path)])
    df = pd.read_csv(tmp_path / "comparison.csv")
    assert {"engine", "gpu", "bandwidth_fraction"} <= set(df.columns)
    assert "fraction of the GPU" in (tmp_path / "comparison.html").read_text()
    recorded = sorted((REFERENCE_CSV.parents[1] / "results").glob("comparison_*_h200.jsonl"))
    main(["compare", "--reference", str(REFERENCE_CSV), "--ours", *map(str, recorded), "--out", str(tmp_path)])
    df = pd.read_csv(tmp_path / "comparison.csv")
    assert "TileInfer (this project) · NVIDIA H200" in set(df["label"])


@pytest.mark.slow
def test_step_on_a_tiny_random_checkpoint(tmp_path):
    target, draft = tiny_pair(tmp_path, num_layers=1, block_size=4)
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps(list(range(3, 15))))
    out = tmp_path / "out"
    main(["step", "--model", str(target), "--draft", str(draft), "--prompt-ids", str(ids),
          "--max-new-tokens", "3", "--block-size", "4", "--warmup", "0", "--out", str(out)])
    summary = pd.read_csv(out / "summary.csv")
    on_gpu = torch.cuda.is_available()
    assert summary["variant"].tolist() == (["eager", "graphs"] if on_gpu else ["eager"])
    assert summary["device"].iloc[0].split(":")[0] == ("cuda" if on_gpu else "cpu")
    assert summary["prompt_tokens"].iloc[0] == 12
    for name in ("kernels.csv", "per_layer.html", "gemm_vs_attention.html", "tokens_per_step.html"):
        assert (out / name).exists()
    launches = pd.read_csv(out / "launches.csv")
    assert {"qkv", "o", "gate_up", "down"} <= set(launches["role"])
    assert (launches["timed_in"] == ("graphs" if on_gpu else "eager")).all()
    gemms = launches.dropna(subset=["floor_bytes"])
    assert (gemms["gb_s"] > 0).all()
    gaps = pd.read_csv(out / "idle_gaps.csv")
    assert list(gaps.columns) == ["before", "after", "us_per_step", "per_step", "mean_us"]
    assert (gaps["us_per_step"] > 0).all() and gaps["us_per_step"].is_monotonic_decreasing


@pytest.mark.slow
def test_step_defaults_to_the_embedded_pair_with_its_drafter(tmp_path):
    main(["step", "--prompt-tokens", "24", "--max-new-tokens", "4", "--warmup", "0", "--out", str(tmp_path)])
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert summary["model"].iloc[0] == "embedded default" and summary["block_size"].iloc[0] == 16
    assert summary["prompt_tokens"].iloc[0] == 24 and summary["steps"].iloc[0] >= 1

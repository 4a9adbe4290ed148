"""bench/gemm_waves.py on the CPU (the interpreter, 4 'SMs'): a row per kind and N, from half a program per SM
to four, the linear's own N among them; bad arguments are named and write nothing."""

import pandas as pd
import pytest
import torch

from bench import gemm_waves


def test_rows_cover_the_programs_per_sm(tmp_path):
    gemm_waves.main(["--smoke", "--out", str(tmp_path), "--config", '{"block_n": 16, "prefetch_ahead": 2, "split_k": 1, "stream_k": 0}'])
    (path,) = tmp_path.glob("gemm_waves_*.csv")
    table = pd.read_csv(path)
    for kind, rows in table.groupby("kind"):
        assert rows["n"].is_monotonic_increasing and rows["programs"].is_monotonic_increasing
        assert rows["real"].sum() == 1
        assert set(gemm_waves.PER_SM) <= set(rows["programs_per_sm"])  # 4 SMs: every count is whole
        assert (rows["programs"] == rows["n"] // 2 // 16).all()  # the gate_up's programs: 16 gate + 16 up rows
        assert (rows["config"].str.contains('"prefetch_ahead": 2')).all()
    assert {"command", "git_rev", "weights_kind"} <= set(table.columns)


@pytest.mark.parametrize("args,message", [
    (["--config", '{"blocks": 3}'], "--config: unknown fields ['blocks']"),
    (["--kinds", "fp8"], "--kinds takes bf16 and/or int8"),
    (["--m", "17"], "--m takes 1..16"),
])
def test_bad_arguments_are_named(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        gemm_waves.main(["--smoke", "--out", str(tmp_path), *args])
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("gemm_waves_*.csv"))


def test_stream_k_rows_count_its_programs(tmp_path):
    """With `stream_k` the programs are that many an SM (4 'SMs' under the interpreter, a GPU's own count on
    it), whatever N, up to one a K-block (a gate_up's tiles cover its gate half)."""
    rows = gemm_waves.main(["--smoke", "--out", str(tmp_path), "--kinds", "bf16",
                            "--config", '{"block_n": 16, "block_k": 32, "stream_k": 2}'])
    sms = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 4
    assert all(r["programs"] == min(2 * sms, r["n"] // 2 // 16 * -(-r["k"] // 32)) for r in rows)

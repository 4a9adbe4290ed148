"""bench/sizes_check.py on the test preset: logits against transformers, greedy, exact DFlash, one row per dtype."""

import pandas as pd
import pytest

from bench import sizes_check


def test_tiny_preset_rows(tmp_path, capsys):
    status = sizes_check.main(["--sizes", "tiny", "--prompt-tokens", "12", "--new-tokens", "6",
                               "--root", str(tmp_path / "ckpt"), "--out", str(tmp_path)])
    (path,) = tmp_path.glob("sizes_*.csv")
    rows = pd.read_csv(path)
    assert list(rows["weights"]) == ["fp32", "bf16"] and set(rows["model"]) == {"tiny"}
    assert rows["logits_ok"].all() and rows["dflash_equals_greedy"].all() and status == 0
    fp32, bf16 = rows.to_dict("records")
    assert fp32["tolerance"] == sizes_check.TOLERANCE["fp32"] and fp32["greedy_tokens_agree_with_transformers"] == 6
    assert bf16["tolerance"] == max(sizes_check.TOLERANCE["bf16"], sizes_check.BF16_SLACK * bf16["transformers_bf16_rel_err"])
    assert 0 < bf16["transformers_bf16_rel_err"] < 0.1 and fp32["logits_rel_err"] < 1e-5
    assert {"gpu", "torch", "triton", "transformers", "git_rev", "command", "weights_kind"} <= set(rows.columns)
    assert not list((tmp_path / "ckpt").glob("tiny*")), "the checkpoints are removed after their size"
    assert "logits err" in capsys.readouterr().out


def test_unknown_size_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sizes_check.main(["--sizes", "0.6b,3b", "--out", str(tmp_path)])
    assert "--sizes: unknown 3b" in capsys.readouterr().err
    assert not list(tmp_path.glob("sizes_*.csv"))

"""bench/drafter_attention_bench.py on tiny shapes: a row per split count and SDPA, the command that made it."""

import pandas as pd
import pytest

from bench import drafter_attention_bench


def test_rows_per_split_count_beside_sdpa(tmp_path):
    path = drafter_attention_bench.main(["--smoke", "--out", str(tmp_path)])
    df = pd.read_csv(path)
    ours = df[df["impl"] == "ours"]
    assert sorted(ours["num_splits"]) == [1, 2] and (df["impl"] == "sdpa").sum() == 1
    assert (df["context_len"] == 40).all() and (df["error"].isna()).all()
    assert df["command"].str.startswith("python bench/drafter_attention_bench.py --smoke").all()


@pytest.mark.parametrize("flag", ["--kv-lens", "--splits"])
def test_bad_lists_name_their_flag(tmp_path, flag):
    with pytest.raises(SystemExit, match=flag):
        drafter_attention_bench.main([flag, "8,x", "--out", str(tmp_path)])

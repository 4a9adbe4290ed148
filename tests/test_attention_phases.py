"""bench/attention_phases.py with --smoke (under the interpreter a stamp is its slot's number): a row per point
and setting, every phase stamped; bad arguments are named and write nothing."""

import pandas as pd
import pytest
import torch

from bench import attention_phases
from tileinfer.ops import INTERPRET


def test_rows_time_every_phase(tmp_path):
    rows = attention_phases.main(["--smoke", "--out", str(tmp_path), "--points", "200:1,300:16"])
    table = pd.read_csv(next(tmp_path.glob("attention_phases_*.csv")))
    assert list(zip(table["num_q_tokens"], table["step_kv"], table["kv_first"])) == [
        (1, "on", "off"), (1, "on", "on"), (16, "off", "off"), (16, "off", "on")]
    if INTERPRET:  # one slot apart
        assert all((table[f"{phase}_us"] == 1).all() for phase in attention_phases.PHASES)
        assert (table["span_us"] == 4).all()
    else:  # a GPU's timer: each phase after the one before, even where a replay's last arrival moved
        assert all((table[f"{phase}_us"] >= 0).all() for phase in attention_phases.PHASES)
        assert (table["span_us"] >= table["K/V loop_us"]).all()
    assert (table["programs"] > 0).all() and len(rows) == 4
    assert {"command", "git_rev", "weights_kind"} <= set(table.columns)


@pytest.mark.parametrize("args,message", [(["--points", "1024:17"], "points are kv_len:T with T in 1..16"),
                                          (["--kv-first", "maybe"], "--kv-first takes off and/or on")])
def test_bad_arguments_are_named(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        attention_phases.main(["--smoke", "--out", str(tmp_path), *args])
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("attention_phases_*.csv"))


def test_a_merge_stamped_by_an_earlier_replay_is_left_out():
    """The last program to arrive merges, and it may differ between replays: a row's merge stamp older than
    the row's start is the earlier replay's, not this one's."""
    fresh = [1000, 1002, 1003, 1006, 1007, 1010, 0, 0]
    stale = [1000, 1002, 1003, 1006, 1007, 10, 0, 0]  # merged one replay before
    row = attention_phases.phase_row(torch.tensor([fresh, stale]), 1.0)
    assert row["merge_us"] == 3 and row["span_us"] == 8

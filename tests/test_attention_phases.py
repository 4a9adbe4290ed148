"""bench/attention_phases.py on the CPU (the interpreter; a stamp there is its slot's number): a row per point
and setting, every phase stamped; bad arguments are named and write nothing."""

import pandas as pd
import pytest

from bench import attention_phases


def test_rows_time_every_phase(tmp_path):
    rows = attention_phases.main(["--smoke", "--out", str(tmp_path), "--points", "200:1,300:16"])
    table = pd.read_csv(next(tmp_path.glob("attention_phases_*.csv")))
    assert list(zip(table["num_q_tokens"], table["step_kv"], table["kv_first"])) == [
        (1, "on", "off"), (1, "on", "on"), (16, "off", "off"), (16, "off", "on")]
    for phase in attention_phases.PHASES:  # one slot apart under the interpreter
        assert (table[f"{phase}_us"] == 1).all()
    assert (table["span_us"] == 4).all() and (table["programs"] > 0).all() and len(rows) == 4
    assert {"command", "git_rev", "weights_kind"} <= set(table.columns)


@pytest.mark.parametrize("args,message", [(["--points", "1024:17"], "points are kv_len:T with T in 1..16"),
                                          (["--kv-first", "maybe"], "--kv-first takes off and/or on")])
def test_bad_arguments_are_named(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        attention_phases.main(["--smoke", "--out", str(tmp_path), *args])
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("attention_phases_*.csv"))

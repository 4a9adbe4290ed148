"""The report's number formatting and tables: units in headers, integers as integers, fractions as
percentages, wide tables in a scrolling box."""

import math

import pandas as pd
import pytest

from tileinfer_profiling import fmt
from tileinfer_profiling.tables import column_kind, label, split, table


@pytest.mark.parametrize("value, text", [(3456.759541, "3,457"), (21.86, "21.9"), (2.9330, "2.93"), (0.69434, "0.694"),
                                         (0, "0"), (-1.234, "-1.23"), (float("nan"), "—"), (None, "—"), ("", "—")])
def test_three_significant_digits(value, text):
    assert fmt.sig(value) == text


def test_units_and_kinds():
    assert fmt.ms(3456.759541) == "3,457 ms" and fmt.ms(0.694) == "694 µs" and fmt.ms(12_345) == "12.3 s"
    assert fmt.us(16.21) == "16.2 µs" and fmt.us(1500) == "1.5 ms"
    assert fmt.integer(16.0) == "16" and fmt.integer(32768) == "32,768"
    assert fmt.pct(0.2810) == "28.1 %" and fmt.pct(0.706, 2) == "71 %"
    assert fmt.times(1.357) == "1.36×" and fmt.rate(1755.6) == "1,756 tok/s"
    assert fmt.bandwidth(3276.8) == "3.28 TB/s" and fmt.bandwidth(282.9) == "283 GB/s"
    assert fmt.nbytes(777_912_320) == "778 MB" and fmt.nbytes(512) == "512 B"
    assert fmt.num(9.8) == "9.8" and fmt.num(16.0) == "16" and fmt.num(2.886) == "2.89"
    assert fmt.plain(16.0) == "16" and fmt.plain(True) == "yes" and fmt.plain("bf16") == "bf16"
    assert fmt.plain(math.nan) == "—"


def test_column_kinds_come_from_names():
    assert label("decode_tok_s") == "decode (tok/s)" and label("prefill_ms") == "prefill (ms)"
    assert label("time_us") == "time (µs)" and label("busy_pct") == "busy (%)" and label("of_floor") == "of floor"
    assert column_kind("of_floor")[1] is fmt.pct and column_kind("bandwidth_fraction")[1] is fmt.pct
    assert column_kind("vs_plain_step")[1] is fmt.times and column_kind("best_num_splits")[1] is fmt.integer
    assert column_kind("kernel_ms_per_step")[1] is fmt.sig and column_kind("shared_bytes")[1] is fmt.nbytes


def test_a_table_formats_every_cell_and_scrolls():
    df = pd.DataFrame({"mode": ["plain decode", "DFlash"], "prefill_ms": [3456.759541, 2089.1],
                       "best_num_splits": [16.0, 1.0], "share": [0.2810, 0.7190], "accept": ["-", "replay:7.1"],
                       "vs_sdpa": [1.5432, float("nan")]})
    t = table(df, caption="Generation", note="after a warm-up")
    assert t.frame.columns.tolist() == ["mode", "prefill (ms)", "best num splits", "share", "accept", "vs sdpa"]
    assert t.frame.iloc[0].tolist() == ["plain decode", "3,457", "16", "28.1 %", "-", "1.54×"]
    assert t.frame.iloc[1, -1] == "—"
    assert "overflow:auto" in t.html and "<strong>Generation</strong>" in t.html and "after a warm-up" in t.html
    assert t._repr_html_() == t.html
    assert "no rows" in table(pd.DataFrame()).html


def test_text_in_a_numeric_column_is_kept():
    t = table(pd.DataFrame({"byte_floor_us": [7.51, ""], "regs": [80, 96]}))
    assert t.frame["byte floor (µs)"].tolist() == ["7.51", "—"]


def test_a_wide_table_splits_into_captioned_parts():
    df = pd.DataFrame({"op": ["qkv"], "m": [1], "regs": [80], "byte_floor_us": [7.5]})
    t = split(df, ["op", "m"], (["regs"], ["byte_floor_us", "absent"]), ["resources", "floors"])
    assert t.html.count("<table") == 2 and "resources" in t.html and "floors" in t.html

"""reference.csv holds every figure of the comparison's tables, equal to the text (comparison-with-vllm.txt)."""

import re
from pathlib import Path

import pytest

from bench.ref import reference as ref

SOURCE = Path(__file__).resolve().parents[1] / "bench" / "ref" / "comparison-with-vllm.txt"
NUMBER = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(k(?![a-z]))?")
NOT_FIGURES = re.compile(r"BF16|INT8|Qwen3-4B|1-token|\b[18]k\b(?!-)")


@pytest.fixture(scope="module")
def lines():
    return SOURCE.read_text().splitlines()


@pytest.fixture(scope="module")
def reference():
    return ref.rows()


def figures(text):
    """Numbers in `text` ("1,311" -> 1311, "~13k" -> 13000), labels such as BF16 or 8k left out."""
    text = NOT_FIGURES.sub(" ", text)
    return [float(m[1].replace(",", "")) * (1000 if m[2] else 1) for m in NUMBER.finditer(text)]


def table_rows(lines):
    """(line number, cells) of every body row of every table in the text."""
    out = []
    for i, line in enumerate(lines, start=1):
        if line.startswith("|") and not line.startswith("|---"):
            if i < len(lines) and lines[i].startswith("|---"):
                continue  # a header row
            out.append((i, [c.strip() for c in line.strip("|").split("|")]))
    return out


def cell_figures(cells):
    label, rest = cells[0], cells[1:]
    nums = [n for part in re.findall(r"\(([^)]*)\)", label) for n in figures(part)]
    for cell in rest:
        scale = 1000 if re.search(r"\d s$", cell) else 1  # seconds in the table, ms in the CSV
        nums += [n * scale for n in figures(cell)]
    return nums


def test_every_table_figure_is_in_the_csv(lines, reference):
    rows = table_rows(lines)
    assert len(rows) == 5 + 5 + 3  # 1k table, 8k table, what is left
    for number, cells in rows:
        expected = {round(x, 6) for x in cell_figures(cells)}
        got = {round(r["value"], 6) for r in reference if r["source_line"] == number}
        assert expected, f"line {number} has no figures: {cells}"
        assert got == expected, f"line {number}: CSV {sorted(got)} vs text {sorted(expected)}"


def test_every_csv_figure_is_in_its_line(lines, reference):
    for r in reference:
        text = lines[r["source_line"] - 1]
        candidates = {round(x * s, 6) for x in figures(text) for s in (1, 1000)}
        assert round(r["value"], 6) in candidates, f"{r} not on line {r['source_line']}: {text[:120]}"


def test_profile_and_key_figures(reference):
    def value(engine, metric, **kw):
        (hit,) = [r["value"] for r in reference if r["engine"] == engine and r["metric"] == metric
                  and all(r[k] == v for k, v in kw.items())]
        return hit

    vllm_attention = {r["value"]: r["note"] for r in reference
                      if r["engine"] == "vllm" and r["metric"] == "attention_ms_per_step"}
    assert set(vllm_attention) == {9.0, 10.3} and "TRITON_ATTN" in vllm_attention[10.3]
    assert value("tileinfer", "attention_ms_per_step") == 2.1
    assert (value("vllm", "gemm_ms_per_step"), value("tileinfer", "gemm_ms_per_step")) == (15.4, 15.1)
    assert {value("vllm", "busy_pct"), value("tileinfer", "busy_pct")} == {98.5, 99.8}
    assert (value("vllm", "step_ms"), value("tileinfer", "step_ms")) == (26.9, 19.6)
    assert value("tileinfer", "decode_tok_s", point="1k", task="edit", weights="bf16") == 421
    assert value("vllm", "prefill_ms", point="8k", weights="int8") == 920
    assert {r["gpu"] for r in reference} == {"RTX 4080 SUPER"}
    assert {r["gpu_bandwidth_gbs"] for r in reference} == {736.0}
    assert {r["engine"] for r in reference} == {"vllm", "tileinfer"}



def test_the_bench_scripts_replay_the_comparison_s_tokens_per_step(capsys):
    assert ref.tokens_per_step("8k", "edit") == 1.87
    assert ref.accept_profile("1k") == "edit=7.1,explain=2.9"
    ref.main(["accept-profile", "8k", "--tasks", "edit"])
    assert capsys.readouterr().out == "edit=1.87\n"


def test_accept_profile_of_several_points():
    assert ref.accept_profile("1k") == "edit=7.1,explain=2.9"
    assert ref.accept_profile("1k,8k") == "1k:edit=7.1,1k:explain=2.9,8k:edit=1.87,8k:explain=2.5"

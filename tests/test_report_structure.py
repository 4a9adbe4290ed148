"""The report's pieces without running it: the page's arrangement (findings first, no code, no stderr),
the peers chart with this project's bars, the findings' sentences, the pair a GPU report times, the
warm-up before every timing, and the labels of the charts and the summary."""

import json
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pandas as pd
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tileinfer_profiling import bandwidth_share, findings, plots
from tileinfer_profiling.ceilings import H200
from tileinfer_profiling.compare import load_reference, reference_tokens_per_step
from tileinfer_profiling.report_html import arrange, report_html

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
REFERENCE = REPO / "bench" / "ref" / "reference.csv"


def _book():
    code = new_code_cell("print('secret code')", outputs=[
        new_output("stream", name="stderr", text="USDT: profiler_start\n"),
        new_output("display_data", data={"text/markdown": "section body"})])
    found = new_code_cell("nb.markdown(findings)", outputs=[
        new_output("display_data", data={"text/markdown": "## Findings\n\n- the headline"})])
    found.metadata["tags"] = ["findings"]
    return new_notebook(cells=[new_markdown_cell("# Title"), code, new_markdown_cell("## Section"), found],
                        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


def test_the_page_puts_findings_first_and_drops_stderr():
    book = arrange(_book())
    assert [c.source.splitlines()[0] for c in book.cells] == ["# Title", "nb.markdown(findings)",
                                                              "print('secret code')", "## Section"]
    assert [o["output_type"] for o in book.cells[2].outputs] == ["display_data"]
    assert len(_book().cells[1].outputs) == 2  # the notebook itself is left as it was


def test_the_page_has_no_code():
    page = report_html(_book())
    assert "secret code" not in page and "USDT" not in page and "nb.markdown" not in page
    assert page.index("the headline") < page.index("section body")
    assert "<title>TileInfer report</title>" in page and "ti-scroll" in page
    assert 'src="https://' not in page  # no require.js or MathJax from a CDN: the page asks the network for nothing


def test_the_stored_report_computes_its_findings_last():
    book = nbformat.read(str(REPO / "notebooks" / "report.ipynb"), as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert "findings" in code[-1].metadata.get("tags", []) and book.cells[0].source.startswith("# TileInfer report")
    assert "generate_both" in "".join(c.source for c in code)  # timings go through the warm-up


@pytest.fixture(scope="module")
def shares():
    rows = bandwidth_share.recorded_rows(sorted(RESULTS.glob("comparison_*_h200.jsonl")))
    return bandwidth_share.shares(load_reference(REFERENCE), rows)


def test_our_recorded_rows_beside_the_peers(shares):
    assert shares["engine"].iloc[0] == "this project"  # ours first
    assert {"this project · NVIDIA H200", "vLLM · RTX 4080 SUPER", "TileInfer (original) · RTX 4080 SUPER"} <= set(shares["label"])
    assert shares["bandwidth_fraction"].between(0.2, 1).all()
    top = bandwidth_share.headline(shares)
    assert set(top) == {"this project · NVIDIA H200", "vLLM · RTX 4080 SUPER", "TileInfer (original) · RTX 4080 SUPER"}
    fig = plots.bandwidth_share_figure(shares, note="line one\nline two")
    assert fig.data[0].name == "this project · NVIDIA H200" and fig.data[0].marker.color == "#d62728"
    assert any(t and t.endswith("%") for t in fig.data[0].text)
    assert fig.layout.title.text.count("<sup>") == 2


def test_findings_say_where_what_and_against_whom(shares):
    cpu = {"device": "cpu", "gpu": "cpu", "torch": "2.x", "triton": "3.x", "git_rev": "abc1234"}
    pair = SimpleNamespace(note="a pair", random_weights=False)
    gen = pd.DataFrame([{"mode": "plain decode", "decode_tok_s": 5.0, "mean_tokens_per_step": 1.0, "steps": 31},
                        {"mode": "DFlash", "decode_tok_s": 40.0, "mean_tokens_per_step": 15.5, "steps": 2}]).set_index("mode")
    runs = pd.DataFrame([{"point": "1k", "task": "edit", "mean_tokens_per_step": 15.875, "steps": 8}])
    steps = pd.DataFrame([{"what": "plain decode", "weights": "bf16", "point": "1k", "accept": "-", "step_ms": 2.93,
                           "of_floor": 0.706, "vs_plain_step": float("nan"), "gpu": "NVIDIA H200"},
                          {"what": "dflash step", "weights": "bf16", "point": "1k", "accept": "replay:7.1",
                           "step_ms": 3.98, "of_floor": 0.637, "vs_plain_step": 1.358, "gpu": "NVIDIA H200"}])
    text = findings.findings_markdown(cpu, pair=pair, embedded=True, prompt_note="the 1k edit prompt",
                                      generation_table=gen, shares=shares, steps=steps, acceptance_runs=runs,
                                      reference_tps=reference_tokens_per_step(load_reference(REFERENCE)))
    assert text.startswith("## Findings")
    assert "a CPU, no GPU" in text and "not how fast" in text and "toy pair" in text
    assert "DFlash 40 tok/s (8×) at 15.5 tokens per step over 2 steps" in text
    ours = bandwidth_share.headline(shares)["this project · NVIDIA H200"]
    assert f"this project reaches {round(100 * ours)} % of the NVIDIA H200's bandwidth" in text and "vLLM 58 %" in text
    assert "2.93 ms, 71 % of the way" in text and "1.36× a plain step" in text
    assert "15.9 on 1k edit (8 steps)" in text and "not comparable with Qwen3-4B (1.87–9.8" in text
    gpu = dict(cpu, device="cuda", gpu="NVIDIA H200")
    replayed = findings.findings_markdown(gpu, pair=SimpleNamespace(note="a qwen3-4b random pair", random_weights=True),
                                          accept_profile=7.1, floor_rows=[{"mode": "DFlash", "step_ms": 4.0, "floor_ms": 2.5}])
    assert "NVIDIA H200" in replayed and "replays 7.1 tokens per step" in replayed and "62.5 % of the way" in replayed


def test_a_gpu_report_times_a_random_pair_of_the_given_shapes(tmp_path):
    from tileinfer_profiling.pair import is_embedded, report_pair

    pair = report_pair(shaped="tiny", cache_dir=tmp_path)  # what a GPU report does with "qwen3-4b"
    assert pair.random_weights and Path(pair.model, "config.json").is_file() and Path(pair.draft, "config.json").is_file()
    assert json.loads(Path(pair.draft, "config.json").read_text())["num_hidden_layers"] == 5
    mtime = Path(pair.model, "model.safetensors").stat().st_mtime
    assert report_pair(shaped="tiny", cache_dir=tmp_path).model == pair.model  # written once
    assert Path(pair.model, "model.safetensors").stat().st_mtime == mtime
    assert report_pair(pair.model, pair.draft, shaped="qwen3-4b").model == pair.model  # a given model wins
    embedded = report_pair()
    assert is_embedded(embedded) and not embedded.random_weights and "toy" in embedded.note


def test_the_report_parameters_on_a_gpu_and_a_cpu():
    from bench.report import parameters

    assert parameters(gpu=True)["shaped"] == "qwen3-4b" and parameters(gpu=True)["new_tokens"] == 128
    assert parameters(model="some/dir", gpu=True)["shaped"] is None
    assert parameters(gpu=False)["shaped"] is None and parameters(gpu=False, shaped="tiny")["shaped"] == "tiny"


def test_every_timed_generation_follows_a_warm_up_of_the_same_request():
    from tileinfer_profiling.generation import generate_both

    calls = []

    class Engine:
        drafter = object()

        def generate(self, prompt, n, **kw):
            calls.append((n, kw.get("block_size"), kw.get("accept_profile")))
            stats = SimpleNamespace(block_size=kw.get("block_size") or 16, prompt_tokens=3, new_tokens=n, steps=1,
                                    mean_tokens_per_step=1.0, decode_tok_s=1.0, prefill_ms=1.0, drafter_ms=0.0,
                                    verify_ms=0.0, accept_ms=0.0, decode_ms=1.0)
            return SimpleNamespace(stats=stats)

    table, _ = generate_both(Engine(), [1, 2, 3], 8, accept_profile=7.1)
    assert calls == [(8, 1, None), (8, 1, None), (8, None, 7.1), (8, None, 7.1)]
    assert list(table.index) == ["plain decode", "DFlash"]


def test_charts_say_what_ran_on_a_cpu_and_explain_a_ceiling():
    cpu = pd.DataFrame([dict(shape="qkv", m=1, impl=i, weights="bf16", gbs=g, gpu="cpu")
                        for i, g in (("ours", 0.0001), ("cublas", 0.2))])
    fig = plots.gemm_bandwidth_figure(cpu)
    names = [t.name for t in fig.data]
    assert not any("cublas" in n for n in names) and "torch F.linear (CPU) bf16" in names
    assert fig.layout.yaxis.type == "log" and "Triton interpreter" in fig.layout.title.text
    h200 = pd.DataFrame([dict(shape=s, m=1, impl="ours", weights="bf16", gbs=g, gpu="NVIDIA H200")
                         for s, g in (("qkv", 3000.0), ("lm_head", 4550.0))])
    fig = plots.gemm_bandwidth_figure(h200, ceilings=H200, peak_gbs=4800)
    assert "lm_head above the measured ceiling" in fig.layout.annotations[0].text
    assert [t.name for t in fig.data][-1] == "datasheet peak 4,800 GB/s"


def test_split_curves_one_colour_per_cache_length():
    rows = [dict(impl="ours", kv_len=kv, q_len=q, num_splits=s, time_us=kv / 100 / s + 1, gpu="NVIDIA H200")
            for kv in (1024, 8192, 32768) for q in (1, 16) for s in (1, 2, 4)]
    fig = plots.split_curves_figure(pd.DataFrame(rows))
    colour = {t.name: t.line.color for t in fig.data}
    assert colour["ours kv 1024, q 1"] == colour["ours kv 1024, q 16"] != colour["ours kv 8192, q 1"]
    assert len({colour[f"ours kv {kv}, q 1"] for kv in (1024, 8192, 32768)}) == 3
    assert fig.layout.yaxis.type == "log"  # 1 µs to 330 µs: more than a decade
    assert [a.text for a in fig.layout.annotations] == ["1 query per head", "16 queries per head"]


def test_the_summary_names_each_figure_once():
    from tileinfer_profiling.summary import report_summary

    gen = pd.DataFrame([{"mode": "plain decode", "decode_tok_s": 5.0, "mean_tokens_per_step": 1.0, "block_size": 1},
                        {"mode": "DFlash", "decode_tok_s": 40.123, "mean_tokens_per_step": 7.06, "block_size": 16}]).set_index("mode")
    table = report_summary(generation=gen, accept_profile=7.1)
    figures = dict(zip(table["figure"], table["value"]))
    assert figures["plain decoding: decode speed"] == "5 tok/s" and figures["DFlash: decode speed"] == "40.1 tok/s"
    assert figures["DFlash: tokens per step (replayed 7.1)"] == "7.06"
    assert not any("decode decode" in f for f in figures)

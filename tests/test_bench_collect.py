"""Filing a run's rows into the recorded results, the step profiles' summary, and worker timeouts."""

import json
import sys

import pandas as pd
import pytest

from bench.ref import collect, profile_summary
from bench.ref.metric import append_jsonl, read_jsonl
from bench.ref.procs import run_workers
from tests.test_bench_metric import make_row


def _run_dir(path, rows_by_file):
    path.mkdir(parents=True)
    for name, rows in rows_by_file.items():
        for row in rows:
            append_jsonl(path / name, row)
    return path


def _ours(point, process, **kw):
    return make_row(model="qwen3-4b", point=point, process=process, weights_kind="random", **kw)


def test_collect_files_rows_by_kind_and_replaces_what_they_supersede(tmp_path):
    into = tmp_path / "results"
    into.mkdir()
    (into / "comparison_1k_h200.jsonl").write_text(json.dumps(make_row(point="1k", decode_tok_s=1.0)) + "\n")
    (into / "comparison_8k_h200.jsonl").write_text(json.dumps(make_row(point="8k")) + "\n")  # not in these runs
    first = _run_dir(tmp_path / "call1", {
        "tileinfer.jsonl": [_ours("1k", p) for p in range(3)],
        "sizes.jsonl": [make_row(model="qwen3-8b", process=p) for p in range(3)],
    })
    second = _run_dir(tmp_path / "call2", {"peers.jsonl": [
        make_row(engine="transformers", mode="eager", version="5.17", model="qwen3-4b", dflash=False, block_size=1,
                 decode_tok_s=30.0 + p, process=p) for p in range(2)]})
    (first / "features_1k_edit_h200.csv").write_text("feature,gpu\nx,NVIDIA H200\n")
    (second / "profile_8k_bf16_h200.csv").write_text("task,gpu\nedit,NVIDIA H200\n")
    written = {p.name for p in collect.collect([first, second], into)}
    assert {"comparison_1k_h200.jsonl", "comparison_1k_h200.md", "sizes_h200.jsonl", "sizes_h200.md",
            "peers_1k_h200.jsonl", "peers_1k_h200.md", "peers_speedup_h200.csv", "peers_speedup_h200.md",
            "features_1k_edit_h200.csv", "profile_8k_bf16_h200.csv"} == written
    assert [r["process"] for r in read_jsonl(into / "comparison_1k_h200.jsonl")] == [0, 1, 2]  # replaced
    assert len(read_jsonl(into / "comparison_8k_h200.jsonl")) == 1  # kept: no 8k rows in these runs
    assert {r["model"] for r in read_jsonl(into / "sizes_h200.jsonl")} == {"qwen3-8b"}
    assert "**disagree**" in (into / "peers_1k_h200.md").read_text()  # 30 and 31 tok/s: 3 % apart
    table = pd.read_csv(into / "peers_speedup_h200.csv")
    assert list(table["peer"]) == ["transformers eager"] and (table["git_rev"] == "abc").all()
    assert table["command"].iloc[0].startswith("python -m bench.peers.speedup bench/results/comparison_1k_h200.jsonl")


def test_collect_refuses_dirty_or_mixed_revisions(tmp_path):
    run = _run_dir(tmp_path / "call", {"tileinfer.jsonl": [_ours("1k", 0, git_rev="abc-dirty"),
                                                           _ours("1k", 1, git_rev="def")]})
    assert collect.check_revision(read_jsonl(run / "tileinfer.jsonl")) == [
        "rows of several revisions: abc-dirty, def", "not a clean commit: abc-dirty"]
    with pytest.raises(SystemExit, match="not a clean commit"):
        collect.collect([run], tmp_path)
    assert collect.collect([run], tmp_path, allow_dirty=True)
    with pytest.raises(SystemExit, match="no rows"):
        collect.collect([tmp_path / "call" / "nothing"], tmp_path)


def test_collect_files_calls_of_different_revisions_one_file_each(tmp_path):
    """The calls of a full run may span sessions: each file's rows come from one revision."""
    into = tmp_path / "results"
    into.mkdir()
    first = _run_dir(tmp_path / "call1", {"tileinfer.jsonl": [_ours("1k", p, git_rev="abc") for p in range(2)]})
    second = _run_dir(tmp_path / "call2", {"tileinfer.jsonl": [_ours("8k", p, git_rev="def") for p in range(2)]})
    collect.collect([first, second], into)
    assert {r["git_rev"] for r in read_jsonl(into / "comparison_1k_h200.jsonl")} == {"abc"}
    assert {r["git_rev"] for r in read_jsonl(into / "comparison_8k_h200.jsonl")} == {"def"}
    third = _run_dir(tmp_path / "call3", {"tileinfer.jsonl": [_ours("1k", 2, git_rev="def")]})
    with pytest.raises(SystemExit, match="comparison_1k_h200.jsonl: rows of several revisions: abc, def"):
        collect.collect([first, third], into)


def test_profile_summary_names_the_model_not_its_path(tmp_path):
    for task in ("edit", "explain"):
        (tmp_path / task).mkdir()
        pd.DataFrame([{"variant": v, "gemm_ms": 3.0, "attention_ms": 1.0, "busy_pct": 99.0, "weights": "bf16",
                       "model": "/tmp/x/target", "draft": "/tmp/x/drafter"} for v in ("eager", "graphs")]
                     ).to_csv(tmp_path / task / "summary.csv", index=False)
    out = tmp_path / "profile.csv"
    profile_summary.main([str(tmp_path), "--model", "qwen3-4b", "--accept-mode", "replay:1.87",
                          "--command", "RANDOM_WEIGHTS=qwen3-4b bench/ref/profile.sh", "--out", str(out)])
    df = pd.read_csv(out)
    assert len(df) == 4 and set(df["task"]) == {"edit", "explain"} and (df["model"] == "qwen3-4b").all()
    assert "draft" not in df and {"gpu", "torch", "triton", "git_rev", "command"} <= set(df.columns)
    assert profile_summary.summary_rows(tmp_path, ["none"]).empty


def test_a_worker_past_its_timeout_is_killed_and_its_rows_kept(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    slow = [sys.executable, "-c", "import json, time; print('ROW ' + json.dumps({'a': 1}), flush=True); "
                                  "time.sleep(60)"]
    rows = run_workers([("slow", slow)], out, timeout_s=2)
    assert rows == [{"a": 1}] and read_jsonl(out) == [{"a": 1}]
    assert "ran past 2 s and was killed" in capsys.readouterr().err


def _expand(pattern):
    """`a_{1k,8k}.{csv,md}` -> a_1k.csv, a_1k.md, a_8k.csv, a_8k.md."""
    import itertools
    import re
    parts = re.split(r"\{([^}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def test_results_readme_lists_each_file_once():
    from pathlib import Path
    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    listed = []
    for line in (results / "README.md").read_text().splitlines():
        if line.startswith("| `"):
            listed += _expand(line.split("`")[1])
    files = sorted(p.name for p in results.iterdir() if p.name != "README.md")
    assert [f for f in files if listed.count(f) != 1] == []
    assert len(listed) == len(set(listed))  # files still to be recorded are listed once too

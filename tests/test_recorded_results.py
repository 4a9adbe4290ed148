"""Every recorded figure says where it came from, and the workbench can read it."""

import re
from pathlib import Path

import pandas as pd
import pytest

from tileinfer_profiling import recorded

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.csv")), ids=lambda p: p.name)
def test_recorded_csv_states_its_provenance(path):
    df = pd.read_csv(path)
    assert len(df)
    columns = set(df.columns)
    assert columns & {"gpu", "device"}, "no GPU / device column"
    assert {"torch", "triton"} <= columns
    assert {"git_rev", "command"} <= columns
    assert df["command"].notna().all()


@pytest.mark.parametrize("path", sorted(RESULTS.iterdir()), ids=lambda p: p.name)
def test_recorded_commands_name_no_machine_paths(path):
    """Commands and paths as typed at the repository root: none of the machine that ran them."""
    text = path.read_text()
    assert not re.search(r"(^|[\s\"'=(,])/(root|tmp|work|home|Users)/", text), "an absolute path of a machine"


def test_workbench_reads_the_recorded_runs():
    steps = recorded.engine_steps(RESULTS / "engine_h200.csv")
    assert {"plain decode", "dflash step"} <= set(steps["what"])
    assert (steps["step_ms"] > 0).all()
    comparison = recorded.comparison(sorted(RESULTS.glob("comparison_*_h200.jsonl")))
    assert set(comparison["point"]) == {"1k", "8k"} and (comparison["decode_tok_s"] > 0).all()
    assert not comparison.duplicated(["point", "task", "weights", "dflash"]).any()  # processes in one row
    assert (comparison["processes"] >= 1).all() and (comparison["decode_spread"] >= 0).all()
    sizes = recorded.model_sizes([RESULTS / "sizes_h200.jsonl", RESULTS / "comparison_1k_h200.jsonl"])
    assert list(sizes["model"]) == ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b"]
    assert sizes["floor_ms"].is_monotonic_increasing and sizes["plain_tok_s"].is_monotonic_decreasing
    assert ((sizes["plain_of_floor"] > 0) & (sizes["plain_of_floor"] < 1)).all()
    assert (sizes["dflash_edit_tok_s"] > sizes["dflash_explain_tok_s"]).all()
    assert (sizes["dflash_explain_tok_s"] > sizes["plain_tok_s"]).all()
    by_temperature = recorded.sampling_acceptance(RESULTS / "sampling_acceptance_h200.csv")
    assert set(by_temperature["temperature"]) == {0.0, 0.6, 1.0}
    assert all(len(a) == 15 and all(0 <= x <= 1 for x in a) for a in by_temperature["acceptance_per_position"])
    peers = recorded.peer_speedups(RESULTS / "peers_speedup_h200.csv")
    assert {"transformers eager", "transformers static-compile", "dflash eager"} <= set(peers["peer"])
    assert (peers["speedup"] > 1).all()
    index = recorded.index(RESULTS).set_index("file")
    assert (index["rows"] > 0).all()
    revisions = {rev.strip() for revs in index["git_rev"] for rev in str(revs).split(",")}
    assert not {rev for rev in revisions if rev == "unknown" or rev.endswith(("-wip", "-dirty"))}
    long = recorded.long_prompts(RESULTS / "long_prompts_h200.csv")
    assert set(long["prompt_tokens"]) >= {8192, 32768}

"""Every recorded figure says where it came from, and the workbench can read it."""

from pathlib import Path

import pandas as pd
import pytest

from profiling import notebook_support as nbs

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.csv")), ids=lambda p: p.name)
def test_recorded_csv_states_its_provenance(path):
    df = pd.read_csv(path)
    assert len(df)
    columns = set(df.columns)
    assert columns & {"gpu", "device"}, "no GPU / device column"
    assert {"torch", "triton"} <= columns
    assert columns & {"git_rev", "git_revision"} and "command" in columns
    assert df["command"].notna().all()


def test_workbench_reads_the_recorded_runs():
    steps = nbs.recorded_engine_steps()
    assert {"plain decode", "dflash step"} <= set(steps["what"])
    assert (steps["step_ms"] > 0).all()
    comparison = nbs.recorded_comparison()
    assert set(comparison["point"]) == {"1k", "8k"} and (comparison["decode_tok_s"] > 0).all()
    long = nbs.recorded_long_prompts()
    assert set(long["prompt_tokens"]) >= {8192, 32768}

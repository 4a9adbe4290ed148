"""The closing table of a report: one (figure, value) row per thing measured, with the run's provenance."""

from pathlib import Path

import pandas as pd

from tileinfer_profiling.run_info import run_info
from tileinfer_profiling.sweeps import best_splits


def report_summary(pair=None, generation=None, sweep=None, prof=None, runs=None):
    """(figure, value) rows: device, versions and revision, then what ran; what did not run is left out.
    `generation`: a `generate_both` table; `sweep`: an `attention_sweep`; `prof`: a `StepProfile`;
    `runs`: `acceptance_runs`."""
    info = run_info()
    rows = [("device", info["gpu"]), ("torch", info["torch"]), ("triton", info["triton"]), ("git revision", info["git_rev"])]
    if pair is not None:
        rows.append(("weights", "random" if pair.random_weights else "real"))
    if generation is not None:
        for mode, r in generation.iterrows():
            rows.append((f"{mode} decode tok/s", round(float(r["decode_tok_s"]), 2)))
            rows.append((f"{mode} tokens per step", round(float(r["mean_tokens_per_step"]), 2)))
    if sweep is not None and len(sweep):
        best = best_splits(sweep).iloc[-1]
        rows.append((f"best num_splits at kv_len {int(best['kv_len'])}, q_len {int(best['q_len'])}",
                     int(best["best_num_splits"])))
    if prof is not None:
        s = prof.summary.iloc[-1]
        rows += [(f"step kernel ms ({s['variant']})", round(float(s["kernel_ms_per_step"]), 3)),
                 (f"step busy % ({s['variant']})", round(float(s["busy_pct"]), 1))]
    if runs is not None:
        for _, r in runs.iterrows():
            rows.append((f"tokens per step, {r['point']} {r['task']}", round(float(r["mean_tokens_per_step"]), 2)))
    return pd.DataFrame(rows, columns=["figure", "value"]).astype({"value": str})


def write_summary(table, path):
    """Write the table as CSV when `path` is set (the report runner reads it back); returns the table."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(path, index=False)
    return table

"""The closing table of a report: one (figure, value) row per thing measured, with the run's provenance;
values carry their units (`bench.report` prints it and writes it as summary.csv)."""

from pathlib import Path

import pandas as pd

from tileinfer_profiling import fmt
from tileinfer_profiling.run_info import run_info
from tileinfer_profiling.sweeps import best_splits

_MODE_NAMES = {"plain decode": "plain decoding", "DFlash": "DFlash"}


def report_summary(pair=None, generation=None, sweep=None, prof=None, runs=None, accept_profile=None):
    """(figure, value) rows: device, versions and revision, then what ran; what did not run is left out.
    `generation`: a `generate_both` table; `sweep`: an `attention_sweep`; `prof`: a `StepProfile`;
    `runs`: `acceptance_runs` (real drafts); `accept_profile`: the tokens per step DFlash replayed, if any."""
    info = run_info()
    rows = [("device", info["gpu"]), ("torch", info["torch"]), ("triton", info["triton"]), ("git revision", info["git_rev"])]
    if pair is not None:
        rows.append(("weights", "random" if pair.random_weights else "real"))
    if generation is not None:
        for mode, r in generation.iterrows():
            name = _MODE_NAMES.get(mode, mode)
            rows.append((f"{name}: decode speed", fmt.rate(r["decode_tok_s"])))
            if r["block_size"] > 1:
                replayed = f" (replayed {fmt.num(accept_profile)})" if accept_profile else ""
                rows.append((f"{name}: tokens per step{replayed}", fmt.sig(r["mean_tokens_per_step"])))
    if sweep is not None and len(sweep):
        best = best_splits(sweep).iloc[-1]
        rows.append((f"best split count at kv_len {fmt.integer(best['kv_len'])}, q_len {fmt.integer(best['q_len'])}",
                     fmt.integer(best["best_num_splits"])))
    if prof is not None:
        s = prof.summary.iloc[-1]
        rows += [(f"DFlash step: GPU time ({s['variant']})", fmt.ms(s["kernel_ms_per_step"])),
                 (f"DFlash step: GPU busy ({s['variant']})" if s["device"] != "cpu" else
                  f"DFlash step: kernels busy ({s['variant']})", f"{fmt.sig(s['busy_pct'])} %")]
    if runs is not None:
        for _, r in runs.iterrows():
            rows.append((f"acceptance: tokens per step, {r['point']} {r['task']}",
                         f"{fmt.sig(r['mean_tokens_per_step'])} ({fmt.integer(r['steps'])} steps)"))
    return pd.DataFrame(rows, columns=["figure", "value"]).astype({"value": str})


def write_summary(table, path):
    """Write the table as CSV when `path` is set (the report runner reads it back); returns the table."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(path, index=False)
    return table

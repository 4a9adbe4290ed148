"""This project's recorded DFlash decode beside the comparison's engines (vLLM and the original TileInfer),
each as a fraction of its own card's memory bandwidth, so engines on different GPUs line up.

    rows = recorded_rows(results.glob("comparison_*_h200.jsonl"))
    shares(load_reference(reference_csv), rows)   # one row per engine × GPU × point × task × weights
"""

import json
from pathlib import Path

import pandas as pd

from tileinfer_profiling.compare import reference_fractions

OURS = "this project"
ENGINE_LABELS = {"vllm": "vLLM", "tileinfer": "TileInfer (original)", OURS: "this project"}
ORDER = [OURS, "tileinfer", "vllm"]


def recorded_rows(paths):
    """The DFlash rows of the comparison's metric recorded here (JSON lines of `bench.ref.tileinfer_spec`),
    with the engine called "this project" (the comparison's own TileInfer keeps "tileinfer")."""
    rows = []
    for path in sorted(map(Path, paths)):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    df = pd.DataFrame(rows)
    if not len(df):
        return df
    if "dflash" in df:
        df = df[df["dflash"].astype(bool)]
    return df.assign(engine=OURS).reset_index(drop=True)


def shares(reference, ours=None):
    """`compare.reference_fractions` of the reference and our rows, with `label` (engine · GPU),
    `group` ("1k edit BF16"), and `replayed` (our tokens per step are the comparison's, replayed on
    random weights, when the rows say so)."""
    df = reference_fractions(reference, ours)
    if not len(df):
        return df
    df = df.assign(label=[f"{ENGINE_LABELS.get(e, e)} · {g}" for e, g in zip(df["engine"], df["gpu"])],
                   group=[f"{p} {t} {w.upper()}" for p, t, w in zip(df["point"], df["task"], df["weights"])])
    rank = {e: i for i, e in enumerate(ORDER)}
    df["_rank"] = [rank.get(e, len(ORDER)) for e in df["engine"]]
    return df.sort_values(["_rank", "point", "task", "weights"]).drop(columns="_rank").reset_index(drop=True)


def headline(shares_df, point="8k", task="edit", weights="bf16"):
    """{engine label: fraction} at one point, task and weights (the 8k BF16 edit step by default)."""
    hit = shares_df[(shares_df["point"] == point) & (shares_df["task"] == task) & (shares_df["weights"] == weights)]
    return dict(zip(hit["label"], hit["bandwidth_fraction"]))

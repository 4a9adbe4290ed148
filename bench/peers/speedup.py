"""TileInfer's speedup over each peer, from rows of the same run (same GPU, model and prompt).

    python -m bench.peers.speedup bench/results/comparison_1k_h200.jsonl bench/results/peers_1k_h200.jsonl

For every point x task, each of our configurations (weights x DFlash on/off) against each peer
(engine, mode): `speedup` = our decode tok/s / the peer's. Where both sides are the same kind of
decoding (both DFlash, or both plain), `step_speedup` = the peer's step ms / ours: the cost of one
step, which does not depend on acceptance (our DFlash rows on random weights replay the comparison's
tokens per step; the DFlash reference's random drafts are accepted ~1 token per step). Medians over
processes first (`bench.ref.metric.summarize`).
"""

import argparse
import math
import sys
from pathlib import Path

from bench.ref.metric import CONFIG_KEY, config_key, read_jsonl, summarize
from tileinfer_profiling.run_info import command_line

OURS = "tileinfer"
COLUMNS = ("gpu", "model", "point", "task", "weights", "dflash", "peer", "peer_version", "ours_tok_s", "peer_tok_s",
           "speedup", "ours_step_ms", "peer_step_ms", "step_speedup", "ours_new_tokens", "peer_new_tokens",
           "peer_note", "git_rev", "peer_git_rev", "torch", "triton", "command")


def speedups(rows):
    """One dict per (our configuration, peer configuration) at the same GPU, model, point and task."""
    versions, notes, first = {}, {}, {}
    for r in rows:
        key = (r["engine"], r.get("mode", ""))
        versions.setdefault(key, r.get("version", ""))
        if r.get("note"):
            notes.setdefault(key, r["note"])
        first.setdefault(config_key(r), r)
    summary = summarize(rows)
    ours = [s for s in summary if s["engine"] == OURS]
    peers = [s for s in summary if s["engine"] != OURS]
    out = []
    for o in ours:
        for p in peers:
            if any(o[k] != p[k] for k in ("gpu", "model", "point", "task")):
                continue
            key = (p["engine"], p["mode"])
            mine, theirs = (first[tuple(c[k] for k in CONFIG_KEY)] for c in (o, p))
            same_kind = bool(o["dflash"]) == bool(p["dflash"])
            out.append({
                "gpu": o["gpu"], "model": o["model"], "point": o["point"], "task": o["task"],
                "weights": o["weights"], "dflash": bool(o["dflash"]),
                "peer": f"{p['engine']} {p['mode']}".strip(), "peer_version": versions.get(key, ""),
                "ours_tok_s": o["decode_tok_s"], "peer_tok_s": p["decode_tok_s"],
                "speedup": o["decode_tok_s"] / p["decode_tok_s"] if p["decode_tok_s"] else math.nan,
                "ours_step_ms": o["step_ms"], "peer_step_ms": p["step_ms"],
                "step_speedup": p["step_ms"] / o["step_ms"] if same_kind and o["step_ms"] else math.nan,
                "ours_new_tokens": int(o["new_tokens"]), "peer_new_tokens": int(p["new_tokens"]),
                "peer_note": notes.get(key, ""), "git_rev": mine["git_rev"], "peer_git_rev": theirs["git_rev"],
                "torch": mine["torch"], "triton": mine["triton"],
            })
    return out


def _num(x, fmt):
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def to_markdown(table, revisions=()):
    head = ""
    if revisions:
        head = f"git {', '.join(sorted(revisions))}" + (" (**several revisions**)" if len(revisions) > 1 else "") + "\n\n"
    lines = ["| point | task | ours | peer | ours tok/s | peer tok/s | speedup | ours step ms | peer step ms "
             "| step speedup |", "|---|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        ours = f"{t['weights']} {'DFlash' if t['dflash'] else 'plain'}"
        peer = f"{t['peer']} {t['peer_version']}".strip()
        lines.append(f"| {t['point']} | {t['task']} | {ours} | {peer} | {_num(t['ours_tok_s'], '.1f')} | "
                     f"{_num(t['peer_tok_s'], '.1f')} | {_num(t['speedup'], '.2f')}x | {_num(t['ours_step_ms'], '.2f')} | "
                     f"{_num(t['peer_step_ms'], '.2f')} | {_num(t['step_speedup'], '.2f')}"
                     f"{'x' if _num(t['step_speedup'], '.2f') else ''} |")
    notes = sorted({(t["peer"], t["peer_note"]) for t in table if t["peer_note"]})
    tail = "".join(f"\n- {peer}: {note}" for peer, note in notes)
    return head + "\n".join(lines) + "\n" + (tail + "\n" if tail else "")


def write(table, csv_path, command=None):
    """The table as CSV, with the command that made it in every row."""
    import csv
    command = command or command_line()
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows({**t, "command": command} for t in table)
    return csv_path


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.peers.speedup", description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="JSONL row files: ours and the peers'")
    ap.add_argument("--csv", help="write the table here too")
    args = ap.parse_args(argv)
    rows = [r for path in args.files for r in read_jsonl(path)]
    table = speedups(rows)
    if not table:
        raise SystemExit("no (ours, peer) pair at the same GPU, model, point and task in " + ", ".join(args.files))
    print(to_markdown(table, {r["git_rev"] for r in rows}))
    if args.csv:
        write(table, args.csv)
        print(f"written {Path(args.csv)}", file=sys.stderr)


if __name__ == "__main__":
    main()

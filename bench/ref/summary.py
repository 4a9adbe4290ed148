"""Summarize row files: medians over processes, agreement flags, and a CSV of all rows.

    python -m bench.ref.summary bench/results/run/tileinfer.jsonl bench/results/run/vllm.jsonl --csv all.csv
"""

import argparse
import sys

from bench.ref.metric import format_table, read_jsonl, summarize, write_csv


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.ref.summary", description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--csv", help="write every row here")
    args = ap.parse_args(argv)
    rows = [r for path in args.files for r in read_jsonl(path)]
    if not rows:
        raise SystemExit("no rows in " + ", ".join(args.files))
    summary = summarize(rows)
    print(format_table(summary))
    bad = [s for s in summary if not s["agree"]]
    if bad:
        print(f"{len(bad)} configuration(s) disagree across processes by more than 1 %", file=sys.stderr)
    if args.csv:
        write_csv(rows, args.csv)


if __name__ == "__main__":
    main()

"""File the rows of one or several `run_all.sh` calls into the recorded results, replacing what they supersede.

    python -m bench.ref.collect RUN_DIR [RUN_DIR ...] [--into bench/results]

From every `*.jsonl` under the run directories: TileInfer's rows of the main model go to
`comparison_<point>_<gpu>.jsonl` (one file per point, replaced when the runs have rows for it), TileInfer's
rows of other models to `sizes_<gpu>.jsonl`, the other engines' rows to `peers_<point>_<gpu>.jsonl`; each with a
markdown summary beside it (medians over processes, the 1 % agreement flagged). The speedup of each of our
configurations over each peer goes to `peers_speedup_<gpu>.{csv,md}`. Results by feature and step
profiles (`features_*`, `profile_*`) are copied as they are. The rows of each file must come from one clean
revision (`--allow-dirty` to file them anyway); files may differ, so the calls of a full run can span
sessions, and each row and speedup names its revision.
"""

import argparse
import shutil
import sys
from pathlib import Path

from bench.peers import speedup
from bench.ref.metric import format_table, gpu_tag, read_jsonl, summarize

REPO = Path(__file__).resolve().parents[2]
MAIN_MODEL = "qwen3-4b"
COPIED = ("features_*.csv", "features_*.md", "profile_*.csv")


def group_rows(rows, main_model=MAIN_MODEL):
    """{file name: rows} as the recorded results keep them."""
    out = {}
    for r in rows:
        tag = gpu_tag(r["gpu"])
        if r["engine"] != "tileinfer":
            name = f"peers_{r['point']}_{tag}.jsonl"
        elif r.get("model", "") in ("", main_model):
            name = f"comparison_{r['point']}_{tag}.jsonl"
        else:
            name = f"sizes_{tag}.jsonl"
        out.setdefault(name, []).append(r)
    return out


def check_revision(rows):
    """Problems with the rows' revisions: several of them, or one that is not a clean commit."""
    revs = sorted({r["git_rev"] for r in rows})
    problems = []
    if len(revs) > 1:
        problems.append(f"rows of several revisions: {', '.join(revs)}")
    bad = [r for r in revs if r == "unknown" or r.endswith(("-dirty", "-wip"))]
    if bad:
        problems.append(f"not a clean commit: {', '.join(bad)}")
    return problems


def _write_jsonl(rows, path):
    import json
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_speedups(into, tag):
    """`peers_speedup_<tag>.{csv,md}` from the recorded comparison and peer rows of one GPU in `into`."""
    sources = sorted(into.glob(f"comparison_*_{tag}.jsonl")) + sorted(into.glob(f"peers_*_{tag}.jsonl"))
    table = speedup.speedups([r for p in sources for r in read_jsonl(p)])
    if not table:
        return []
    command = "python -m bench.peers.speedup " + " ".join(f"bench/results/{p.name}" for p in sources)
    csv = speedup.write(table, into / f"peers_speedup_{tag}.csv", command=command)
    md = csv.with_suffix(".md")
    md.write_text(speedup.to_markdown(table, {t["git_rev"] for t in table} | {t["peer_git_rev"] for t in table}))
    return [csv, md]


def collect(run_dirs, into, main_model=MAIN_MODEL, allow_dirty=False):
    """Write the grouped rows, summaries, speedups and copied files into `into`; return the paths written."""
    into = Path(into)
    files = sorted(p for d in run_dirs for p in Path(d).rglob("*.jsonl"))
    rows = [r for p in files for r in read_jsonl(p)]
    if not rows:
        raise SystemExit(f"no rows under {', '.join(map(str, run_dirs))}")
    groups = group_rows(rows, main_model)
    problems = [f"{name}: {problem}" for name, group in sorted(groups.items()) for problem in check_revision(group)]
    if problems and not allow_dirty:
        raise SystemExit("; ".join(problems) + " (--allow-dirty files them anyway)")
    written = []
    for name, group in sorted(groups.items()):
        path = into / name
        _write_jsonl(group, path)
        summary = summarize(group)
        path.with_suffix(".md").write_text(format_table(summary))
        written += [path, path.with_suffix(".md")]
        bad = [s for s in summary if s["processes"] > 1 and not s["agree"]]
        print(f"{name}: {len(group)} rows, {len(summary)} configurations, "
              f"{len(summary) - len(bad)} agree within 1 %" + (f", {len(bad)} do not" if bad else ""))
    for tag in sorted({gpu_tag(r["gpu"]) for r in rows}):
        written += write_speedups(into, tag)
    for d in run_dirs:
        for pattern in COPIED:
            for src in sorted(Path(d).rglob(pattern)):
                shutil.copyfile(src, into / src.name)
                written.append(into / src.name)
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.ref.collect", description=__doc__.split("\n")[0])
    ap.add_argument("run_dirs", nargs="+")
    ap.add_argument("--into", default=str(REPO / "bench" / "results"))
    ap.add_argument("--main-model", default=MAIN_MODEL, help="the comparison's model, as the rows name it")
    ap.add_argument("--allow-dirty", action="store_true")
    args = ap.parse_args(argv)
    for path in collect(args.run_dirs, args.into, args.main_model, args.allow_dirty):
        print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Fresh processes per configuration: a worker prints its rows as `ROW <json>` lines, the parent appends
each to the output file as it arrives, so an interrupted or timed-out run keeps every finished row."""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading

from bench.ref.metric import append_jsonl

ROW_PREFIX = "ROW "


def emit_row(row, stream=None):
    """Worker side: hand one finished row to the parent."""
    stream = stream or sys.stdout
    stream.write(ROW_PREFIX + json.dumps(row) + "\n")
    stream.flush()


def add_run_arguments(ap, out_default):
    """The arguments every spec script shares: processes, trials, warm-up, bandwidth source, worker
    timeout, output file, and the hidden ones of its worker processes."""
    ap.add_argument("--processes", type=int, default=None,
                    help="fresh processes per configuration (default: 3 at 1k, 2 at 8k)")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--datasheet-bandwidth", action="store_true",
                    help="take the GPU's bandwidth from the datasheet table instead of measuring it")
    ap.add_argument("--timeout-s", type=float, default=None,
                    help="kill a worker process after this many seconds; its finished rows stay")
    ap.add_argument("--cpus", type=parse_cpus, default=None,
                    help="pin every worker process to these CPUs (e.g. 2-5 or 2,3,8): the same cores for each "
                         "process, so a request's host work does not move with where the scheduler put it")
    ap.add_argument("--out", help=f"JSONL file the rows are appended to (default {out_default})")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--process", type=int, default=0, help=argparse.SUPPRESS)


def parse_cpus(text: str) -> frozenset[int]:
    """CPU ids from "2-5", "2,3,8" or "0-1,4", each one this process may run on."""
    cpus = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a CPU list (e.g. 2-5 or 2,3,8)") from None
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise argparse.ArgumentTypeError(f"CPUs {text!r} are not all among this process's CPUs "
                                         f"({format_cpus(allowed)})")
    return frozenset(cpus)


def format_cpus(cpus) -> str:
    """The shortest list parse_cpus reads back: {0, 1, 2, 5} -> "0-2,5"."""
    out, ids = [], sorted(cpus)
    while ids:
        lo = hi = ids.pop(0)
        while ids and ids[0] == hi + 1:
            hi = ids.pop(0)
        out.append(f"{lo}-{hi}" if hi > lo else f"{lo}")
    return ",".join(out)


def cpus_argv(cpus) -> list[str]:
    """The flag a worker's command carries, so its rows' command says where it ran."""
    return ["--cpus", format_cpus(cpus)] if cpus else []


def check_pinned(cpus) -> None:
    """Worker side: refuse to measure when the parent's pinning did not take."""
    if cpus and os.sched_getaffinity(0) != set(cpus):
        raise SystemExit(f"pinned to CPUs {format_cpus(cpus)}, running on {format_cpus(os.sched_getaffinity(0))}")


def progress(iterable, **kw):
    try:
        from tqdm import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, **kw)


def _kill(proc):
    """End a worker and whatever it started (it leads its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_workers(jobs, out, desc="configurations", timeout_s=None, cpus=None):
    """Run each (label, argv) job as a fresh process (pinned to `cpus`, every thread of it, when given);
    append its rows to `out` (JSONL); return all rows.

    A worker that fails, or runs past `timeout_s` seconds (then it is killed), is reported on stderr
    and the run goes on; Ctrl-C stops the current worker and returns what finished.
    """
    rows, failed = [], []
    bar = progress(jobs, desc=desc, unit="process", file=sys.stderr)
    try:
        for label, argv in bar:
            if hasattr(bar, "set_postfix_str"):
                bar.set_postfix_str(label)
            pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=pin)
            timer = threading.Timer(timeout_s, _kill, (proc,)) if timeout_s else None
            if timer:
                timer.start()
            try:
                for line in proc.stdout:
                    if line.startswith(ROW_PREFIX):
                        row = json.loads(line[len(ROW_PREFIX):])
                        append_jsonl(out, row)
                        rows.append(row)
                    else:
                        sys.stderr.write(line)
                proc.wait()
            except KeyboardInterrupt:
                _kill(proc)
                proc.wait()
                raise
            finally:
                if timer:
                    timer.cancel()
            if proc.returncode != 0:
                why = (f"ran past {timeout_s:g} s and was killed" if proc.returncode == -signal.SIGKILL and timer
                       else f"exited with {proc.returncode}")
                failed.append(label)
                print(f"worker {label} {why}; its finished rows are kept", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"\ninterrupted: {len(rows)} finished rows are in {out}", file=sys.stderr)
    if failed:
        print(f"failed workers: {', '.join(failed)}", file=sys.stderr)
    return rows

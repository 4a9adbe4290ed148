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
    ap.add_argument("--out", help=f"JSONL file the rows are appended to (default {out_default})")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--process", type=int, default=0, help=argparse.SUPPRESS)


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


def run_workers(jobs, out, desc="configurations", timeout_s=None):
    """Run each (label, argv) job as a fresh process; append its rows to `out` (JSONL); return all rows.

    A worker that fails, or runs past `timeout_s` seconds (then it is killed), is reported on stderr
    and the run goes on; Ctrl-C stops the current worker and returns what finished.
    """
    rows, failed = [], []
    bar = progress(jobs, desc=desc, unit="process", file=sys.stderr)
    try:
        for label, argv in bar:
            if hasattr(bar, "set_postfix_str"):
                bar.set_postfix_str(label)
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
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

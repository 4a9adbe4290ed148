"""Silence the lines a library prints straight to a file descriptor (torch's profiler announces
`USDT: ... profiler_start` on fd 2, past Python's sys.stderr), and keep every other line.

    with quiet.dropping_lines(b"USDT:"):
        ...  # anything else written to fd 2 comes out once the block ends
"""

import contextlib
import os
import sys
import tempfile

PROFILER_NOISE = (b"USDT:",)


@contextlib.contextmanager
def dropping_lines(prefixes=PROFILER_NOISE, fd=2):
    """Run the block with `fd` sent to a temporary file, then write its lines back to `fd` except those
    starting with one of `prefixes`. Python-level writes to sys.stderr are untouched (a notebook kernel
    sends them as messages); only what reaches the descriptor is filtered."""
    prefixes = tuple(prefixes)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        saved = os.dup(fd)
    except OSError:  # no such descriptor: nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), fd)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            captured.seek(0)
            for line in captured:
                if not line.lstrip().startswith(prefixes):
                    os.write(fd, line)

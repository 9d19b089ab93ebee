"""Run the real ``iobench`` command with its standard output a pipe whose reader is gone (``| head``)."""

from __future__ import annotations

import os
import subprocess
import sys


def run_into_closed_pipe(argv: list[str], *, unbuffered: bool) -> subprocess.CompletedProcess[str]:
    """``python -m iobench ARGV`` writing into a pipe already closed at its other end.

    Every write fails with EPIPE whatever the timing, the case ``iobench plan M | head -1``
    meets once ``head`` has its line. ``unbuffered``: every print is a write (as with
    ``PYTHONUNBUFFERED``); else the output meets the closed pipe when a buffer fills or at exit.
    """
    reader, writer = os.pipe()
    os.close(reader)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    try:
        return subprocess.run(
            [sys.executable, "-m", "iobench", *argv],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
    finally:
        os.close(writer)

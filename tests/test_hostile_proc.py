"""Targets reached through /proc links that each process reads as its own: the guard cannot judge them.

``/proc/self/cwd``, ``/proc/self/fd/N``, ``/dev/fd/N``, ``/dev/stdout`` and
the like lead, in iobench, to iobench's working folder and descriptors; in
fio, which opens the path later in its own process (working in the point's
folder), to fio's. What the guard judged is then not what fio opens: such a
target is refused before anything runs. ``/proc/self/root`` is the same for
both (one root), and stays a way to name a device (see test_guard_targets).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.fio

MATRIX = """\
version: 1
name: proc
targets:
  - path: "{path}"
    size: 1M
fio:
  ioengine: psync
  rw: write
  bs: 4k
  size: 1M
"""


def iobench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iobench", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
    )


def _link_to_cwd(tmp_path: Path) -> str:
    link = tmp_path / "here"
    link.symlink_to("/proc/self/cwd")
    return f"{link}/job.fio"


SPELLINGS: dict[str, Callable[[Path], str]] = {
    "proc-self-cwd": lambda tmp: "/proc/self/cwd/job.fio",
    "proc-thread-self-cwd": lambda tmp: "/proc/thread-self/cwd/job.fio",
    "proc-self-fd": lambda tmp: "/proc/self/fd/3",
    "dev-fd": lambda tmp: "/dev/fd/3",
    "dev-stdout": lambda tmp: "/dev/stdout",
    "link-to-proc-self-cwd": _link_to_cwd,
}


@pytest.mark.parametrize("spelling", SPELLINGS.values(), ids=SPELLINGS.keys())
def test_a_target_through_a_per_process_proc_link_is_refused(
    spelling: Callable[[Path], str], write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    path = spelling(tmp_path)
    out = tmp_path / "results"
    done = iobench("run", str(write_matrix(MATRIX.format(path=path))), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "each process" in done.stderr, done.stderr
    assert not out.exists()

"""What another user plants where iobench cleans up after killed runs: iobench leaves it alone.

A run's control folder for its SSH connections lies in the shared temporary
folder (``/tmp/iobench-ssh-*``: socket paths must be short). A later run
closes the connections a killed run left there and removes the folder; it
must do so only for its own user's folders. Another user (``nobody``) plants
a folder of that name with a dead "owner" and a socket that listens: iobench
neither talks to that socket (its ssh client would speak to whoever listens)
nor deletes the folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from iobench.system.process import Completed, run_process
from iobench.system.ssh import CONTROL_PREFIX, close_stale_masters

pytestmark = pytest.mark.root

# Run as nobody: a folder that looks like a killed run's, with a socket that records a connection.
PLANT = r"""
import json, os, socket, sys
folder = sys.argv[1]
os.mkdir(folder, 0o700)
with open(os.path.join(folder, "owner"), "w") as f:
    json.dump({"pid": 2**22 + 1, "start_ticks": 1}, f)
s = socket.socket(socket.AF_UNIX)
s.bind(os.path.join(folder, "master.sock"))
s.listen(4)
print("ready", flush=True)
s.settimeout(30)
try:
    s.accept()
    open(os.path.join(folder, "connected"), "w").close()
except OSError:
    pass
"""


@pytest.fixture
def planted() -> Iterator[Path]:
    """A control folder of user ``nobody``, listening; removed (with its process) afterwards."""
    folder = Path(tempfile.gettempdir()) / f"{CONTROL_PREFIX}planted-{os.getpid()}"
    proc = subprocess.Popen(
        ["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", PLANT, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield folder
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_another_users_control_folder_is_neither_contacted_nor_removed(planted: Path) -> None:
    started: list[list[str]] = []

    def executor(argv: Sequence[str], **kwargs: Any) -> Completed:
        started.append([str(a) for a in argv])  # every ssh that could talk to a socket starts here
        return run_process(argv, **kwargs)

    closed = close_stale_masters(executor)
    assert not any(c.startswith(str(planted)) for c in closed), closed
    assert not [argv for argv in started if any(str(planted) in a for a in argv)], started
    assert planted.is_dir(), "iobench removed another user's folder"
    assert not (planted / "connected").exists(), "iobench's ssh talked to another user's socket"


def test_a_link_named_like_a_control_folder_is_left_alone(tmp_path: Path) -> None:
    """A link to a folder (of anyone's) in the temporary folder: not iobench's to clean."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (real / "owner").write_text("{}")
    link = Path(tempfile.gettempdir()) / f"{CONTROL_PREFIX}link-{os.getpid()}"
    link.symlink_to(real)
    try:
        close_stale_masters()
        assert (real / "owner").exists() and link.is_symlink()
    finally:
        link.unlink()

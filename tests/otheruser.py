"""Another local user (``nobody``) with a state folder of their own, as ``sudo -E`` hands one to root."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OTHER = "nobody"


def as_other(script: str, *args: str) -> None:
    """Run a constant shell ``script`` as :data:`OTHER` with ``args`` as ``$1``…; fails the test if it fails."""
    subprocess.run(
        ["runuser", "-u", OTHER, "--", "/bin/sh", "-c", script, "sh", *args], check=True, timeout=60
    )


@contextmanager
def others_state_home() -> Iterator[Path]:
    """An ``XDG_STATE_HOME`` folder that belongs to :data:`OTHER` (mode 0755), in a folder root may traverse.

    Yields the folder; removes everything afterwards.
    """
    base = Path(tempfile.mkdtemp(prefix="iobench-other-"))
    try:
        base.chmod(0o711)  # the other user reaches their folder; nothing else in it
        home = base / "state"
        home.mkdir(mode=0o755)
        user = pwd.getpwnam(OTHER)
        os.chown(home, user.pw_uid, user.pw_gid)
        yield home
    finally:
        shutil.rmtree(base, ignore_errors=True)

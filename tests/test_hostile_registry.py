"""The created-files registry grants writes: only a registry of this user's own is believed.

A file iobench created is written again without ``allow_write``; the
registry saying so lives in the state folder (``$XDG_STATE_HOME``). A
registry another user could write (their folder, as with ``sudo -E`` keeping
their environment) would let them name any file as "created by iobench":
it is ignored, and such files need ``allow_write`` like any other.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from loopdev import sha256_of

pytestmark = [pytest.mark.root, pytest.mark.fio]


def test_a_registry_another_user_wrote_grants_nothing(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    victim = tmp_path / "victim.dat"
    victim.write_bytes(os.urandom(1 << 20))
    before = sha256_of(victim)
    nobody = pwd.getpwnam("nobody")
    state = tmp_path / "their-state"
    (state / "iobench").mkdir(parents=True)
    registry = state / "iobench" / "created-files.json"
    registry.write_text(json.dumps({str(victim): victim.stat().st_ino}))
    for path in (state, state / "iobench", registry):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    text = (
        f"version: 1\nname: registry\ntargets: [{{path: {victim}, size: 1M}}]\n"
        "fio: {ioengine: psync, rw: write, bs: 4k, runtime: 1, time_based: 1}\n"
    )
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    done = subprocess.run(
        [sys.executable, "-m", "iobench", "run", str(write_matrix(text)), "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert sha256_of(victim) == before, "a registry another user wrote let the run overwrite the file"
    assert done.returncode == 2, done.stderr
    assert "exists and iobench did not create it" in done.stderr, done.stderr

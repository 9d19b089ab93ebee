"""The created-files registry grants writes: only a registry of this user's own is believed.

A file iobench created is written again without ``--allow-write``; the
registry saying so lives in the state folder (``$XDG_STATE_HOME``). A
registry another user could write (their folder, as with ``sudo -E`` keeping
their environment) would let them name any file as "created by iobench":
it is ignored, never written, and such files need ``--allow-write`` like any
other. What it remembers is the file itself (device, inode and birth time),
which a file made later at the same name, even on the same inode, is not.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from loopdev import LoopFactory, sha256_of

from iobench.agent.serve import Agent
from iobench.errors import SafetyError
from iobench.matrix.model import parse_matrix
from iobench.planner.plans import plan
from iobench.runner.sweep import run
from iobench.system.created import create_target_file
from iobench.system.safety import created_by_iobench, remember_created

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


@pytest.mark.loopdev
def test_a_new_file_on_a_created_file_s_inode_is_not_created_by_iobench(loops: LoopFactory) -> None:
    """A file made later at the same name, on the same inode number, is another file: it needs consent."""
    disk = loops.attach(32)
    loops.mkfs_ext4(disk)
    path = loops.mount(disk) / "bench.dat"  # a quiet ext4 of its own: no one else takes the freed inode
    create_target_file(str(path))
    assert created_by_iobench(str(path))
    inode = path.stat().st_ino
    for _ in range(20):  # ext4 hands a freed inode to the next file made in the folder
        path.unlink()
        path.write_bytes(b"someone else's data")
        if path.stat().st_ino == inode:
            break
    assert path.stat().st_ino == inode, "the file system did not reuse the inode"
    assert not created_by_iobench(str(path))
    matrix = parse_matrix(
        f"version: 1\nname: r\ntargets: [{{path: {path}, size: 1M}}]\nfio: {{rw: write, bs: 4k}}\n", "m.yaml"
    )
    with pytest.raises(SafetyError, match="exists and iobench did not create it"):
        plan(matrix)


def test_a_run_makes_its_new_file_itself_and_remembers_what_it_made(tmp_path: Path) -> None:
    path = tmp_path / "new.dat"
    matrix = parse_matrix(
        f"version: 1\nname: r\ntargets: [{{path: {path}, size: 1M}}]\n"
        "fio: {ioengine: psync, rw: write, bs: 4k, runtime: 1, time_based: 1}\n",
        "m.yaml",
    )
    result = run(matrix, out=tmp_path / "r")
    assert result.counts == {"ok": 1}
    registry = json.loads((Path(os.environ["XDG_STATE_HOME"]) / "iobench" / "created-files.json").read_text())
    info = path.stat()
    assert re.fullmatch(
        rf"{info.st_dev}:{info.st_ino} (born \d+\.\d{{9}}|generation -?\d+)", registry[str(path)]
    )
    assert created_by_iobench(str(path))
    # The next run writes it again without --allow-write.
    assert run(matrix, out=tmp_path / "r2").counts == {"ok": 1}


def test_a_name_that_appears_before_iobench_makes_it_is_not_opened(tmp_path: Path) -> None:
    victim = tmp_path / "victim.dat"
    victim.write_bytes(os.urandom(1 << 16))
    before = sha256_of(victim)
    path = tmp_path / "new.dat"
    path.symlink_to(victim)
    with pytest.raises(SafetyError, match=f"target {path} appeared after the write guard judged it"):
        create_target_file(str(path))
    assert sha256_of(victim) == before
    assert not created_by_iobench(str(victim))


def test_a_registry_folder_another_user_may_write_is_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "shared-state"
    (state / "iobench").mkdir(parents=True)
    (state / "iobench").chmod(0o777)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    path = tmp_path / "new.dat"
    with pytest.raises(
        SafetyError, match=rf"registry .* not trusted: directory {state}/iobench .*every user"
    ):
        create_target_file(str(path))
    assert not path.exists()
    other = tmp_path / "other.dat"
    other.write_bytes(b"x")
    with pytest.raises(SafetyError, match="created-files registry .* is not written"):
        remember_created([str(other)])
    assert not (state / "iobench" / "created-files.json").exists()


def test_a_link_to_a_created_file_is_neither_remembered_nor_matched(tmp_path: Path) -> None:
    made = tmp_path / "made.dat"
    create_target_file(str(made))
    link = tmp_path / "link.dat"
    link.symlink_to(made)
    assert created_by_iobench(str(made)) and not created_by_iobench(str(link))
    victim = tmp_path / "victim.dat"
    victim.write_bytes(b"x")
    other = tmp_path / "other.dat"
    other.symlink_to(victim)
    remember_created([str(other)])  # a link where a created file was: what it leads to is not remembered
    assert not created_by_iobench(str(other)) and not created_by_iobench(str(victim))


def test_a_host_makes_new_files_without_following_or_replacing_a_name(tmp_path: Path) -> None:
    """The host's agent makes them as here (``O_EXCL | O_NOFOLLOW``): a link planted at the name stops it."""
    victim = tmp_path / "victim.dat"
    victim.write_bytes(os.urandom(1 << 12))
    before = sha256_of(victim)
    planted, fresh = tmp_path / "planted.dat", tmp_path / "fresh.dat"
    planted.symlink_to(victim)
    done = Agent().op_make_files([str(fresh), str(planted)])
    assert done["failed"] == str(planted)
    assert sha256_of(victim) == before and planted.is_symlink()
    assert fresh.is_file() and not fresh.is_symlink() and fresh.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.dat", "planted.dat", "victim.dat"]

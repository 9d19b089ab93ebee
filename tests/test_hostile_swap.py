"""A target swapped after the guard judged it and before fio opens it (a time-of-check race).

The guard judges each target when the run is planned; fio opens the path
later, at each point. Whatever the path leads to by then must be what was
judged: a symlink re-pointed to another device, or a file still to be
created that appears in the meantime as a link to a device, stops the run
before fio starts, and the device it now leads to is unchanged byte for
byte. Real loop devices and real fio; the swap is made at the last moment
the runner gives a caller (``Progress.started``, once planning is done, and
``point_started`` of a later point).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from loopdev import Loop, LoopFactory, sha256_of

from iobench.errors import IobenchError
from iobench.matrix.model import parse_matrix
from iobench.planner.plans import Plan, PlannedRun
from iobench.runner.sweep import NullProgress, run

pytestmark = [pytest.mark.root, pytest.mark.loopdev, pytest.mark.fio]

MATRIX = """\
version: 1
name: swap
targets:
  - path: {path}
    allow_write: {allow}{size}
fio:
  ioengine: psync
  rw: write
  direct: 1
  runtime: 1
  time_based: 1
matrix:
  bs: [4k, 8k]
"""


class SwapAt(NullProgress):
    """Calls ``swap`` once the plan is made (``when`` 0) or as point ``when`` (1-based) starts."""

    def __init__(self, swap: Callable[[], None], when: int = 0) -> None:
        self.swap, self.when = swap, when

    def started(self, plan: Plan, todo: Sequence[PlannedRun], run_dir: Path) -> None:
        if self.when == 0:
            self.swap()

    def point_started(self, run: PlannedRun, index: int) -> None:
        if index + 1 == self.when:
            self.swap()


def relink(link: Path, target: str) -> Callable[[], None]:
    """Point ``link`` at ``target`` in one step (rename over it), as a change of udev links does."""

    def swap() -> None:
        fresh = link.with_name(link.name + ".new")
        fresh.symlink_to(target)
        os.replace(fresh, link)

    return swap


def ext4_victim(loops: LoopFactory) -> tuple[Loop, str]:
    victim = loops.attach()
    loops.mkfs_ext4(victim)
    return victim, sha256_of(victim.path)


def run_swapped(text: str, tmp_path: Path, progress: SwapAt, allow_write: Sequence[str] = ()) -> str:
    matrix = parse_matrix(text, str(tmp_path / "matrix.yaml"))
    with pytest.raises(IobenchError) as caught:
        run(matrix, out=tmp_path / "results", progress=progress, allow_write=allow_write)
    return str(caught.value)


@pytest.mark.parametrize("when", [0, 2], ids=["before-the-first-point", "before-the-second-point"])
def test_a_device_link_repointed_after_the_plan_is_not_written(
    when: int, loops: LoopFactory, tmp_path: Path
) -> None:
    judged = loops.attach()  # blank, allowed: --allow-write lets the matrix write it
    victim, before = ext4_victim(loops)
    link = tmp_path / "disk"
    link.symlink_to(judged.path)
    text = MATRIX.format(path=link, allow="true", size="")
    message = run_swapped(text, tmp_path, SwapAt(relink(link, victim.path), when), allow_write=[str(link)])
    assert sha256_of(victim.path) == before, f"{victim.path} was written"
    assert str(link) in message and "replaced" in message, message


def test_a_new_file_that_appears_as_a_link_to_a_device_is_not_written(
    loops: LoopFactory, tmp_path: Path
) -> None:
    victim, before = ext4_victim(loops)
    new = tmp_path / "new.dat"  # judged as a file fio will create
    text = MATRIX.format(path=new, allow="false", size="\n    size: 1M")
    message = run_swapped(text, tmp_path, SwapAt(lambda: new.symlink_to(victim.path)))
    assert sha256_of(victim.path) == before, f"{victim.path} was written"
    assert str(new) in message, message


def test_a_new_file_that_appears_as_another_file_is_not_written(tmp_path: Path) -> None:
    precious = tmp_path / "precious.db"
    precious.write_bytes(os.urandom(1 << 20))
    before = sha256_of(precious)
    new = tmp_path / "new.dat"
    text = MATRIX.format(path=new, allow="false", size="\n    size: 1M")
    message = run_swapped(text, tmp_path, SwapAt(lambda: new.symlink_to(precious)))
    assert sha256_of(precious) == before, f"{precious} was written"
    assert str(new) in message, message


def test_a_device_given_a_file_system_and_mounted_during_the_run_is_not_written(
    loops: LoopFactory, tmp_path: Path
) -> None:
    """Someone makes a file system on the device between two points and mounts it (an automounter).

    The target is spelled as a link (a ``/dev/disk/by-id`` name): fio's own
    refusal to write a mounted device compares its file name with the mount
    table's device names, so it does not see this one.
    """
    device = loops.attach()
    link = tmp_path / "by-id-disk"
    link.symlink_to(device.path)
    tried: list[str] = []

    def mount_it() -> None:
        try:
            loops.mkfs_ext4(device)
            mounted = loops.mount(device)
            (mounted / "data").write_bytes(os.urandom(1 << 16))
            tried.append("mounted")
        except RuntimeError as exc:  # the kernel refused: the device is busy
            tried.append(str(exc))

    text = MATRIX.format(path=link, allow="true", size="")
    matrix = parse_matrix(text, str(tmp_path / "matrix.yaml"))
    try:
        run(matrix, out=tmp_path / "results", progress=SwapAt(mount_it, 2), allow_write=[device.path])
    except IobenchError:
        pass
    assert tried, "the second point never started"
    if tried == ["mounted"]:  # if the kernel let it happen, the file system must have survived
        done = subprocess.run(["fsck.ext4", "-n", "-f", device.path], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert "in use" in tried[0] or "busy" in tried[0], tried[0]


def test_one_device_named_twice_is_held_once_and_written(loops: LoopFactory, tmp_path: Path) -> None:
    device = loops.attach()
    link = tmp_path / "same-disk"
    link.symlink_to(device.path)
    text = MATRIX.format(path=device.path, allow="true", size="").replace(
        "fio:", f"  - path: {link}\n    allow_write: true\nfio:", 1
    )
    matrix = parse_matrix(text, str(tmp_path / "matrix.yaml"))
    result = run(matrix, out=tmp_path / "results", allow_write=[device.path])
    assert result.counts == {"ok": 2}

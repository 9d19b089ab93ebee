"""A device is judged with everything beneath it: a loop device's backing device or file, dm and md members.

The case that broke: a loop device at an offset over a disk that holds ext4
shows none of the file system's superblock, so it looked blank, and a write
to it went straight into the file system. Here the stacks are real loop
devices; every byte beneath is checked after each refusal.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from loopdev import Loop, LoopFactory, sha256_of

from iobench.errors import SafetyError
from iobench.matrix.model import parse_matrix
from iobench.planner.plans import Plan, plan

pytestmark = [pytest.mark.loopdev, pytest.mark.root, pytest.mark.fio]

MATRIX = """\
version: 1
name: stack
targets: [{{path: "{path}", allow_write: true}}]
fio: {{ioengine: psync, rw: randwrite, bs: 4k, runtime: 1, time_based: 1}}
"""
MIB = 1 << 20


@pytest.fixture
def over() -> Iterator[Callable[[str | Path, int], str]]:
    """Attach a loop device over a device or file at a byte offset; detached afterwards."""
    with contextlib.ExitStack() as stack:

        def attach(backing: str | Path, offset: int) -> str:
            done = subprocess.run(
                ["losetup", "--find", "--show", "--offset", str(offset), str(backing)],
                capture_output=True,
                text=True,
                check=True,
            )
            path = done.stdout.strip()
            stack.callback(subprocess.run, ["losetup", "--detach", path], check=False)
            return path

        yield attach


def plan_for(path: str, *allowed: str) -> Plan:
    return plan(parse_matrix(MATRIX.format(path=path), "m.yaml"), allow_write=allowed)


@pytest.fixture
def ext4_disk(loops: LoopFactory) -> Iterator[Loop]:
    """A loop device holding ext4, whose every byte must be the same at the end."""
    disk = loops.attach(32)
    loops.mkfs_ext4(disk)
    before = sha256_of(disk.path)
    yield disk
    assert sha256_of(disk.path) == before, f"{disk.path} changed"


def test_a_loop_at_an_offset_over_a_signed_device_needs_consent_for_that_device(
    ext4_disk: Loop, over: Callable[[str | Path, int], str], tmp_path: Path
) -> None:
    top = over(ext4_disk.path, MIB)
    top_name = Path(top).name
    with pytest.raises(SafetyError) as caught:
        plan_for(top, top)
    message = str(caught.value)
    assert (
        f"target {top} writes onto {ext4_disk.path} (backing of {top_name} at byte offset {MIB}), "
        "which holds TYPE=ext4 (filesystem) at byte offset 1080 (0x438)"
    ) in message
    assert (
        f"--allow-write {top} does not cover it: if it may be destroyed, pass --allow-write {ext4_disk.path}"
        in (message)
    )
    # Without any consent, the refusal already names what lies beneath.
    with pytest.raises(SafetyError, match=rf"holds TYPE=ext4 .* on {ext4_disk.path}"):
        plan_for(top)
    # Consent for the device that holds the data, in any spelling, lets it go.
    alias = tmp_path / "by-id-disk"
    alias.symlink_to(ext4_disk.path)
    assert plan_for(top, top, str(alias)).runs


def test_a_mounted_device_beneath_refuses_even_with_consent_for_both(
    loops: LoopFactory, over: Callable[[str | Path, int], str], tmp_path: Path
) -> None:
    disk = loops.attach(32)
    loops.mkfs_ext4(disk)
    top = over(disk.path, MIB)
    data = loops.mount(disk) / "data"
    data.write_bytes(os.urandom(1 << 16))
    before = sha256_of(data)
    with pytest.raises(
        SafetyError,
        match=rf"target {top}: {Path(top).name} writes onto {disk.path} \(backing of .*\), "
        rf"and {disk.name} is mounted; iobench never writes to it",
    ):
        plan_for(top, top, disk.path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "iobench",
            "run",
            str(_matrix_file(tmp_path, top)),
            "--out",
            str(tmp_path / "r"),
            "--allow-write",
            top,
            "--allow-write",
            disk.path,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"{disk.name} is mounted" in done.stderr
    assert not (tmp_path / "r").exists()
    assert sha256_of(data) == before


def test_loops_over_loops_are_followed_to_the_bottom(
    ext4_disk: Loop, over: Callable[[str | Path, int], str]
) -> None:
    middle = over(ext4_disk.path, 0)  # shows the disk whole: the same bytes
    top = over(middle, MIB)
    with pytest.raises(SafetyError, match=f"writes onto {middle} .*which holds TYPE=ext4"):
        plan_for(top, top)
    # Consent for the middle covers the disk it shows whole.
    assert plan_for(top, top, middle).runs


def test_a_loop_at_an_offset_over_a_file_holding_a_file_system_needs_consent_for_the_file(
    loops: LoopFactory, over: Callable[[str | Path, int], str], tmp_path: Path
) -> None:
    image = loops.attach(32)
    loops.mkfs_ext4(image)
    top = over(image.backing, MIB)
    with pytest.raises(SafetyError, match=f"writes onto {image.backing} .*which holds TYPE=ext4"):
        plan_for(top, top)
    assert plan_for(top, top, str(image.backing)).runs


def test_a_loop_showing_its_backing_whole_is_consented_to_through_itself(
    loops: LoopFactory, over: Callable[[str | Path, int], str]
) -> None:
    disk = loops.attach()
    loops.mkfs_ext4(disk)
    top = over(disk.path, 0)
    with pytest.raises(SafetyError, match=f"target {top} holds TYPE=ext4"):
        plan_for(top)
    assert plan_for(top, top).runs


def _matrix_file(tmp_path: Path, target: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.format(path=target))
    return path

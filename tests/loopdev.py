"""Real loop devices over files in ``tmp_path``, always torn down.

Tests take the ``loops`` fixture (conftest loads this module as a plugin)
and call ``loops.attach()``; everything a test
set up on top (mounts, swap) is undone in reverse order, every loop device
detached and its queue settings put back as they were, even when the test fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Loop:
    """An attached loop device: ``/dev/loopN``, ``loopN`` and its backing file."""

    path: str
    name: str
    backing: Path


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def sha256_of(path: str | Path) -> str:
    """Checksum of a whole device or file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


QUEUE_FILES = ("read_ahead_kb", "scheduler")


def _read_queue(name: str) -> dict[str, str]:
    queue = Path("/sys/block") / name / "queue"
    values = {f: (queue / f).read_text().strip() for f in QUEUE_FILES}
    values["scheduler"] = values["scheduler"].split("[")[-1].split("]")[0]
    return values


def _restore_queue(name: str, values: dict[str, str]) -> None:
    """Once the device is really unbound (a detach waits for the last opener to close it), put its settings back."""
    deadline = time.monotonic() + 10
    while (Path("/sys/block") / name / "loop").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    queue = Path("/sys/block") / name / "queue"
    for file, value in values.items():
        (queue / file).write_text(value)


class LoopFactory:
    """Attaches loop devices and sets things up on them, undoing all at teardown."""

    def __init__(self, directory: Path, stack: contextlib.ExitStack) -> None:
        self._dir = directory
        self._stack = stack
        self._count = 0

    def attach(self, size_mib: int = 16, *, content: bytes = b"") -> Loop:
        """A new loop device over a sparse file of ``size_mib``, starting with ``content``."""
        self._count += 1
        backing = self._dir / f"loop{self._count}.img"
        with backing.open("wb") as handle:
            handle.write(content)
            handle.truncate(size_mib << 20)
        path = _run("losetup", "--find").strip()
        name = Path(path).name
        # Attaching sets the device's read_ahead_kb from the backing disk, and it outlives the detach.
        self._stack.callback(_restore_queue, name, _read_queue(name))
        _run("losetup", path, str(backing))
        self._stack.callback(_run, "losetup", "--detach", path)
        return Loop(path=path, name=name, backing=backing)

    def mkfs_ext4(self, loop: Loop) -> None:
        """Put an ext4 filesystem on ``loop``."""
        # No lazy init: a kernel thread zeroing inode tables later would change the checksums.
        _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop.path)

    def mkfs_btrfs(self, loop: Loop) -> None:
        """Put a btrfs filesystem on ``loop`` (at least 128 MiB)."""
        _run("mkfs.btrfs", "-q", "-f", loop.path)

    def mount(self, loop: Loop, options: str = "") -> Path:
        """Mount ``loop`` (which has a filesystem) under tmp_path, with mount ``options``; unmounted at teardown."""
        target = self._dir / f"mnt-{loop.name}"
        target.mkdir()
        _run("mount", *(["-o", options] if options else []), loop.path, str(target))
        self._stack.callback(_run, "umount", str(target))
        return target

    def mkswap(self, loop: Loop) -> None:
        """Put a swap signature on ``loop`` without enabling it."""
        _run("mkswap", loop.path)

    def swapon(self, loop: Loop) -> None:
        """Make ``loop`` swap and enable it; swapoff at teardown."""
        _run("mkswap", loop.path)
        _run("swapon", loop.path)
        self._stack.callback(_run, "swapoff", loop.path)


@pytest.fixture
def loops(tmp_path: Path) -> Iterator[LoopFactory]:
    """A :class:`LoopFactory` whose devices are detached after the test."""
    with contextlib.ExitStack() as stack:
        yield LoopFactory(tmp_path, stack)

"""Real loop devices over files in ``tmp_path``, always torn down.

Tests take the ``loops`` fixture (re-export it with
``from loopdev import loops``) and call ``loops.attach()``; everything a test
set up on top (mounts, swap) is undone in reverse order, and every loop
device detached, even when the test fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
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
        path = _run("losetup", "--find", "--show", str(backing)).strip()
        self._stack.callback(_run, "losetup", "--detach", path)
        return Loop(path=path, name=Path(path).name, backing=backing)

    def mkfs_ext4(self, loop: Loop) -> None:
        """Put an ext4 filesystem on ``loop``."""
        # No lazy init: a kernel thread zeroing inode tables later would change the checksums.
        _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop.path)

    def mount(self, loop: Loop) -> Path:
        """Mount ``loop`` (which has a filesystem) under tmp_path; unmounted at teardown."""
        target = self._dir / f"mnt-{loop.name}"
        target.mkdir()
        _run("mount", loop.path, str(target))
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

"""One iobench run per device at a time (SPEC §5).

Each disk has a lock file under ``state_dir()/locks``, held with ``flock``.
The kernel drops a flock when its holder exits however it exits, so a run
killed with SIGKILL never leaves a device locked. Lock files are never
deleted: unlinking a file another process is about to lock would let two
processes hold "the" lock on two different inodes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from iobench.errors import SafetyError
from iobench.store.atomic import state_dir


def lock_dir() -> Path:
    """Where device lock files live (``state_dir()/locks``)."""
    return state_dir() / "locks"


def _lock_path(disk: str) -> Path:
    if not disk or "/" in disk or disk.startswith("."):
        raise SafetyError(f"{disk!r} is not a device name to lock")
    return lock_dir() / f"{disk}.lock"


def _holder(fd: int) -> str:
    """``pid N, started …`` from the lock file, as far as its holder wrote it."""
    try:
        text = os.pread(fd, 256, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    pid, _, started = text.partition(" ")
    if not pid.isdigit():
        return "pid unknown"
    return f"pid {pid}, started {started}" if started else f"pid {pid}"


def _lock_one(disk: str) -> int:
    path = _lock_path(disk)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise SafetyError(f"another iobench run ({holder}) is using {disk}; wait for it or stop it") from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n".encode(), 0)
    return fd


@contextlib.contextmanager
def device_lock(disks: Iterable[str]) -> Iterator[tuple[str, ...]]:
    """Hold every disk's lock for the duration of the block.

    Locks are taken in sorted order, so two runs wanting overlapping disks
    cannot deadlock, and without waiting: a held lock is an error at once.

    Parameters
    ----------
    disks
        Disk names (``nvme0n1``, ``loop0``); duplicates are fine.

    Yields
    ------
    tuple of str
        The disks locked, sorted.

    Raises
    ------
    SafetyError
        ``another iobench run (pid N, started …) is using <disk>; wait for it or stop it``.
        Locks already taken are released first.
    """
    names = tuple(sorted(set(disks)))
    fds: list[int] = []
    try:
        for disk in names:
            fds.append(_lock_one(disk))
        yield names
    finally:
        for fd in reversed(fds):
            # Closing the last descriptor releases the flock.
            os.close(fd)

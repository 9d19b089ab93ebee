"""One iobench run per device at a time, and no one else's use of a device it writes.

Each disk has a lock file under ``state_dir()/locks``, held with ``flock``.
The kernel drops a flock when its holder exits however it exits, so a run
killed with SIGKILL never leaves a device locked. Lock files are never
deleted: unlinking a file another process is about to lock would let two
processes hold "the" lock on two different inodes. The folder is one only this
user can change (:func:`iobench.store.atomic.private_dir`), and a lock file is
opened without following a link and used only when it is this user's own
regular file: writing the holder into a planted link would truncate whatever
it points at.

A run also holds every block device it writes open with ``O_EXCL``
(:func:`exclusive_hold`): the kernel then refuses to mount it or one of its
partitions, to make it swap or a RAID, LVM or btrfs member, and ``mkfs``
(which opens with ``O_EXCL`` too) refuses it, for as long as the run lasts.
fio opens it without ``O_EXCL`` and is not affected.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from iobench.errors import SafetyError
from iobench.store.atomic import private_dir, state_dir


def lock_dir() -> Path:
    """Where device lock files live (``state_dir()/locks``); not made or checked here."""
    return state_dir() / "locks"


def _lock_path(disk: str) -> Path:
    if not disk or "/" in disk or disk.startswith("."):
        raise SafetyError(f"{disk!r} is not a device name to lock")
    return private_dir(lock_dir()) / f"{disk}.lock"


def _holder(fd: int) -> str:
    """``pid N, user U, started …`` from the lock file, as far as its holder wrote it."""
    try:
        text = os.pread(fd, 256, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    pid, _, started = text.partition(" ")
    if not pid.isdigit():
        return "pid unknown"
    user = _process_user(int(pid))
    who = f"pid {pid}, user {user}" if user else f"pid {pid}"
    return f"{who}, started {started}" if started else who


def _process_user(pid: int) -> str:
    """The name of the user running ``pid`` (the owner of ``/proc/PID``); empty when not known."""
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return ""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


#: How often a waiting run tries a held lock again.
WAIT_POLL_S = 0.5


def _lock_one(disk: str, wait: LockWait | None = None) -> int:
    path = _lock_path(disk)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        why = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror})"
        raise SafetyError(f"lock file {path} {why}; remove it and run again") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1:
            raise SafetyError(
                f"lock file {path} is not a file of this user's own (a link, a device, or another's); "
                "remove it and run again"
            )
        _flock(fd, disk, wait)
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n".encode(), 0)
    return fd


class LockWait:
    """How long a run waits for a held lock, and whom it tells that it waits.

    Parameters
    ----------
    seconds
        The longest wait, all disks together (``math.inf``: until the holder ends).
    waiting
        Called once per holder waited for, with the disk and the holder
        (``pid N, user U, started …``), before the wait starts.
    """

    def __init__(self, seconds: float, waiting: Callable[[str, str], None] | None = None) -> None:
        self.seconds = seconds
        self.waiting = waiting
        self._deadline: float | None = None

    def left(self) -> float:
        """Seconds left of the wait, counted from the first held lock met (not from planning)."""
        if self._deadline is None:
            self._deadline = time.monotonic() + self.seconds
        return self._deadline - time.monotonic()


def _flock(fd: int, disk: str, wait: LockWait | None) -> None:
    """Take the flock on ``fd``; a held one is an error at once, or after ``wait`` ran out."""
    told = ""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = _holder(fd)
        if wait is None:
            raise SafetyError(f"another iobench run ({holder}) is using {disk}; wait for it or stop it")
        left = wait.left()
        if left <= 0:
            raise SafetyError(
                f"another iobench run ({holder}) still holds {disk} after waiting {wait.seconds:g} s; "
                "wait longer (--wait SECONDS) or stop it"
            )
        if holder != told and wait.waiting is not None:
            wait.waiting(disk, holder)
        told = holder
        time.sleep(min(WAIT_POLL_S, left))


@contextlib.contextmanager
def device_lock(disks: Iterable[str], wait: LockWait | None = None) -> Iterator[tuple[str, ...]]:
    """Hold every disk's lock for the duration of the block.

    Locks are taken in sorted order, so two runs wanting overlapping disks
    cannot deadlock. Without ``wait`` a held lock is an error at once; with
    it the run tries again until the holder lets go or the wait runs out.

    Parameters
    ----------
    disks
        Disk names (``nvme0n1``, ``loop0``); duplicates are fine.
    wait
        How long to wait for a held lock, and whom to tell (None: not at all).

    Yields
    ------
    tuple of str
        The disks locked, sorted.

    Raises
    ------
    SafetyError
        ``another iobench run (pid N, user U, started …) is using <disk>; wait for it or stop it``,
        or, with ``wait``, that it still holds the disk when the wait ran out.
        Locks already taken are released first.
    """
    names = tuple(sorted(set(disks)))
    fds: list[int] = []
    try:
        for disk in names:
            fds.append(_lock_one(disk, wait))
        yield names
    finally:
        for fd in reversed(fds):
            # Closing the last descriptor releases the flock.
            os.close(fd)


@contextlib.contextmanager
def exclusive_hold(devices: dict[str, int | None]) -> Iterator[None]:
    """Hold each block device open exclusively (``O_EXCL``) for the duration of the block.

    The write guard found each device unclaimed when it judged it; holding it
    keeps it so while the run writes it: no one mounts it (a partition of it
    either), makes it swap or a volume member, or makes a file system on it.

    Parameters
    ----------
    devices
        Each device's path (as the run opens it) and the device number the
        guard judged (``st_rdev``); None when not known.

    Raises
    ------
    SafetyError
        When a device is claimed by now, is gone, or the path leads to
        another device than the one judged. Devices held so far are let go.
    """
    fds: list[int] = []
    held: set[int] = set()
    try:
        for path, judged in sorted(devices.items()):
            if judged is not None and judged in held:
                continue  # another spelling of a device already held (a second O_EXCL open would fail)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC)
            except OSError as exc:
                why = (
                    "is in use by the kernel (mounted, swap, part of a RAID, LVM or btrfs volume, "
                    "or the disk of another target of the run, or one of its partitions)"
                    if exc.errno == errno.EBUSY
                    else f"cannot be opened ({exc.strerror})"
                )
                raise SafetyError(
                    f"target {path} {why} since the write guard judged it; nothing was run"
                ) from None
            fds.append(fd)
            held.add(os.fstat(fd).st_rdev)
            if judged is not None and os.fstat(fd).st_rdev != judged:
                raise SafetyError(
                    f"target {path} leads to another device than the one the write guard judged "
                    "(a link re-pointed?); nothing was run"
                )
        yield
    finally:
        for fd in fds:
            os.close(fd)

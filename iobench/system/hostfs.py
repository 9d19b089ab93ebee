"""The machine as files: sysfs and procfs under a root.

Every other module reads the system through this one, so each kernel file is
parsed in exactly one place and every read can be moved under another root.
A :class:`SystemRoot` for ``"/"`` reads this machine; one for the folder of a
snapshot reads that machine's ``sys/`` and ``proc/`` (the convention of
hwloc's ``HWLOC_FSROOT``); tests point one at a fake tree in ``tmp_path``.

Paths given to a :class:`SystemRoot` are of two kinds. A relative path names a
file of the machine as if from ``/``: ``sys/block/sda/dev``,
``proc/self/mountinfo``, ``dev/sda``; it is looked up under the root (``sys/``
under the sysfs folder, ``proc/`` under the procfs folder, the rest under the
fsroot). An absolute path is a path on this host that already lies under the
root, such as those the lookups return, and is used as it is.

Reading is as forgiving as the kernel is fickle: sysfs files come and go
across kernels, architectures and permissions, so the readers return None (or
an empty tuple) for a file that is missing or unreadable. A caller that must
say why uses :meth:`SystemRoot.read_required`, which raises
:class:`SystemFileError`.

This module imports only the standard library, :mod:`iobench.errors` and
:mod:`iobench.system.cpulist`, so every layer of iobench may use it.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iobench.errors import IobenchError, TopologyError
from iobench.system.cpulist import parse_cpulist, parse_cpumask

__all__ = [
    "CPU_TIME_FIELDS",
    "DiskStat",
    "Interrupts",
    "Mount",
    "ProcessStat",
    "SystemFileError",
    "SystemRoot",
    "TaskStat",
    "block_node_devno",
    "devno_text",
]

PathArg = str | os.PathLike[str]


class SystemFileError(IobenchError):
    """A sysfs or procfs file that had to be read or written could not be.

    Attributes
    ----------
    path : str
        The file, as a path on this host.
    errno : int or None
        The operating system's error number.
    strerror : str
        The C library's words for it.
    """

    def __init__(self, action: str, path: PathArg, exc: OSError) -> None:
        self.path = os.fspath(path)
        self.errno = exc.errno
        self.strerror = exc.strerror or str(exc)
        super().__init__(f"cannot {action} {self.path}: {self.strerror}")

    @property
    def missing(self) -> bool:
        """Whether the file does not exist (ENOENT)."""
        return self.errno == errno.ENOENT


@dataclass(frozen=True)
class Mount:
    """One line of ``/proc/self/mountinfo``.

    Attributes
    ----------
    devno : str
        ``major:minor`` of the mounted file system (``0:N`` for btrfs, tmpfs, …).
    point : str
        Where it is mounted, with the kernel's octal escapes decoded.
    source : str
        What was mounted (``/dev/sda1``, ``tmpfs``), escapes decoded.
    fstype : str
        The file system type.
    options : str
        The file system's own (super block) options: ``rw,compress=zstd:3,space_cache=v2``.
    """

    devno: str
    point: str
    source: str
    fstype: str
    options: str = ""


@dataclass(frozen=True)
class ProcessStat:
    """One ``/proc/<pid>/stat``, split around ``comm``, which may hold spaces and parentheses.

    Attributes
    ----------
    pid : int
        The process.
    comm : str
        Its command name (field 2).
    fields : tuple of str
        Every field after ``comm``: ``fields[0]`` is field 3 of proc(5), the state.
    """

    pid: int
    comm: str
    fields: tuple[str, ...]

    @property
    def state(self) -> str:
        """``R``, ``S``, ``D``, ``Z`` (zombie), ``X`` (dead), …"""
        return self.fields[0]

    @property
    def ppid(self) -> int:
        """The parent's pid (field 4)."""
        return int(self.fields[1])

    def field(self, number: int) -> str | None:
        """Field ``number`` in proc(5)'s numbering (``pid`` is 1), or None beyond the line.

        Parameters
        ----------
        number : int
            3 or more: fields 1 and 2 are :attr:`pid` and :attr:`comm`.

        Returns
        -------
        str or None
            The field's text.
        """
        index = number - 3
        return self.fields[index] if 0 <= index < len(self.fields) else None

    @property
    def start_ticks(self) -> int | None:
        """When the process started, in clock ticks since boot (field 22); tells a reused pid apart."""
        return _int_or_none(self.field(22))

    @property
    def exit_code(self) -> int | None:
        """The wait status of a zombie (field 52, Linux 3.5+); None on older kernels."""
        return _int_or_none(self.field(52))


#: The per-CPU columns of ``/proc/stat``, in clock ticks (``guest`` is counted in ``user`` too).
CPU_TIME_FIELDS: tuple[str, ...] = (
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "irq",
    "softirq",
    "steal",
    "guest",
    "guest_nice",
)


@dataclass(frozen=True)
class DiskStat:
    """One line of ``/proc/diskstats``: a block device's counters since boot (Documentation/admin-guide/iostats.rst).

    Times are in milliseconds, sizes in 512-byte sectors whatever the device's
    block size. Discard fields (Linux 4.18+) and flush fields (5.5+) are 0 on
    kernels that do not have them.
    """

    reads: int
    reads_merged: int
    sectors_read: int
    read_ms: int
    writes: int
    writes_merged: int
    sectors_written: int
    write_ms: int
    in_flight: int
    io_ms: int
    queue_ms: int
    discards: int = 0
    discards_merged: int = 0
    sectors_discarded: int = 0
    discard_ms: int = 0
    flushes: int = 0
    flush_ms: int = 0


@dataclass(frozen=True)
class Interrupts:
    """``/proc/interrupts``: the count of every interrupt line on every CPU it lists.

    Attributes
    ----------
    cpus : tuple of int
        The CPU of each count column (the header names only online CPUs).
    counts : dict of str to tuple of int
        Line (``"36"``, ``"NMI"``) → its count on each CPU of :attr:`cpus`.
    names : dict of str to str
        Line → the rest of its row: controller, trigger and the handlers'
        names (``PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0``).
    """

    cpus: tuple[int, ...]
    counts: dict[str, tuple[int, ...]]
    names: dict[str, str]


@dataclass(frozen=True)
class TaskStat:
    """A thread's CPU use from ``/proc/<pid>/task/<tid>/stat``.

    Attributes
    ----------
    pid, tid : int
        Its process and itself (equal for a single-threaded process and for kernel threads).
    comm : str
        Its name (``fio``, ``kworker/1:1H-kblockd``, ``iou-wrk-4242``).
    user_ticks, system_ticks : int
        CPU time since it started, in clock ticks (fields 14 and 15).
    processor : int or None
        The CPU it last ran on (field 39).
    kernel : bool
        A kernel thread (``PF_KTHREAD`` in field 9).
    """

    pid: int
    tid: int
    comm: str
    user_ticks: int
    system_ticks: int
    processor: int | None
    kernel: bool


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that orders ``sda2`` before ``sda10`` (numbers by value)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def devno_text(devno: int) -> str:
    """Write a device number as the kernel does in sysfs and procfs: ``major:minor``.

    Parameters
    ----------
    devno : int
        An ``st_dev`` or ``st_rdev``.

    Returns
    -------
    str
        For example ``"259:0"``.
    """
    return f"{os.major(devno)}:{os.minor(devno)}"


def block_node_devno(path: str) -> str | None:
    """The ``major:minor`` of a block device node on this machine, or None.

    Parameters
    ----------
    path : str
        An absolute path (``/dev/sda``, ``/dev/mapper/root``); anything else
        (``tmpfs``, ``proc`` as a mount source) is not looked up in the
        working directory.

    Returns
    -------
    str or None
        None when the path is relative, missing or not a block device.
    """
    if not path.startswith("/"):
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    return devno_text(info.st_rdev) if stat.S_ISBLK(info.st_mode) else None


class SystemRoot:
    """sysfs and procfs of one machine: this one (``"/"``) or a snapshot of another.

    Parameters
    ----------
    fsroot : str or path-like, default "/"
        The folder that contains ``sys/`` (and ``proc/``, ``dev/``).
    sysfs, procfs : str or path-like, optional
        Where sysfs and procfs are when not at ``<fsroot>/sys`` and
        ``<fsroot>/proc``; fake trees in tests.

    Examples
    --------
    >>> SystemRoot("/").read_text("sys/block/vda/queue/scheduler")  # doctest: +SKIP
    '[mq-deadline] none'
    """

    def __init__(
        self, fsroot: PathArg = "/", *, sysfs: PathArg | None = None, procfs: PathArg | None = None
    ) -> None:
        self.fsroot = Path(fsroot)
        self.sysfs = Path(sysfs) if sysfs is not None else self.fsroot / "sys"
        self.procfs = Path(procfs) if procfs is not None else self.fsroot / "proc"

    def __repr__(self) -> str:
        return f"SystemRoot({os.fspath(self.fsroot)!r}, sysfs={os.fspath(self.sysfs)!r}, procfs={os.fspath(self.procfs)!r})"

    @property
    def live(self) -> bool:
        """Whether this is the running machine's own sysfs, so its ``/dev`` nodes belong to it."""
        return os.path.realpath(self.sysfs) == "/sys"

    def path(self, path: PathArg) -> Path:
        """Where a file of the machine is on this host (see the module's note on paths).

        Parameters
        ----------
        path : str or path-like
            Relative: a path of the machine (``sys/block``, ``proc/swaps``).
            Absolute: already a host path under the root.

        Returns
        -------
        Path
            The host path.
        """
        given = Path(path)
        if given.is_absolute():
            return given
        head, *rest = given.parts or (".",)
        if head == "sys":
            return self.sysfs.joinpath(*rest)
        if head == "proc":
            return self.procfs.joinpath(*rest)
        return self.fsroot / given

    # --- reading files ----------------------------------------------------------

    def read_text(self, path: PathArg) -> str | None:
        """A file's text without NUL bytes and surrounding whitespace, or None when it cannot be read.

        Parameters
        ----------
        path : str or path-like
            See :meth:`path`.

        Returns
        -------
        str or None
            None when the file is missing, unreadable or a directory.
        """
        try:
            return self.read_required(path)
        except SystemFileError:
            return None

    def read_required(self, path: PathArg) -> str:
        """A file's text like :meth:`read_text`, for callers that must say why it cannot be read.

        Parameters
        ----------
        path : str or path-like
            See :meth:`path`.

        Returns
        -------
        str
            The text, NUL bytes and surrounding whitespace removed.

        Raises
        ------
        SystemFileError
            Naming the file and the reason; ``missing`` tells a file that does not exist.
        """
        host = self.path(path)
        try:
            return host.read_text(errors="replace").replace("\x00", "").strip()
        except OSError as exc:
            raise SystemFileError("read", host, exc) from None
        except ValueError as exc:  # a NUL byte in the path
            raise SystemFileError("read", host, OSError(errno.EINVAL, str(exc))) from None

    def read_int(self, path: PathArg) -> int | None:
        """A file holding one integer, or None when it cannot be read or holds something else."""
        return _int_or_none(self.read_text(path))

    def read_cpus(self, directory: PathArg, list_name: str, mask_name: str) -> tuple[int, ...] | None:
        """A CPU set from its list file (``cpulist``), else from the hex mask old kernels have (``cpumap``).

        Parameters
        ----------
        directory : str or path-like
            The folder holding both files.
        list_name, mask_name : str
            File names of the list and the mask.

        Returns
        -------
        tuple of int or None
            None when neither file can be read and parsed.
        """
        folder = self.path(directory)
        for name, parse in ((list_name, parse_cpulist), (mask_name, parse_cpumask)):
            text = self.read_text(folder / name)
            if text is None:
                continue
            try:
                return parse(text)
            except TopologyError:
                continue
        return None

    def list_dir(self, path: PathArg) -> tuple[str, ...]:
        """Names in a folder in natural order (``sda2`` before ``sda10``); empty when it cannot be listed."""
        try:
            return tuple(sorted(os.listdir(self.path(path)), key=natural_key))
        except OSError:
            return ()

    def exists(self, path: PathArg) -> bool:
        """Whether the path exists (symlinks followed); False when it cannot be told."""
        return os.path.exists(self.path(path))

    def is_dir(self, path: PathArg) -> bool:
        """Whether the path is a folder (symlinks followed)."""
        return os.path.isdir(self.path(path))  # noqa: PTH112 - False, never an exception

    def realpath(self, path: PathArg) -> Path:
        """The path with every symlink resolved, as a host path."""
        return Path(os.path.realpath(self.path(path)))

    # --- writing attributes --------------------------------------------------------

    def writable(self, path: PathArg) -> bool:
        """Whether a sysfs or procfs attribute can be written by this process.

        root passes ``access(2)`` on any mode, but sysfs attributes without a
        store method are 0444 and refuse writes even from root, so the mode
        decides too.
        """
        host = self.path(path)
        try:
            mode = host.stat().st_mode
        except OSError:
            return False
        return bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) and os.access(
            host, os.W_OK, effective_ids=os.access in os.supports_effective_ids
        )

    def write_attribute(self, path: PathArg, text: str) -> None:
        """Write a sysfs or procfs attribute with one ``write(2)``, so the kernel sees the value whole.

        Parameters
        ----------
        path : str or path-like
            See :meth:`path`.
        text : str
            The value.

        Raises
        ------
        SystemFileError
            With the errno the kernel answered (EINVAL for a value it refuses,
            EACCES without permission).
        """
        host = self.path(path)
        try:
            fd = os.open(host, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            raise SystemFileError("write", host, exc) from None
        except ValueError as exc:  # a NUL byte in the path
            raise SystemFileError("write", host, OSError(errno.EINVAL, str(exc))) from None

    # --- block devices --------------------------------------------------------------

    def block_dir(self, name: str) -> Path | None:
        """The sysfs folder of a block device or partition, symlinks resolved.

        The one search order: ``sys/class/block/<name>`` (every disk and
        partition since Linux 2.6.25), then ``sys/block/<name>`` (whole disks:
        the only entry on older kernels and in some snapshots). On a running
        kernel both lead to the same folder under ``sys/devices``.

        Parameters
        ----------
        name : str
            A kernel name: ``sda``, ``sda1``, ``nvme0n1``, ``dm-0``.

        Returns
        -------
        Path or None
            None when neither entry exists, or ``name`` is not a plain name.
        """
        if not name or "/" in name or name in (".", ".."):
            return None
        for parent in ("class/block", "block"):
            entry = self.sysfs / parent / name
            if os.path.exists(entry):
                return Path(os.path.realpath(entry))
        return None

    # --- procfs ------------------------------------------------------------------------

    # The process-tree reads below run several times a second while fio runs: plain string paths
    # and read(2), no Path objects (a poll costs a fifth as much; it matters under emulation).

    # --- counters (telemetry) ------------------------------------------------------------

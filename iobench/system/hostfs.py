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

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


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
_PF_KTHREAD = 0x00200000


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


def _parse_stat(pid: int, text: str) -> ProcessStat | None:
    """A ``stat`` line split around ``comm``; None when it makes no sense."""
    if ")" not in text:
        return None
    head, _, tail = text.rpartition(")")
    fields = tuple(tail.split())
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return ProcessStat(pid=pid, comm=head.partition("(")[2], fields=fields)


def _read_proc(path: str, limit: int | None = None) -> bytes | None:
    """A procfs file's bytes through plain ``read(2)`` calls, no :class:`Path`: for polls and samples.

    ``limit``: one read of at most that many bytes (a ``stat`` line); None: to the end.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if limit is not None:
            return os.read(fd, limit)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _task_stat(pid: int, tid: int, data: bytes | None) -> tuple[TaskStat, int] | None:
    """A ``stat`` line as a :class:`TaskStat` and the process's thread count (field 20); None when unusable."""
    if data is None or b")" not in data:
        return None
    head, _, tail = data.rpartition(b")")
    fields = tail.split()
    try:
        flags, utime, stime, threads = int(fields[6]), int(fields[11]), int(fields[12]), int(fields[17])
        processor = int(fields[36]) if len(fields) > 36 else None
    except (IndexError, ValueError):
        return None
    comm = head.partition(b"(")[2].decode(errors="replace")
    return TaskStat(pid, tid, comm, utime, stime, processor, bool(flags & _PF_KTHREAD)), threads


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that orders ``sda2`` before ``sda10`` (numbers by value)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _unescape(text: str) -> str:
    r"""Decode the kernel's octal escapes in mount and swap paths (``\040`` is a space)."""
    return _OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), text)


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

    def block_names(self) -> tuple[str, ...]:
        """Every block device and partition sysfs lists, in :meth:`block_dir`'s search order."""
        names = dict.fromkeys(self.list_dir(self.sysfs / "class" / "block"))
        names.update(dict.fromkeys(self.list_dir(self.sysfs / "block")))
        return tuple(names)

    def whole_disks(self) -> tuple[str, ...]:
        """Every whole block device (no partitions), in natural order."""
        names = set(self.list_dir(self.sysfs / "block"))
        names.update(n for n in self.list_dir(self.sysfs / "class" / "block") if not self.is_partition(n))
        return tuple(sorted(names, key=natural_key))

    def is_partition(self, name: str) -> bool:
        """Whether ``name`` is a partition (its folder has a ``partition`` file)."""
        directory = self.block_dir(name)
        return directory is not None and os.path.exists(directory / "partition")

    def whole_disk(self, name: str) -> str:
        """The disk a partition lies on; any other name is returned as it is."""
        directory = self.block_dir(name)
        if directory is not None and os.path.exists(directory / "partition"):
            return directory.parent.name
        return name

    def partitions(self, name: str) -> tuple[str, ...]:
        """The partitions of a disk, in natural order; empty for a partition or an unknown name."""
        directory = self.block_dir(name)
        if directory is None:
            return ()
        return tuple(n for n in self.list_dir(directory) if os.path.exists(directory / n / "partition"))

    def holders(self, name: str) -> tuple[str, ...]:
        """Devices stacked on ``name`` (dm, md, bcache): its ``holders/``."""
        directory = self.block_dir(name)
        return self.list_dir(directory / "holders") if directory is not None else ()

    def slaves(self, name: str) -> tuple[str, ...]:
        """Devices ``name`` is built on (dm, md members): its ``slaves/``."""
        directory = self.block_dir(name)
        return self.list_dir(directory / "slaves") if directory is not None else ()

    def devices_below(self, name: str) -> tuple[str, ...]:
        """``name`` first, then every device under it through ``slaves/``, depth first, each once.

        Cycles, which a half-torn-down stack can show for a moment, end the walk.
        """
        found: dict[str, None] = {}
        todo = [name]
        while todo:
            current = todo.pop()
            if current in found:
                continue
            found[current] = None
            todo.extend(reversed(self.slaves(current)))
        return tuple(found)

    def disks_under(self, name: str) -> tuple[str, ...]:
        """The whole disks carrying a device's I/O.

        A partition's disk; a dm or md device's members, recursively down to
        the devices with no ``slaves/`` (each as its whole disk); else the
        device itself.
        """
        leaves = (d for d in self.devices_below(name) if not self.slaves(d))
        return tuple(dict.fromkeys(self.whole_disk(d) for d in leaves))

    def block_devno(self, name: str) -> str | None:
        """A block device's ``major:minor`` from its ``dev`` file, or None."""
        directory = self.block_dir(name)
        return self.read_text(directory / "dev") if directory is not None else None

    def block_name(self, devno: str) -> str | None:
        """The kernel name of the block device with this ``major:minor``, or None.

        ``sys/dev/block/<major:minor>`` where that folder exists (Linux
        2.6.27+); else, for older kernels and small fake trees, the first name
        in :meth:`block_names` whose ``dev`` file matches.
        """
        by_number = self.sysfs / "dev" / "block"
        if os.path.isdir(by_number):  # noqa: PTH112 - False, never an exception
            link = by_number / devno
            return self.realpath(link).name if os.path.exists(link) else None
        return next((name for name in self.block_names() if self.block_devno(name) == devno), None)

    def dm_device(self, mapper_name: str) -> str | None:
        """The ``dm-N`` whose device-mapper name (``/dev/mapper/<name>``) is ``mapper_name``."""
        for name in self.whole_disks():
            directory = self.block_dir(name)
            if name.startswith("dm-") and directory is not None:
                if self.read_text(directory / "dm" / "name") == mapper_name:
                    return name
        return None

    # --- procfs ------------------------------------------------------------------------

    def mounts(self) -> list[Mount]:
        """Every mount of this process's namespace, from ``proc/self/mountinfo``; empty when unreadable."""
        text = self.read_text("proc/self/mountinfo")
        found = []
        for line in (text or "").splitlines():
            fields = line.split()
            if " - " not in line or len(fields) < 5:
                continue
            after = line.split(" - ", 1)[1].split()
            found.append(
                Mount(
                    devno=fields[2],
                    point=_unescape(fields[4]),
                    source=_unescape(after[1]) if len(after) > 1 else "",
                    fstype=after[0] if after else "",
                    options=after[2] if len(after) > 2 else "",
                )
            )
        return found

    def swaps(self) -> list[str]:
        """The file or device of every active swap area, from ``proc/swaps``; empty when unreadable."""
        text = self.read_text("proc/swaps")
        lines = (text or "").splitlines()[1:]
        return [_unescape(line.split()[0]) for line in lines if line.strip()]

    def pids(self) -> list[int]:
        """Every process id in procfs, ascending; empty when procfs cannot be listed."""
        return sorted(int(name) for name in self.list_dir(self.procfs) if name.isdigit())

    def process_stat(self, pid: int) -> ProcessStat | None:
        """``proc/<pid>/stat``, or None when the process is gone or the line makes no sense."""
        data = _read_proc(f"{os.fspath(self.procfs)}/{pid}/stat")
        return None if data is None else _parse_stat(pid, data.decode(errors="replace").strip())

    def parent_pids(self) -> dict[int, int]:
        """Every process's parent, from each ``proc/<pid>/stat``: pid → ppid."""
        parents = {}
        for pid in self.pids():
            parsed = self.process_stat(pid)
            if parsed is not None:
                parents[pid] = parsed.ppid
        return parents

    def has_children_lists(self, pid: int) -> bool:
        """Whether the kernel keeps ``proc/<pid>/task/<tid>/children`` (``CONFIG_PROC_CHILDREN``) for ``pid``."""
        return os.path.exists(f"{os.fspath(self.procfs)}/{pid}/task/{pid}/children")

    # The process-tree reads below run several times a second while fio runs: plain string paths
    # and read(2), no Path objects (a poll costs a fifth as much; it matters under emulation).

    def task_children(self, pid: int) -> list[int]:
        """The children of every thread of ``pid``, from the kernel's ``children`` lists; empty when gone."""
        tasks = f"{os.fspath(self.procfs)}/{pid}/task"
        try:
            tids = os.listdir(tasks)
        except OSError:
            return []
        children: list[int] = []
        for tid in tids:
            data = _read_proc(f"{tasks}/{tid}/children")
            if data:
                children.extend(int(child) for child in data.split())
        return children

    def process_status(self, pid: int) -> dict[str, str] | None:
        """``proc/<pid>/status`` as key → value (``Cpus_allowed_list`` → ``0-3``), or None when gone."""
        data = _read_proc(f"{os.fspath(self.procfs)}/{pid}/status")
        if data is None:
            return None
        pairs = (line.split(":", 1) for line in data.decode(errors="replace").splitlines() if ":" in line)
        return {key.strip(): value.strip() for key, value in pairs}

    def memory_policies(self, pid: int, head: int = 4096) -> tuple[str, ...] | None:
        """The NUMA policies (``bind:1``, ``default``, …) of a process's first mappings, from ``numa_maps``.

        The kernel builds ``numa_maps`` one mapping at a time as it is read, so
        one short read stays cheap however much the process has mapped;
        mappings without a policy of their own show the process's.

        Parameters
        ----------
        pid : int
            The process.
        head : int, default 4096
            Bytes to read; a line cut short at the end is left out.

        Returns
        -------
        tuple of str or None
            Sorted, each once; None when the file cannot be read.
        """
        try:
            fd = os.open(self.procfs / str(pid) / "numa_maps", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            data = os.read(fd, head)
        except OSError:
            return None
        finally:
            os.close(fd)
        complete = data.decode(errors="replace").split("\n")[:-1]
        return tuple(sorted({line.split()[1] for line in complete if len(line.split()) > 1}))

    def process_environ(self, pid: int) -> list[bytes] | None:
        """``proc/<pid>/environ`` as ``NAME=value`` entries, or None when unreadable (gone, not ours)."""
        try:
            data = (self.procfs / str(pid) / "environ").read_bytes()
        except OSError:
            return None
        return data.split(b"\0")

    def cpu_model(self) -> str | None:
        """The first CPU's model name from ``proc/cpuinfo`` (x86 ``model name``, POWER ``cpu``, ARM ``Processor``)."""
        for line in (self.read_text("proc/cpuinfo") or "").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "cpu", "Processor"):
                return value.strip()
        return None

    # --- counters (telemetry) ------------------------------------------------------------

    def cpu_times(self) -> dict[int, tuple[int, ...]] | None:
        """Each CPU's time since boot from ``proc/stat`` (see :func:`parse_cpu_times`); None when unreadable."""
        text = self.read_text("proc/stat")
        return None if text is None else parse_cpu_times(text)

    def diskstats(self) -> dict[str, DiskStat] | None:
        """Every block device's counters from ``proc/diskstats``, by kernel name; None when unreadable."""
        text = self.read_text("proc/diskstats")
        return None if text is None else parse_diskstats(text)

    def interrupts(self) -> Interrupts | None:
        """``proc/interrupts`` parsed; None when it cannot be read (some containers hide it)."""
        text = self.read_text("proc/interrupts")
        return parse_interrupts(text) if text else None

    def meminfo(self) -> dict[str, int] | None:
        """``proc/meminfo`` in bytes (``Dirty``, ``Writeback``, ``Cached``, …); None when unreadable."""
        text = self.read_text("proc/meminfo")
        return None if text is None else parse_meminfo(text)

    def tasks(self) -> list[TaskStat]:
        """Every thread of every process and every kernel thread, with its CPU time so far.

        This runs once per telemetry sample, so it is lean: one ``read(2)`` of
        ``<pid>/stat`` per process, and of ``<pid>/task/<tid>/stat`` per
        thread only for processes with more than one thread (kernel threads
        and most processes have one). Threads that end while they are listed
        are left out.
        """
        found: list[TaskStat] = []
        proc = os.fspath(self.procfs)
        try:
            pids = [name for name in os.listdir(proc) if name.isdigit()]
        except OSError:
            return found
        for pid in pids:
            task = _task_stat(int(pid), int(pid), _read_proc(f"{proc}/{pid}/stat", 4096))
            if task is not None and task[1] == 1:
                found.append(task[0])
                continue
            task_dir = f"{proc}/{pid}/task"
            try:
                tids = os.listdir(task_dir)
            except OSError:
                continue
            for tid in tids:
                thread = _task_stat(int(pid), int(tid), _read_proc(f"{task_dir}/{tid}/stat", 4096))
                if thread is not None:
                    found.append(thread[0])
        return found

    def device_irqs(self, name: str) -> tuple[int, ...]:
        """The interrupt lines of the hardware under a block device, from sysfs.

        Walks up from the device's folder to the first ancestor with
        ``msi_irqs/`` (MSI and MSI-X vectors: an NVMe controller's queues, a
        virtio device's), else the first with a legacy ``irq`` line.

        Parameters
        ----------
        name : str
            A whole disk (``nvme0n1``, ``sda``, ``vda``).

        Returns
        -------
        tuple of int
            Ascending; empty for virtual devices (loop, dm, md, zram) and where
            sysfs shows neither.
        """
        current = self.block_dir(name)
        top = self.realpath("sys/devices")
        while current is not None and current != top and top in current.parents:
            vectors = [int(n) for n in self.list_dir(current / "msi_irqs") if n.isdigit()]
            if vectors:
                return tuple(sorted(vectors))
            legacy = self.read_int(current / "irq") if self.exists(current / "subsystem") else None
            if legacy and self.realpath(current / "subsystem").name == "pci":
                return (legacy,)
            current = current.parent
        return ()

    def loop_backing_file(self, name: str) -> str | None:
        """The file behind loop device ``name`` (``loop/backing_file``), or None for anything else."""
        directory = self.block_dir(name)
        return self.read_text(directory / "loop" / "backing_file") if directory is not None else None


# --- counter files as text (this machine's, or a host's sent over SSH) ---------------------


def parse_cpu_times(text: str) -> dict[int, tuple[int, ...]]:
    """Each CPU's time since boot from the text of ``/proc/stat``, in clock ticks, in :data:`CPU_TIME_FIELDS` order.

    Missing trailing fields of old kernels are 0.
    """
    times: dict[int, tuple[int, ...]] = {}
    width = len(CPU_TIME_FIELDS)
    for line in text.splitlines():
        if not (line.startswith("cpu") and line[3:4].isdigit()):
            continue
        name, *values = line.split()
        try:
            numbers = [int(v) for v in values[:width]]
        except ValueError:
            continue
        times[int(name[3:])] = tuple(numbers + [0] * (width - len(numbers)))
    return times


def parse_diskstats(text: str) -> dict[str, DiskStat]:
    """Every block device's counters from the text of ``/proc/diskstats``, by kernel name."""
    stats: dict[str, DiskStat] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 14:
            continue
        try:
            numbers = [int(v) for v in fields[3:20]]
        except ValueError:
            continue
        stats[fields[2]] = DiskStat(*numbers)
    return stats


def parse_interrupts(text: str) -> Interrupts | None:
    """The text of ``/proc/interrupts`` (its header and any of its lines); None when the header makes no sense."""
    lines = text.splitlines()
    if not lines:
        return None
    try:
        cpus = tuple(int(word[3:]) for word in lines[0].split() if word.startswith("CPU"))
    except ValueError:
        return None
    counts: dict[str, tuple[int, ...]] = {}
    names: dict[str, str] = {}
    for line in lines[1:]:
        label, sep, rest = line.partition(":")
        if not sep:
            continue
        words = rest.split()
        numbers = []
        for word in words[: len(cpus)]:
            if not word.isdigit():
                break
            numbers.append(int(word))
        if not numbers:
            continue
        irq = label.strip()
        counts[irq] = tuple(numbers + [0] * (len(cpus) - len(numbers)))
        names[irq] = " ".join(words[len(numbers) :])
    return Interrupts(cpus=cpus, counts=counts, names=names)


def parse_meminfo(text: str) -> dict[str, int]:
    """The text of ``/proc/meminfo`` in bytes."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        words = value.split()
        if words and words[0].isdigit():
            found[key.strip()] = int(words[0]) * (1024 if words[1:2] == ["kB"] else 1)
    return found


def parse_task_stat(pid: int, tid: int, data: bytes | None) -> TaskStat | None:
    """One thread's ``/proc/<pid>/task/<tid>/stat`` as a :class:`TaskStat`; None when unusable."""
    found = _task_stat(pid, tid, data)
    return None if found is None else found[0]

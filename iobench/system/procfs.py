"""Processes and counters as a machine's procfs shows them: every query takes its :class:`~iobench.system.hostfs.SystemRoot`.

A process's stat, status, children, environment and memory policy; every thread's
CPU time; the CPU, disk, interrupt and memory counters telemetry samples.
"""

from __future__ import annotations

import os

from iobench.agent.probe import TASK_STAT_FIELDS as TASK_STAT_FIELDS
from iobench.system.hostfs import CPU_TIME_FIELDS, DiskStat, Interrupts, ProcessStat, SystemRoot, TaskStat

_PF_KTHREAD = 0x00200000


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


def _parse_stat(pid: int, text: str) -> ProcessStat | None:
    """A ``stat`` line split around ``comm``; None when it makes no sense."""
    if ")" not in text:
        return None
    head, _, tail = text.rpartition(")")
    fields = tuple(tail.split())
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return ProcessStat(pid=pid, comm=head.partition("(")[2], fields=fields)


def _task_stat(pid: int, tid: int, data: bytes | None) -> tuple[TaskStat, int] | None:
    """A ``stat`` line as a :class:`TaskStat` and the process's thread count (field 20); None when unusable."""
    if data is None or b")" not in data:
        return None
    head, _, tail = data.rpartition(b")")
    fields = tail.split()
    at = TASK_STAT_FIELDS
    try:
        flags, utime, stime = int(fields[at["flags"]]), int(fields[at["utime"]]), int(fields[at["stime"]])
        threads = int(fields[at["threads"]])
        processor = int(fields[at["processor"]]) if len(fields) > at["processor"] else None
    except (IndexError, ValueError):
        return None
    comm = head.partition(b"(")[2].decode(errors="replace")
    return task_stat(pid, tid, comm, flags, utime, stime, processor), threads


def task_stat(
    pid: int, tid: int, comm: str, flags: int, utime: int, stime: int, processor: int | None
) -> TaskStat:
    """A :class:`TaskStat` from the fields of its ``stat`` line (:data:`TASK_STAT_FIELDS`)."""
    return TaskStat(pid, tid, comm, utime, stime, processor, bool(flags & _PF_KTHREAD))


def pids(root: SystemRoot) -> list[int]:
    """Every process id in procfs, ascending; empty when procfs cannot be listed."""
    return sorted(int(name) for name in root.list_dir(root.procfs) if name.isdigit())


def process_stat(root: SystemRoot, pid: int) -> ProcessStat | None:
    """``proc/<pid>/stat``, or None when the process is gone or the line makes no sense."""
    data = _read_proc(f"{os.fspath(root.procfs)}/{pid}/stat")
    return None if data is None else _parse_stat(pid, data.decode(errors="replace").strip())


def parent_pids(root: SystemRoot) -> dict[int, int]:
    """Every process's parent, from each ``proc/<pid>/stat``: pid → ppid."""
    parents = {}
    for pid in pids(root):
        parsed = process_stat(root, pid)
        if parsed is not None:
            parents[pid] = parsed.ppid
    return parents


def has_children_lists(root: SystemRoot, pid: int) -> bool:
    """Whether the kernel keeps ``proc/<pid>/task/<tid>/children`` (``CONFIG_PROC_CHILDREN``) for ``pid``."""
    return os.path.exists(f"{os.fspath(root.procfs)}/{pid}/task/{pid}/children")


def task_children(root: SystemRoot, pid: int) -> list[int]:
    """The children of every thread of ``pid``, from the kernel's ``children`` lists; empty when gone."""
    tasks = f"{os.fspath(root.procfs)}/{pid}/task"
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


def process_status(root: SystemRoot, pid: int) -> dict[str, str] | None:
    """``proc/<pid>/status`` as key → value (``Cpus_allowed_list`` → ``0-3``), or None when gone."""
    data = _read_proc(f"{os.fspath(root.procfs)}/{pid}/status")
    if data is None:
        return None
    pairs = (line.split(":", 1) for line in data.decode(errors="replace").splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def memory_policies(root: SystemRoot, pid: int, head: int = 4096) -> tuple[str, ...] | None:
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
        fd = os.open(root.procfs / str(pid) / "numa_maps", os.O_RDONLY | os.O_CLOEXEC)
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


def process_environ(root: SystemRoot, pid: int) -> list[bytes] | None:
    """``proc/<pid>/environ`` as ``NAME=value`` entries, or None when unreadable (gone, not ours)."""
    data = _read_proc(f"{os.fspath(root.procfs)}/{pid}/environ")
    return None if data is None else data.split(b"\0")


def cpu_model(root: SystemRoot) -> str | None:
    """The first CPU's model name from ``proc/cpuinfo`` (x86 ``model name``, POWER ``cpu``, ARM ``Processor``)."""
    for line in (root.read_text("proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "cpu", "Processor"):
            return value.strip()
    return None


def cpu_times(root: SystemRoot) -> dict[int, tuple[int, ...]] | None:
    """Each CPU's time since boot from ``proc/stat`` (see :func:`parse_cpu_times`); None when unreadable."""
    text = root.read_text("proc/stat")
    return None if text is None else parse_cpu_times(text)


def diskstats(root: SystemRoot) -> dict[str, DiskStat] | None:
    """Every block device's counters from ``proc/diskstats``, by kernel name; None when unreadable."""
    text = root.read_text("proc/diskstats")
    return None if text is None else parse_diskstats(text)


def interrupts(root: SystemRoot) -> Interrupts | None:
    """``proc/interrupts`` parsed; None when it cannot be read (some containers hide it)."""
    text = root.read_text("proc/interrupts")
    return parse_interrupts(text) if text else None


def meminfo(root: SystemRoot) -> dict[str, int] | None:
    """``proc/meminfo`` in bytes (``Dirty``, ``Writeback``, ``Cached``, …); None when unreadable."""
    text = root.read_text("proc/meminfo")
    return None if text is None else parse_meminfo(text)


def tasks(root: SystemRoot) -> list[TaskStat]:
    """Every thread of every process and every kernel thread, with its CPU time so far.

    This runs once per telemetry sample, so it is lean: one ``read(2)`` of
    ``<pid>/stat`` per process, and of ``<pid>/task/<tid>/stat`` per
    thread only for processes with more than one thread (kernel threads
    and most processes have one). Threads that end while they are listed
    are left out.
    """
    found: list[TaskStat] = []
    proc = os.fspath(root.procfs)
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

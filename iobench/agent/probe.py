"""What the agent reads of its machine: sysfs and procfs under a root, and paths' stats.

Every reader takes ``root``: ``/`` on a live machine, a folder holding
``sys/`` and ``proc/`` for a fake tree in tests. Paths in answers are always
the machine's own (``/sys/block/sda/...``), whatever the root. Target paths
(devices, files) are looked up as given: they are not under the root.

Every file read is bounded (:data:`MAX_FILE`); a file that cannot be read is
left out of an answer, never an error.

This module is sent to hosts: standard library only, Python 3.9 syntax.
"""

from __future__ import annotations

import ctypes
import fcntl
import glob
import os
import stat as statmod
import struct
from collections.abc import Iterable
from typing import Any

Stat = list[int]
"""``[mode, rdev major, rdev minor, dev, inode, size]``."""

MAX_FILE = 4 << 20
"""The most bytes read of one file."""
MEMINFO_KEPT = ("Dirty", "Writeback", "Cached")
"""The ``/proc/meminfo`` lines a sample keeps (telemetry's ``<key>_bytes`` rows), here and on hosts."""
TASK_STAT_FIELDS = {"flags": 6, "utime": 11, "stime": 12, "threads": 17, "processor": 36}
"""Where a thread's ``stat`` line keeps what telemetry holds: fields after the ``)`` that ends its
name, from 0 (the kernel's fields 9, 14, 15, 20 and 39)."""
NUMA_MAPS_HEAD = 4096
"""Bytes of a process's ``numa_maps`` read for its memory policy (the kernel builds it as it is read)."""
_CPU = "/sys/devices/system/cpu"
_NODE = "/sys/devices/system/node"


def at(root: str, path: str) -> str:
    """Where the machine's ``path`` (absolute) is under ``root``."""
    return path if root == "/" else root.rstrip("/") + path


def mine(root: str, real: str) -> str:
    """The machine's path of ``real``, a path under ``root``."""
    if root == "/":
        return real
    base = root.rstrip("/")
    if real == base:
        return "/"
    return real[len(base) :] if real.startswith(base + "/") else real


def read_bytes(path: str, limit: int = MAX_FILE) -> bytes | None:
    """At most ``limit`` bytes of a file, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        chunks = []
        size = 0
        while size < limit:
            chunk = os.read(fd, min(1 << 16, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_text(path: str, limit: int = MAX_FILE) -> str | None:
    """A file's text (bounded), or None."""
    data = read_bytes(path, limit)
    return None if data is None else data.decode("utf-8", "replace")


def _sorted(paths: Iterable[str]) -> list[str]:
    return sorted(set(paths))


def _globbed(root: str, pattern: str) -> list[str]:
    """The machine's paths matching ``pattern`` (a path of it)."""
    return [mine(root, p) for p in _sorted(glob.glob(at(root, pattern)))]


class _Tree:
    """A snapshot being gathered: files, one-line files, links and folders, by the machine's path."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.files: dict[str, str] = {}
        self.links: dict[str, str] = {}
        self.dirs: list[str] = []

    def file(self, *paths: str, one_line: bool = False) -> None:
        for path in paths:
            where = at(self.root, path)
            if path in self.files or not os.path.isfile(where) or not os.access(where, os.R_OK):
                continue
            text = read_text(where)
            if text is None:
                continue
            self.files[path] = text.split("\n", 1)[0] if one_line else text

    def link(self, *paths: str) -> None:
        for path in paths:
            where = at(self.root, path)
            if os.path.islink(where):
                try:
                    self.links[path] = os.readlink(where)
                except OSError:
                    pass

    def folder(self, *paths: str) -> None:
        for path in paths:
            if os.path.isdir(at(self.root, path)):
                self.dirs.append(path)

    def glob(self, pattern: str) -> list[str]:
        return _globbed(self.root, pattern)


def stat_of(path: str) -> Stat | None:
    """``[mode, rdev major, rdev minor, dev, inode, size]`` of a path (symlinks followed), or None."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return [
        info.st_mode,
        os.major(info.st_rdev),
        os.minor(info.st_rdev),
        info.st_dev,
        info.st_ino,
        info.st_size,
    ]


def look_up(path: str) -> dict[str, Any]:
    """A target as the machine sees it: the nearest existing path, its realpath, that path's stat."""
    existing = path
    while not os.path.exists(existing) and existing != "/":
        existing = os.path.dirname(existing) or "/"
    return {"existing": existing, "realpath": os.path.realpath(path), "stat": stat_of(existing)}


def snapshot(root: str, targets: Iterable[str]) -> dict[str, Any]:
    """Every sysfs and procfs file the controller's topology, guard and settings report read, and nothing else.

    CPUs, nodes, block devices with the folders above them up to
    ``/sys/devices``, mountinfo, swaps, cpuinfo, hostname, kernel release,
    boot id, the settings ``system show`` reads, each process's name; each
    target looked up (:func:`look_up`); the stats of ``/`` and ``/dev``.
    """
    tree = _Tree(root)
    c, n = _CPU, _NODE
    cpus = tree.glob(c + "/cpu[0-9]*")
    nodes = tree.glob(n + "/node[0-9]*")
    tree.folder(
        c,
        *cpus,
        *(p + "/topology" for p in cpus),
        n,
        *nodes,
        "/sys/class/block",
        "/sys/block",
        "/sys/dev/block",
    )
    tree.file(c + "/online", *(p + "/online" for p in cpus))
    for name in ("physical_package_id", "core_id", "thread_siblings_list", "thread_siblings"):
        tree.file(*(p + "/topology/" + name for p in cpus))
    for name in ("cpulist", "cpumap", "distance"):
        tree.file(*(p + "/" + name for p in nodes))
    listed = tree.glob("/sys/class/block/*") + tree.glob("/sys/block/*")
    tree.link(*listed, *tree.glob("/sys/dev/block/*"))
    seen = set()
    for entry in listed:
        real = mine(root, os.path.realpath(at(root, entry)))
        if real in seen or not os.path.exists(at(root, real)):
            continue
        seen.add(real)
        tree.folder(real, *(real + "/" + d for d in ("queue", "holders", "slaves", "device", "dm")))
        tree.file(*(real + "/" + f for f in ("dev", "size", "partition")))
        tree.file(*(real + "/loop/" + f for f in ("backing_file", "offset", "sizelimit")))
        tree.file(*(real + "/queue/" + f for f in ("scheduler", "read_ahead_kb", "rotational")))
        tree.file(real + "/queue/write_cache", real + "/queue/io_poll", one_line=True)
        tree.file(*(real + "/" + f for f in ("device/model", "device/firmware_rev", "device/rev", "dm/name")))
        tree.link(*tree.glob(real + "/holders/*"), *tree.glob(real + "/slaves/*"))
        parent = os.path.dirname(real)
        while parent.startswith("/sys/devices/") and parent not in seen:
            seen.add(parent)
            names = ["numa_node", "local_cpulist", "local_cpus", "class", "irq"]
            names += ["current_link_speed", "max_link_speed", "current_link_width", "max_link_width"]
            tree.file(*(parent + "/" + f for f in names))
            tree.folder(parent + "/msi_irqs")
            tree.file(*tree.glob(parent + "/msi_irqs/*"))
            tree.link(parent + "/subsystem")
            parent = os.path.dirname(parent)
    tree.file("/proc/self/mountinfo", "/proc/swaps", "/proc/cpuinfo")
    tree.file("/proc/sys/kernel/hostname", "/proc/sys/kernel/osrelease", "/proc/sys/kernel/random/boot_id")
    one = []
    for p in cpus:
        one += [p + "/cpufreq/scaling_governor", p + "/cpufreq/scaling_available_governors"]
        for state in tree.glob(p + "/cpuidle/state[0-9]*"):
            one += [state + "/latency", state + "/name", state + "/disable"]
    one += [c + "/cpufreq/boost", c + "/intel_pstate/no_turbo", c + "/smt/control", c + "/smt/active"]
    one += ["/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/mm/transparent_hugepage/defrag"]
    one += ["/sys/module/intel_idle/parameters/max_cstate", "/sys/module/nvme/parameters/poll_queues"]
    one += [p + "/comm" for p in tree.glob("/proc/[0-9]*")]
    tree.file(*one, one_line=True)
    tree.file("/proc/sys/vm/swappiness", "/proc/sys/kernel/numa_balancing", "/proc/sys/fs/protected_symlinks")
    tree.folder("/sys/class/nvme", *tree.glob("/sys/class/nvme/*"))
    return {
        "files": tree.files,
        "links": tree.links,
        "dirs": tree.dirs,
        "targets": {path: look_up(path) for path in targets},
        "root": stat_of("/"),
        "dev": stat_of("/dev"),
    }


# --- counters ----------------------------------------------------------------------------------


def _task_line(pid: int, tid: int, data: bytes | None) -> tuple[list[Any], int] | None:
    """``[pid, tid, flags, utime, stime, processor or None, name]`` and the thread count, or None."""
    if data is None or b")" not in data:
        return None
    head, _, tail = data.rpartition(b")")
    fields = tail.split()
    f = TASK_STAT_FIELDS
    try:
        row: list[Any] = [pid, tid, int(fields[f["flags"]]), int(fields[f["utime"]]), int(fields[f["stime"]])]
        threads = int(fields[f["threads"]])
        row.append(int(fields[f["processor"]]) if len(fields) > f["processor"] else None)
    except (IndexError, ValueError):
        return None
    row.append(head.partition(b"(")[2].decode("utf-8", "replace"))
    return row, threads


def tasks(root: str) -> list[list[Any]]:
    """Every thread's stat fields telemetry keeps; a process's threads read only when it has more than one."""
    proc = at(root, "/proc")
    found: list[list[Any]] = []
    try:
        pids = [name for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        one = _task_line(int(pid), int(pid), read_bytes(proc + "/" + pid + "/stat", 4096))
        if one is not None and one[1] == 1:
            found.append(one[0])
            continue
        try:
            tids = [t for t in os.listdir(proc + "/" + pid + "/task") if t.isdigit()]
        except OSError:
            continue
        for tid in tids:
            row = _task_line(
                int(pid), int(tid), read_bytes(proc + "/" + pid + "/task/" + tid + "/stat", 4096)
            )
            if row is not None:
                found.append(row[0])
    return found


def sample(
    root: str, devices: Iterable[str] = (), irqs: Iterable[str] = (), threads: bool = False
) -> dict[str, Any]:
    """The counters telemetry keeps, as text cut to the lines kept, and each thread's row (:func:`tasks`).

    ``stat``: per-CPU lines; ``diskstats``: the ``devices``' lines;
    ``interrupts``: the header and the ``irqs``' lines; ``meminfo``:
    :data:`MEMINFO_KEPT`. A part whose file cannot be read is None.
    """
    found: dict[str, Any] = {}
    text = read_text(at(root, "/proc/stat"))
    found["stat"] = (
        None
        if text is None
        else "\n".join(x for x in text.splitlines() if x[:3] == "cpu" and x[3:4].isdigit())
    )
    wanted = set(devices)
    text = read_text(at(root, "/proc/diskstats")) if wanted else None
    found["diskstats"] = (
        None
        if text is None
        else "\n".join(x for x in text.splitlines() if x.split()[2:3] and x.split()[2] in wanted)
    )
    lines = []
    if irqs:
        labels = set(irqs)
        text = read_text(at(root, "/proc/interrupts"))
        if text is not None and text:
            head, *rest = text.splitlines()
            lines = [head] + [x for x in rest if x.partition(":")[0].strip() in labels]
    found["interrupts"] = "\n".join(lines) if lines else None
    text = read_text(at(root, "/proc/meminfo"))
    found["meminfo"] = (
        None
        if text is None
        else "\n".join(x for x in text.splitlines() if x.partition(":")[0] in MEMINFO_KEPT)
    )
    found["tasks"] = tasks(root) if threads else None
    return found


# --- processes ---------------------------------------------------------------------------------


def status(root: str, pid: int) -> dict[str, str] | None:
    """A process's status fields (``Name``, ``State``, ``PPid``, ...), or None when it is gone."""
    text = read_text(at(root, f"/proc/{pid}/status"), 1 << 16)
    if not text:
        return None
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        found[key] = value.strip()
    return found


def process_row(root: str, pid: int) -> dict[str, Any] | None:
    """``{pid, ppid, cpus, mems, state, name}`` of a process, or None when it is gone."""
    info = status(root, pid)
    if info is None or not info.get("PPid", "").isdigit():
        return None
    return {
        "pid": pid,
        "ppid": int(info["PPid"]),
        "cpus": info.get("Cpus_allowed_list", ""),
        "mems": info.get("Mems_allowed_list", ""),
        "state": (info.get("State", "?").split() or ["?"])[0],
        "name": info.get("Name", ""),
    }


def processes(root: str) -> list[dict[str, Any]]:
    """Every process of the machine (:func:`process_row`); one that ends while they are read is left out."""
    found: list[dict[str, Any]] = []
    try:
        names = os.listdir(at(root, "/proc"))
    except OSError:
        return found
    for name in names:
        if name.isdigit():
            row = process_row(root, int(name))
            if row is not None:
                found.append(row)
    return found


def children(root: str, pid: int) -> list[int]:
    """A process's children (every thread's ``children`` file)."""
    found: list[int] = []
    for path in glob.glob(at(root, f"/proc/{pid}/task/*/children")):
        text = read_text(path, 1 << 20) or ""
        found += [int(w) for w in text.split() if w.isdigit()]
    return found


def below(root: str, pid: int, depth: int) -> list[int]:
    """The processes exactly ``depth`` levels below ``pid`` (fio's job processes under its server)."""
    level = [pid]
    for _ in range(depth):
        level = [child for parent in level for child in children(root, parent)]
    return level


def descendants(root: str, pid: int) -> list[int]:
    """``pid`` and every process below it, from each process's parent (as the table shows it)."""
    parents = {row["pid"]: row["ppid"] for row in processes(root)}
    keep = {pid}
    grew = True
    while grew:
        more = {p for p, parent in parents.items() if parent in keep and p not in keep}
        keep |= more
        grew = bool(more)
    return sorted(keep)


def memory_policy(root: str, pid: int) -> list[str] | None:
    """The policies of a process's first mappings (``bind:1``, ``default``), sorted, or None."""
    data = read_bytes(at(root, f"/proc/{pid}/numa_maps"), NUMA_MAPS_HEAD)
    if data is None:
        return None
    lines = data.decode("utf-8", "replace").split("\n")
    if len(data) >= NUMA_MAPS_HEAD:
        lines = lines[:-1]  # cut short
    return sorted({words[1] for words in (line.split() for line in lines) if len(words) > 1})


def looks(root: str, pid: int, depth: int, policy_of: Iterable[int] = ()) -> list[dict[str, Any]]:
    """The processes ``depth`` below ``pid`` with their placement; the memory policy of those in ``policy_of``."""
    wanted = set(policy_of)
    found = []
    for child in below(root, pid, depth):
        row = process_row(root, child)
        if row is None:
            continue
        if child in wanted:
            row["policy"] = memory_policy(root, child)
        found.append(row)
    return found


def exit_codes(root: str, pids: Iterable[int]) -> dict[str, int]:
    """``{pid: wait status}`` of each of ``pids`` that is a zombie (its ``stat``'s last field)."""
    found = {}
    for pid in pids:
        data = read_bytes(at(root, f"/proc/{pid}/stat"), 4096)
        if data is None or b")" not in data:
            continue
        fields = data.rpartition(b")")[2].split()
        if fields[:1] == [b"Z"] and len(fields) >= 50 and fields[49].isdigit():
            found[str(pid)] = int(fields[49])
    return found


# --- an edge: targets' identity and disks' settings ------------------------------------------


def target_state(root: str, path: str) -> dict[str, Any]:
    """``{"exists": False}``, ``{"error": words}`` or the stat's identity and a block device's sectors."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return {"exists": False}
    except OSError as exc:
        return {"exists": True, "error": exc.strerror or str(exc)}
    if statmod.S_ISBLK(info.st_mode):
        devno = f"{os.major(info.st_rdev)}:{os.minor(info.st_rdev)}"
        entry = at(root, "/sys/dev/block/" + devno)
        sectors = None
        if not os.path.exists(entry):
            sectors = 0 if os.path.isdir(at(root, "/sys/dev/block")) else None
        else:
            text = (read_text(entry + "/size", 256) or "").strip()
            sectors = int(text) if text.isdigit() else None
        return {"exists": True, "block": True, "identity": [info.st_rdev], "sectors": sectors}
    return {"exists": True, "block": False, "identity": [info.st_dev, info.st_ino]}


def disk_settings(root: str, disks: Iterable[str]) -> dict[str, dict[str, str]]:
    """Each disk's ``scheduler`` and ``read_ahead_kb`` files as they read (disks missing them left out)."""
    found = {}
    for disk in disks:
        if "/" in disk or disk in ("", ".", ".."):
            continue
        queue = at(root, "/sys/block/" + disk + "/queue/")
        scheduler, readahead = read_text(queue + "scheduler", 4096), read_text(queue + "read_ahead_kb", 256)
        if scheduler is not None and readahead is not None:
            found[disk] = {"scheduler": scheduler.strip(), "readahead_kb": readahead.strip()}
    return found


def edge(
    root: str, targets: Iterable[str], disks: Iterable[str], watch: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The targets' states, the disks' settings and (``watch``: :func:`sample`'s arguments) a sample, at once."""
    return {
        "targets": {path: target_state(root, path) for path in targets},
        "settings": disk_settings(root, disks),
        "sample": None if watch is None else sample(root, **watch),
    }


# --- what iobench made ---------------------------------------------------------------------------

_STATX_INO, _STATX_BTIME = 0x100, 0x800
_AT_EMPTY_PATH = 0x1000
_FS_IOC_GETVERSION = 0x80087601  # _IOR('v', 1, long)


def _statx_birth(fd: int) -> str | None:
    """The birth time of the file open as ``fd`` (``statx``), or None where the file system keeps none.

    Python before 3.12 has no ``os.statx`` on Linux; glibc's wrapper is called through ctypes.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buffer = ctypes.create_string_buffer(256)  # struct statx
        if libc.statx(fd, b"", _AT_EMPTY_PATH, _STATX_INO | _STATX_BTIME, buffer) != 0:
            return None
    except (OSError, AttributeError):
        return None
    (mask,) = struct.unpack_from("<I", buffer, 0)
    if not mask & _STATX_BTIME:
        return None
    seconds, nanoseconds = struct.unpack_from("<qI", buffer, 80)  # stx_btime
    return f"born {seconds}.{nanoseconds:09d}"


def _generation(fd: int) -> str | None:
    """The inode's generation (``FS_IOC_GETVERSION``), or None where the file system does not give it."""
    answer = bytearray(8)
    try:
        fcntl.ioctl(fd, _FS_IOC_GETVERSION, answer)
    except OSError:
        return None
    return f"generation {struct.unpack('<q', answer)[0]}"


def fd_identity(fd: int) -> str | None:
    """What tells the file open as ``fd`` from any file made later, or None when nothing does.

    Device and inode numbers alone do not: a new file may get a deleted one's inode. With them,
    the file's birth time (``statx``, which ext4, xfs, btrfs and tmpfs keep); where the file
    system keeps none, the inode's generation (``FS_IOC_GETVERSION``, which ext2/3 give), which
    changes each time the inode is reused. Neither: None, and the file is not remembered.
    """
    info = os.fstat(fd)
    if not statmod.S_ISREG(info.st_mode):
        return None
    stamp = _statx_birth(fd) or _generation(fd)
    return None if stamp is None else f"{info.st_dev}:{info.st_ino} {stamp}"


def file_identity(path: str) -> str | None:
    """:func:`fd_identity` of the regular file named ``path`` (a link there is not followed), or None."""
    try:
        if not statmod.S_ISREG(os.lstat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return fd_identity(fd)
    finally:
        os.close(fd)


def make_file(path: str) -> int:
    """A new, empty file at ``path`` (``O_CREAT | O_EXCL | O_NOFOLLOW``: a name that exists, a link
    included, is not opened), open for writing; OSError (``FileExistsError``) otherwise."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)


def folders(paths: Iterable[str]) -> dict[str, Any]:
    """This user's uid, and each path's owner, mode and owner's name, not following a link (``lstat``)."""
    import pwd

    found: dict[str, Any] = {}
    for path in paths:
        try:
            info = os.lstat(path)
        except OSError:
            continue
        try:
            name = pwd.getpwuid(info.st_uid).pw_name
        except KeyError:
            name = str(info.st_uid)
        found[path] = [info.st_uid, statmod.S_IMODE(info.st_mode), name]
    return {"me": os.geteuid(), "found": found}

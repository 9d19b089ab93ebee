"""What a point's validity checks need to know about the machine, read just before and just after fio.

The checks themselves (:mod:`iobench.results.validity`) are pure functions over
a point's saved files; this module gathers the facts they cannot find there,
through a :class:`~iobench.system.hostfs.SystemRoot`, into plain JSON-able
dicts that the runner keeps in the point's ``meta.json`` (``facts``):

=================  ===========  ============================================================
key                phase        what
=================  ===========  ============================================================
``cpus``           both         per CPU of the point: ``governor``, ``freq_khz``
                                (``scaling_cur_freq``), ``core_throttle`` and
                                ``package_throttle`` (``thermal_throttle/*_count``)
``sensors``        both         per target disk with an hwmon sensor: ``temp_c``, ``warn_c``
                                (``temp1_max``), ``crit_c`` (``temp1_crit``)
``disks``          before       per device under a target: ``io_poll`` (``queue/io_poll``),
                                ``nvme_poll_queues`` (the NVMe driver's), ``write_cache``
``mem_available``  before       ``MemAvailable`` in bytes
``targets``        before       per target: ``kind``, the ``region_bytes`` fio uses and the
                                ``data_bytes`` in it (``SEEK_DATA``/``SEEK_HOLE`` on the file,
                                or a loop device's backing file), the file system
                                (``fstype``, ``fs_options``), the device ``stack`` (dm names,
                                models), where its data is held (``holding``, ``memory``,
                                ``loops``: :func:`data_home`) and a ``note`` when something
                                could not be read
``counts``         both         per target device and device holding a target's data: its
                                completed ``read_ios``/``write_ios``, ``read_bytes``/
                                ``write_bytes`` and merges (``/proc/diskstats``)
``notes``          both         counters this machine does not have
=================  ===========  ============================================================

Nothing here raises: a fact that cannot be read is absent (or None) with a note.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iobench.errors import IobenchError
from iobench.system import blockdevs, procfs
from iobench.system.hostfs import SystemRoot, devno_text
from iobench.system.topology import TargetLocation

__all__ = ["MAX_EXTENTS", "MEMORY_FS", "NOT_LAID_OUT", "collect", "data_extents", "data_home", "target_facts"]

#: Extents walked per target before giving up on counting its data (a very fragmented file).
MAX_EXTENTS = 65536
#: The note of a target file that does not exist before the point: fio makes it (and writes it) first.
NOT_LAID_OUT = "does not exist yet: fio lays it out (writes it) first"
#: File systems whose files are held in memory, not on a device.
MEMORY_FS = ("tmpfs", "ramfs")
_CPU = "sys/devices/system/cpu"
#: Block devices that are memory: zram (compressed RAM) and brd's ramdisks.
_MEMORY_DEVICE = re.compile(r"(?:zram|ram)\d+")


def data_extents(path: str, start: int, length: int) -> tuple[int | None, str | None]:
    """Bytes holding data in ``[start, start + length)`` of a file, by ``SEEK_DATA``/``SEEK_HOLE``.

    Holes and unwritten (preallocated) extents count as no data: the file
    system answers reads of them with zeros without touching the device.

    Parameters
    ----------
    path : str
        A file on this machine.
    start, length : int
        The region, in bytes.

    Returns
    -------
    tuple
        ``(data bytes, None)``, or ``(None, why)`` when it cannot be told
        (missing file, a file system without ``SEEK_DATA``, too many extents).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"cannot open {path}: {exc.strerror}"
    try:
        end = start + max(0, length)
        position, total = start, 0
        for _ in range(MAX_EXTENTS):
            if position >= end:
                return total, None
            try:
                data = os.lseek(fd, position, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data after position
                    return total, None
                return None, f"{path}: the file system cannot tell holes from data ({exc.strerror})"
            if data >= end:
                return total, None
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            total += min(hole, end) - data
            position = hole
        return None, f"{path}: more than {MAX_EXTENTS} extents; its data was not counted"
    except OSError as exc:
        return None, f"{path}: {exc.strerror}"
    finally:
        os.close(fd)


def _cpu_facts(system: SystemRoot, cpus: Sequence[int], notes: list[str]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    # A machine has cpufreq (and throttle counters) for all its CPUs or for none: the first one tells,
    # which spares hundreds of failed opens per point on a large machine without them.
    first = f"{_CPU}/cpu{cpus[0]}" if cpus else ""
    scaled = bool(cpus) and system.is_dir(f"{first}/cpufreq")
    counted = bool(cpus) and system.is_dir(f"{first}/thermal_throttle")
    for cpu in cpus if scaled or counted else ():
        base = f"{_CPU}/cpu{cpu}"
        facts = {
            "governor": system.read_text(f"{base}/cpufreq/scaling_governor") if scaled else None,
            "freq_khz": system.read_int(f"{base}/cpufreq/scaling_cur_freq") if scaled else None,
            "core_throttle": system.read_int(f"{base}/thermal_throttle/core_throttle_count")
            if counted
            else None,
            "package_throttle": (
                system.read_int(f"{base}/thermal_throttle/package_throttle_count") if counted else None
            ),
        }
        if any(v is not None for v in facts.values()):
            found[str(cpu)] = facts
    if cpus and not any(f.get("governor") for f in found.values()):
        notes.append("no cpufreq in sysfs: governor and frequency unknown")
    if cpus and not any(f.get("core_throttle") is not None for f in found.values()):
        notes.append("no thermal throttle counters in sysfs")
    return found


def _device_path(system: SystemRoot, disk: str) -> Path | None:
    directory = system.block_dir(disk)
    if directory is None or not system.exists(directory / "device"):
        return None
    return system.realpath(directory / "device")


def _sensor_facts(system: SystemRoot, disks: Sequence[str], notes: list[str]) -> dict[str, dict[str, Any]]:
    """Each disk's hwmon sensor: the one whose device is the disk's device or above or below it."""
    sensors = []
    for name in system.list_dir("sys/class/hwmon"):
        folder = system.realpath(f"sys/class/hwmon/{name}")
        if system.exists(folder / "device"):
            sensors.append((folder, system.realpath(folder / "device")))
    found: dict[str, dict[str, Any]] = {}
    for disk in disks:
        device = _device_path(system, disk)
        if device is None:
            continue
        for folder, sensor_device in sensors:
            if sensor_device == device or sensor_device in device.parents or device in sensor_device.parents:
                temp = system.read_int(folder / "temp1_input")
                if temp is None:
                    continue
                warn, crit = system.read_int(folder / "temp1_max"), system.read_int(folder / "temp1_crit")
                found[disk] = {
                    "name": system.read_text(folder / "name"),
                    "temp_c": temp / 1000.0,
                    "warn_c": None if warn is None else warn / 1000.0,
                    "crit_c": None if crit is None else crit / 1000.0,
                }
                break
    if disks and not found:
        notes.append(f"no temperature sensor (hwmon) for {', '.join(disks)}")
    return found


def _disk_facts(system: SystemRoot, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    queues = system.read_int("sys/module/nvme/parameters/poll_queues")
    found = {}
    for name in names:
        directory = system.block_dir(name) or system.path(f"sys/block/{name}")
        found[name] = {
            "io_poll": system.read_int(directory / "queue" / "io_poll"),
            "nvme_poll_queues": queues if name.startswith("nvme") else None,
            "write_cache": system.read_text(directory / "queue" / "write_cache"),
        }
    return found


def _stack(system: SystemRoot, device: str | None) -> list[dict[str, Any]]:
    """The devices under ``device`` (itself first), with what tells a compressing layer: dm names, models."""
    if device is None:
        return []
    out = []
    for name in blockdevs.devices_below(system, device):
        directory = system.block_dir(name)
        if directory is None:
            continue
        whole = system.block_dir(blockdevs.whole_disk(system, name)) or directory
        out.append(
            {
                "name": name,
                "dm_name": system.read_text(directory / "dm" / "name"),
                "dm_uuid": system.read_text(directory / "dm" / "uuid"),
                "model": system.read_text(whole / "device" / "model"),
            }
        )
    return out


def data_home(system: SystemRoot, device: str) -> dict[str, Any]:
    """Where ``device``'s data is held: the devices at the bottom of its stack, or memory.

    The walk goes down ``slaves/`` (dm, md) and through each loop device to the
    device holding its backing file, then down that one's stack. A zram or brd
    device, or a backing file on tmpfs or ramfs, is memory.

    Returns
    -------
    dict
        ``holding``: the devices at the bottom (partitions as such); ``memory``:
        why the data is in memory, or None; ``loops``: each loop device passed,
        with its ``backing`` file and ``dio`` (``loop/dio``: 1 when it does direct
        I/O on the file, 0 when the file's page cache serves it).
    """
    holding: list[str] = []
    memory: list[str] = []
    loops: list[dict[str, Any]] = []
    todo, seen = [device], set()
    while todo:
        for name in blockdevs.devices_below(system, todo.pop()):
            if name in seen:
                continue
            seen.add(name)
            if _MEMORY_DEVICE.fullmatch(name):
                memory.append(f"{name} is RAM ({'zram' if name.startswith('zram') else 'brd'})")
                continue
            backing = blockdevs.loop_backing_file(system, name)
            if backing:
                directory = system.block_dir(name)
                dio = system.read_int(directory / "loop" / "dio") if directory is not None else None
                loops.append({"name": name, "backing": backing, "dio": dio})
                under = blockdevs.loop_backing_device(system, name)
                if under is not None:
                    todo.append(under)
                elif system.live:
                    with contextlib.suppress(OSError):
                        fstype, _ = _mount_of(
                            system, devno_text(os.stat(backing).st_dev), os.path.realpath(backing)
                        )
                        if fstype in MEMORY_FS:
                            memory.append(f"{name}'s backing file {backing} is on {fstype}")
            elif not blockdevs.slaves(system, name):
                holding.append(name)
    return {"holding": holding, "memory": "; ".join(memory) or None, "loops": loops}


def _counts(system: SystemRoot, locations: Sequence[TargetLocation]) -> dict[str, dict[str, int]]:
    """The I/O counters of each target's device and of the devices holding its data."""
    names: dict[str, None] = {}
    for location in locations:
        if location.device is not None:
            names[location.device] = None
            names.update(dict.fromkeys(data_home(system, location.device)["holding"]))
    stats = (procfs.diskstats(system) or {}) if names else {}
    return {
        name: {
            "read_ios": s.reads,
            "read_merges": s.reads_merged,
            "read_bytes": s.sectors_read * 512,
            "write_ios": s.writes,
            "write_merges": s.writes_merged,
            "write_bytes": s.sectors_written * 512,
        }
        for name in names
        if (s := stats.get(name)) is not None
    }


def _mount_of(system: SystemRoot, devno: str, path: str) -> tuple[str | None, str | None]:
    """The file system (type, options) holding ``path``: by device number, else the longest mount point."""
    mounts = blockdevs.mounts(system)
    match = [m for m in mounts if m.devno == devno]
    if not match:
        match = sorted(
            (m for m in mounts if path == m.point or path.startswith(m.point.rstrip("/") + "/")),
            key=lambda m: len(m.point),
        )
    if not match:
        return None, None
    return match[-1].fstype, match[-1].options


def target_facts(
    system: SystemRoot, location: TargetLocation, region: tuple[int, int | None] = (0, None)
) -> dict[str, Any]:
    """What the checks need to know about one target (the ``targets`` entry of :func:`collect`).

    Parameters
    ----------
    system
        The machine's root; files and extents are read only on the running machine.
    location
        Where the target's I/O lands (:func:`~iobench.system.topology.locate_target`).
    region
        fio's ``offset`` and ``size`` for it (None: to the end): the bytes it reads.
    """
    offset, size = region
    facts: dict[str, Any] = {
        "kind": location.kind,
        "device": location.device,
        "region_bytes": None,
        "data_bytes": None,
        "backing": None,
        "fstype": None,
        "fs_options": None,
        "stack": _stack(system, location.device),
        "note": None,
    }
    if location.device is not None:
        facts.update(data_home(system, location.device))
    if not system.live:
        facts["note"] = "not this machine's: its data extents were not read"
        return facts
    if location.kind == "file":
        try:
            info = os.stat(location.path)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                facts["note"] = NOT_LAID_OUT
            else:
                facts["note"] = f"cannot stat it: {exc.strerror}"
            return facts
        span = _span(info.st_size, offset, size)
        facts["region_bytes"] = span
        facts["data_bytes"], facts["note"] = data_extents(location.path, offset, span)
        facts["fstype"], facts["fs_options"] = _mount_of(
            system, devno_text(info.st_dev), os.path.realpath(location.path)
        )
        if facts["fstype"] in MEMORY_FS:
            facts["memory"] = f"{location.path} is on {facts['fstype']}"
        return facts
    if location.kind == "block" and location.device is not None:
        backing = blockdevs.loop_backing_file(system, location.device)
        if backing:
            directory = system.block_dir(location.device)
            sectors = system.read_int(directory / "size") if directory is not None else None
            start = (system.read_int(directory / "loop" / "offset") or 0) if directory is not None else 0
            used = None if sectors is None else _span(sectors * 512, offset, size)
            facts["backing"], facts["region_bytes"] = backing, used
            if used is not None and _is_regular(backing):
                facts["data_bytes"], facts["note"] = data_extents(backing, start + offset, used)
                with contextlib.suppress(OSError):  # the backing file went away meanwhile: no file system
                    with_fs = _mount_of(
                        system, devno_text(os.stat(backing).st_dev), os.path.realpath(backing)
                    )
                    facts["fstype"], facts["fs_options"] = with_fs
            else:
                facts["note"] = f"its backing {backing} is not a regular file: its data extents were not read"
            return facts
        facts["note"] = (
            "the written regions of a block device are not visible: only a run that writes the region "
            "before reading it is known to read data"
        )
    return facts


def _span(total: int, offset: int, size: int | None) -> int:
    """The bytes fio reads of a ``total``-byte target from ``offset``, ``size`` of them (None: to the end)."""
    left = max(0, total - offset)
    return left if size is None else min(size, left)


def _is_regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def collect(
    system: SystemRoot,
    locations: Sequence[TargetLocation],
    cpus: Sequence[int],
    *,
    phase: str,
    regions: Mapping[str, tuple[int, int | None]] | None = None,
) -> dict[str, Any]:
    """The facts of a point's machine before (``phase="before"``) or after (``"after"``) fio ran.

    Parameters
    ----------
    system
        The machine's root: this machine, or a host's :class:`~iobench.system.remote.RemoteRoot`.
    locations
        The point's targets, located.
    cpus
        The CPUs the point's fio processes may use.
    phase
        ``before``: everything in the module's table; ``after``: only what moves
        while fio runs (CPUs' clock and throttle counts, temperatures).
    regions
        Per target path, fio's ``offset`` and ``size`` for it (None: to the end); default the whole target.

    Returns
    -------
    dict
        JSON-able; see the module's table.
    """
    try:
        return _collect(system, locations, cpus, phase, regions)
    except (OSError, IobenchError) as exc:  # a host that stopped answering, a file that went away
        return {"phase": phase, "notes": [f"the facts could not be read: {exc}"]}


def _collect(
    system: SystemRoot,
    locations: Sequence[TargetLocation],
    cpus: Sequence[int],
    phase: str,
    regions: Mapping[str, tuple[int, int | None]] | None,
) -> dict[str, Any]:
    notes: list[str] = []
    disks = list(dict.fromkeys(d for location in locations for d in location.disks))
    facts: dict[str, Any] = {"phase": phase, "cpus": _cpu_facts(system, cpus, notes)}
    facts["sensors"] = _sensor_facts(system, disks, notes if phase == "before" else [])
    if phase == "before":
        devices = [location.device for location in locations if location.device is not None]
        facts["disks"] = _disk_facts(system, list(dict.fromkeys([*devices, *disks])))
        facts["mem_available"] = (procfs.meminfo(system) or {}).get("MemAvailable")
        facts["targets"] = {
            location.path: target_facts(system, location, (regions or {}).get(location.path, (0, None)))
            for location in locations
        }
    facts["counts"] = _counts(system, locations)
    facts["notes"] = notes
    return facts

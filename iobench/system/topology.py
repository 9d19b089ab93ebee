"""Read-only discovery of NUMA nodes, cores and block devices from sysfs.

Everything is read below ``<fsroot>/sys`` through :class:`iobench.system.hostfs.SystemRoot`,
so a snapshot of another machine's sysfs can stand in for the live one
(hwloc's ``HWLOC_FSROOT`` convention).
sysfs files go missing across kernels, architectures and permissions; a file
that cannot be read makes its field ``None`` (or empty) rather than an error.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from iobench.errors import TopologyError
from iobench.system import blockdevs
from iobench.system.cpulist import parse_cpulist
from iobench.system.hostfs import SystemRoot, devno_text
from iobench.system.pcie import PcieFinding, PciePlacement, link_findings, read_placement, shared_root_ports

__all__ = [
    "Core",
    "Device",
    "Node",
    "TargetLocation",
    "Topology",
    "discover_topology",
    "locate_target",
    "path_lookups",
    "per_process_link",
]

TargetKind = Literal["block", "file", "other", "unknown"]
_NUMBERED = re.compile(r"(?:node|cpu)(\d+)")
# brd's ram0..ram15 exist on every old kernel whether or not anyone uses them.
_HIDDEN_DEVICES = re.compile(r"ram\d+")


@dataclass(frozen=True)
class Node:
    """One NUMA node.

    Attributes
    ----------
    id : int
        The kernel's node number (ids may be sparse).
    cpus : tuple of int
        Online CPUs of the node; empty for a memory-only node.
    distances : tuple of int
        The kernel's distance row, indexed like ``Topology.nodes``; empty when
        unreadable or inconsistent with the nodes found.
    """

    id: int
    cpus: tuple[int, ...]
    distances: tuple[int, ...]


@dataclass(frozen=True)
class Core:
    """One physical core: the hardware threads (SMT siblings) that share it.

    Attributes
    ----------
    package : int
        ``physical_package_id`` (-1 where the kernel does not know, e.g. POWER LPARs).
    core_id : int
        ``core_id``; unique only within a package.
    cpus : tuple of int
        Online hardware threads of the core.
    node : int or None
        NUMA node holding the core's CPUs.
    """

    package: int
    core_id: int
    cpus: tuple[int, ...]
    node: int | None


@dataclass(frozen=True)
class Device:
    """A whole block device (partitions are listed under their disk).

    Attributes
    ----------
    name : str
        Kernel name, e.g. ``nvme0n1``, ``sda``, ``dm-0``, ``loop3``.
    numa_node : int or None
        Home node: ``numa_node`` of the nearest device above it in
        sysfs, or its ``local_cpulist`` when that lies inside exactly one node;
        ``None`` when the kernel does not know (-1) or the device is virtual.
    scheduler, schedulers : str or None, tuple of str
        Active I/O scheduler and those offered (``queue/scheduler``).
    readahead_kb : int or None
        ``queue/read_ahead_kb``.
    rotational : bool or None
        ``queue/rotational``.
    model : str or None
        ``device/model``.
    firmware : str or None
        ``device/firmware_rev`` (NVMe), else ``device/rev`` (SCSI, SATA).
    size_bytes : int or None
        Capacity (``size`` is in 512-byte sectors whatever the block size).
    partitions, holders, slaves : tuple of str
        Partition names; devices stacked on it (dm, md); devices under it.
    pcie : PciePlacement or None
        Its PCI function, the bridges up to the root port with each link's
        current and maximum speed and width, and ``link_bw_bytes``, the
        bandwidth of the narrowest link on that way (docs/pcie.md); None for
        a device with no PCI function above it.
    """

    name: str
    numa_node: int | None
    scheduler: str | None
    schedulers: tuple[str, ...]
    readahead_kb: int | None
    rotational: bool | None
    model: str | None
    size_bytes: int | None
    partitions: tuple[str, ...]
    holders: tuple[str, ...]
    slaves: tuple[str, ...]
    firmware: str | None = None
    pcie: PciePlacement | None = None


@dataclass(frozen=True)
class Topology:
    """What sysfs says about a machine's NUMA nodes, cores and block devices.

    Attributes
    ----------
    nodes : tuple of Node
        Sorted by id.
    cores : tuple of Core
        Sorted by their first CPU.
    devices : tuple of Device
        Whole block devices, sorted by name (brd ``ram*`` devices left out).
    fsroot : str
        The root the sysfs tree was read under; ``"/"`` for the live machine.
    """

    nodes: tuple[Node, ...]
    cores: tuple[Core, ...]
    devices: tuple[Device, ...]
    fsroot: str

    def node(self, node_id: int) -> Node | None:
        """Return the node with this id.

        Parameters
        ----------
        node_id : int
            Kernel node number.

        Returns
        -------
        Node or None
            None when the machine has no such node.
        """
        return next((node for node in self.nodes if node.id == node_id), None)

    def device(self, name: str) -> Device | None:
        """Return a whole block device by kernel name.

        Parameters
        ----------
        name : str
            For example ``nvme0n1``; partitions are not devices here (see
            :func:`locate_target` for those).

        Returns
        -------
        Device or None
            None when there is no such whole device.
        """
        return next((dev for dev in self.devices if dev.name == name), None)

    def placements(self) -> dict[str, PciePlacement | None]:
        """Return each whole device's PCIe placement.

        Returns
        -------
        dict of str to PciePlacement or None
            Device name → placement, None for devices without a PCI function.
        """
        return {dev.name: dev.pcie for dev in self.devices}

    def shared_root_ports(self) -> dict[str, tuple[str, ...]]:
        """Return the root ports with more than one block device below them.

        Returns
        -------
        dict of str to tuple of str
            Root port address → device names (see
            :func:`iobench.system.pcie.shared_root_ports`).
        """
        return shared_root_ports(self.placements())

    def pcie_findings(self) -> tuple[PcieFinding, ...]:
        """Return what the PCIe links of every block device call for.

        Returns
        -------
        tuple of PcieFinding
            Degraded and limiting links (``severity`` ``"warning"``) and ports
            below their own maximum that limit nothing (``"note"``); see
            :func:`iobench.system.pcie.link_findings` and docs/pcie.md.
        """
        return tuple(link_findings(self.placements()))

    def online_cpus(self) -> tuple[int, ...]:
        """Return every online CPU of the machine.

        Returns
        -------
        tuple of int
            Sorted CPU numbers.
        """
        cpus = {cpu for node in self.nodes for cpu in node.cpus}
        cpus.update(cpu for core in self.cores for cpu in core.cpus)
        return tuple(sorted(cpus))

    def distance(self, a: int, b: int) -> int | None:
        """Return the kernel's NUMA distance between two nodes.

        Parameters
        ----------
        a, b : int
            Node ids (from ``a`` to ``b``).

        Returns
        -------
        int or None
            10 for a node to itself on most firmware; None when either node
            does not exist or the distance table could not be read.
        """
        index = next((i for i, node in enumerate(self.nodes) if node.id == b), None)
        source = self.node(a)
        if source is None or index is None or index >= len(source.distances):
            return None
        return source.distances[index]

    def to_dict(self) -> dict[str, Any]:
        """Return the topology as plain JSON types.

        Returns
        -------
        dict
            ``nodes``, ``cores`` and ``devices`` in the shape of ``topology --json``, plus
            ``fsroot``, each core's ``node`` and each device's ``partitions``,
            ``holders`` and ``slaves``. Each device carries ``pci_path``
            (root port first, its own function last; empty off PCI),
            ``root_port``, ``link`` (its own function's, speeds in GT/s) and
            ``pcie`` (every hop, ``root_complex``, ``link_bw_bytes``,
            ``max_link_bw_bytes``), null off PCI; ``shared_root_ports`` lists
            root ports above several devices, ``warnings`` and ``notes`` the
            PCIe findings (docs/pcie.md).
        """
        findings = self.pcie_findings()
        return {
            "fsroot": self.fsroot,
            "nodes": [{"id": n.id, "cpus": list(n.cpus), "distances": list(n.distances)} for n in self.nodes],
            "cores": [
                {"package": c.package, "core_id": c.core_id, "cpus": list(c.cpus), "node": c.node}
                for c in self.cores
            ],
            "devices": [_device_dict(d) for d in self.devices],
            "shared_root_ports": [
                {"root_port": port, "devices": list(devices)}
                for port, devices in self.shared_root_ports().items()
            ],
            "warnings": [f.to_dict() for f in findings if f.severity == "warning"],
            "notes": [f.to_dict() for f in findings if f.severity == "note"],
        }


@dataclass(frozen=True)
class TargetLocation:
    """Where a benchmark target's I/O lands.

    Attributes
    ----------
    path : str
        The target as given.
    kind : {"block", "file", "other", "unknown"}
        What the kernel says the path leads to, whatever its spelling: a block
        device node (anywhere, through any symlinks), a regular file or folder
        (or a file still to be created in one), something else (a character
        device, FIFO or socket), or nothing (a missing path under ``/dev``).
    device : str or None
        The block device the target is or lives on (``nvme0n1p2``, ``dm-0``);
        None for tmpfs/overlay and anything else without one.
    disks : tuple of str
        Whole disks carrying the I/O: a partition's disk, a dm/md device's
        member disks (recursively), a file's disk(s).
    home_node : int or None
        NUMA home of those disks when known and, for stacks, agreed on.
    identity : tuple of int
        What the write guard judged: the device number (``st_rdev``) of a
        block device, the file system and inode (``st_dev``, ``st_ino``) of an
        existing file; empty when the path did not exist (a file fio will
        create) or could not be looked at (a snapshot). A run holds each point
        to it: the path must still lead there when fio opens it.
    """

    path: str
    kind: TargetKind
    device: str | None
    disks: tuple[str, ...]
    home_node: int | None
    identity: tuple[int, ...] = ()


def discover_topology(fsroot: str | os.PathLike[str] = "/") -> Topology:
    """Read NUMA nodes, cores and block devices from ``<fsroot>/sys``.

    Parameters
    ----------
    fsroot : str or path-like, default "/"
        Root of the tree to read: ``"/"`` for this machine, or the folder of a
        sysfs snapshot that contains ``sys/``.

    Returns
    -------
    Topology
        When sysfs has no NUMA directory, one node 0 with every online CPU.

    Raises
    ------
    TopologyError
        When ``<fsroot>/sys/devices/system/cpu`` does not exist.
    """
    system = SystemRoot(fsroot)
    cpudir = system.path("sys/devices/system/cpu")
    if not system.is_dir(cpudir):
        raise TopologyError(
            f"{cpudir} does not exist: {os.fspath(fsroot)!r} is not a root with a sysfs tree "
            "(for a snapshot, pass the folder that contains sys/)"
        )
    online = _online_cpus(system, cpudir)
    nodes = _read_nodes(system, system.path("sys/devices/system/node"), online)
    cores = _read_cores(system, cpudir, online, nodes)
    devices = tuple(
        _read_device(system, name, nodes)
        for name in blockdevs.whole_disks(system)
        if not _HIDDEN_DEVICES.fullmatch(name)
    )
    return Topology(nodes=nodes, cores=cores, devices=devices, fsroot=os.fspath(fsroot))


def locate_target(
    path: str, topology: Topology, *, stat: Callable[[str], os.stat_result] | None = None
) -> TargetLocation:
    """Find the block device under a target and the disks that carry its I/O.

    Parameters
    ----------
    path : str
        A block device (``/dev/nvme0n1``, ``/dev/mapper/vg-lv``) or a file,
        which need not exist yet: its nearest existing directory decides.
    topology : Topology
        The machine; its ``fsroot`` says where sysfs is. On the live machine
        (``"/"``) the path is stat'ed. For a snapshot nothing can be stat'ed:
        ``/dev/<name>`` is matched to ``sys/class/block/<name>`` by name and a
        file's device stays unknown.
    stat : callable, optional
        :func:`os.stat` as another host answers it (for a snapshot of that
        host): the path is then looked up as on the live machine.

    Returns
    -------
    TargetLocation
        ``home_node`` is None when the kernel does not know the disks' node,
        when stacked members disagree, or when there is no block device.
    """
    system = SystemRoot(topology.fsroot)
    identity: tuple[int, ...] = ()
    if stat is not None or system.live:
        kind, device, identity = _stat_target(path, system, stat or os.stat)
    else:
        kind, device = _name_target(path, system)
    if device is None:
        return TargetLocation(path=path, kind=kind, device=None, disks=(), home_node=None, identity=identity)
    disks = blockdevs.disks_under(system, device)
    homes = {_home_node(system, system.block_dir(disk), topology.nodes) for disk in disks}
    home = homes.pop() if len(homes) == 1 else None
    return TargetLocation(path=path, kind=kind, device=device, disks=disks, home_node=home, identity=identity)


def _numbered(system: SystemRoot, directory: Path, prefix: str) -> list[tuple[int, Path]]:
    found = []
    for name in system.list_dir(directory):
        match = _NUMBERED.fullmatch(name)
        if match and name.startswith(prefix):
            found.append((int(match.group(1)), directory / name))
    return sorted(found)


# --- CPUs, nodes, cores ------------------------------------------------------


def _online_cpus(system: SystemRoot, cpudir: Path) -> tuple[int, ...]:
    """Online CPUs: ``cpu/online`` if readable, else every CPU not marked offline."""
    present = _numbered(system, cpudir, "cpu")
    offline = {cpu for cpu, path in present if system.read_text(path / "online") == "0"}
    text = system.read_text(cpudir / "online")
    listed: tuple[int, ...] | None = None
    if text is not None:
        try:
            listed = parse_cpulist(text)
        except TopologyError:
            listed = None
    candidates = listed if listed is not None else tuple(cpu for cpu, _ in present)
    return tuple(cpu for cpu in candidates if cpu not in offline)


def _read_nodes(system: SystemRoot, nodedir: Path, online: tuple[int, ...]) -> tuple[Node, ...]:
    found = _numbered(system, nodedir, "node")
    if not found:
        return (Node(id=0, cpus=online, distances=(10,)),)
    online_set = set(online)
    nodes = []
    for node_id, path in found:
        cpus = system.read_cpus(path, "cpulist", "cpumap") or ()
        nodes.append((node_id, tuple(c for c in cpus if c in online_set), _distances(system, path)))
    # The kernel writes one distance per online node in id order; a row of
    # another length cannot be matched to our nodes, so it is dropped.
    return tuple(
        Node(id=node_id, cpus=cpus, distances=row if len(row) == len(nodes) else ())
        for node_id, cpus, row in nodes
    )


def _distances(system: SystemRoot, nodepath: Path) -> tuple[int, ...]:
    text = system.read_text(nodepath / "distance")
    try:
        return tuple(int(word) for word in text.split()) if text else ()
    except ValueError:
        return ()


def _read_cores(
    system: SystemRoot, cpudir: Path, online: tuple[int, ...], nodes: tuple[Node, ...]
) -> tuple[Core, ...]:
    """Group online CPUs into physical cores.

    ``thread_siblings`` is the kernel's own statement of which threads share a
    core, so it decides; ``(package, core_id)`` is only the fallback because
    core ids repeat across packages (and across dies on newer CPUs).
    """
    online_set = set(online)
    node_of = {cpu: node.id for node in nodes for cpu in node.cpus}
    groups: dict[tuple[int, ...] | tuple[str, int, int], list[int]] = {}
    ids: dict[int, tuple[int, int]] = {}
    for cpu in online:
        topo = cpudir / f"cpu{cpu}" / "topology"
        if not system.is_dir(topo):
            continue
        package = system.read_int(topo / "physical_package_id")
        core_id = system.read_int(topo / "core_id")
        ids[cpu] = (package if package is not None else -1, core_id if core_id is not None else cpu)
        siblings = system.read_cpus(topo, "thread_siblings_list", "thread_siblings")
        key: tuple[int, ...] | tuple[str, int, int]
        if siblings and cpu in siblings:
            key = tuple(c for c in siblings if c in online_set)
        else:
            key = ("id", *ids[cpu])
        groups.setdefault(key, []).append(cpu)
    cores = []
    for members in groups.values():
        cpus = tuple(sorted(members))
        package, core_id = ids[cpus[0]]
        cores.append(Core(package=package, core_id=core_id, cpus=cpus, node=node_of.get(cpus[0])))
    return tuple(sorted(cores, key=lambda core: core.cpus[0]))


# --- block devices -----------------------------------------------------------


def _read_device(system: SystemRoot, name: str, nodes: tuple[Node, ...]) -> Device:
    path = system.block_dir(name)
    if path is None:  # a dangling link in class/block: listed, nothing to read
        return Device(name, None, None, (), None, None, None, None, (), (), ())
    scheduler, schedulers = parse_scheduler(system.read_text(path / "queue" / "scheduler"))
    rotational = system.read_text(path / "queue" / "rotational")
    sectors = system.read_int(path / "size")
    return Device(
        name=name,
        numa_node=_home_node(system, path, nodes),
        scheduler=scheduler,
        schedulers=schedulers,
        readahead_kb=system.read_int(path / "queue" / "read_ahead_kb"),
        rotational={"0": False, "1": True}.get(rotational or ""),
        model=system.read_text(path / "device" / "model") or None,
        size_bytes=sectors * 512 if sectors is not None else None,
        partitions=blockdevs.partitions(system, name),
        holders=blockdevs.holders(system, name),
        slaves=blockdevs.slaves(system, name),
        firmware=system.read_text(path / "device" / "firmware_rev")
        or system.read_text(path / "device" / "rev")
        or None,
        pcie=read_placement(system, path),
    )


def parse_scheduler(text: str | None) -> tuple[str | None, tuple[str, ...]]:
    """Split ``queue/scheduler`` (``"none [mq-deadline] kyber"``) into the active one and all offered."""
    if not text:
        return None, ()
    words = text.split()
    offered = tuple(word.strip("[]") for word in words)
    active = [word.strip("[]") for word in words if word.startswith("[")]
    if active:
        return active[0], offered
    # Some kernels print a lone "none" without brackets when nothing else is offered.
    return (offered[0] if len(offered) == 1 else None), offered


def _home_node(system: SystemRoot, devpath: Path | None, nodes: tuple[Node, ...]) -> int | None:
    """Walk up from a block device to the first ancestor that states its NUMA node."""
    if devpath is None:
        return None
    top = system.realpath("sys/devices")
    current = devpath
    while current != top and top in current.parents:
        node = system.read_int(current / "numa_node")
        if node is not None:
            if node >= 0:
                return node
            return _node_of_cpus(system.read_cpus(current, "local_cpulist", "local_cpus"), nodes)
        current = current.parent
    return None


def _node_of_cpus(cpus: tuple[int, ...] | None, nodes: tuple[Node, ...]) -> int | None:
    """The one node whose CPUs include every online CPU in ``cpus``, if exactly one does."""
    if not cpus:
        return None
    online = {cpu for node in nodes for cpu in node.cpus}
    wanted = set(cpus) & online
    owners = [node.id for node in nodes if wanted and wanted <= set(node.cpus)]
    return owners[0] if len(owners) == 1 else None


def _device_dict(device: Device) -> dict[str, Any]:
    return {
        "name": device.name,
        "numa_node": device.numa_node,
        "scheduler": device.scheduler,
        "schedulers": list(device.schedulers),
        "readahead_kb": device.readahead_kb,
        "rotational": device.rotational,
        "model": device.model,
        "firmware": device.firmware,
        "size_bytes": device.size_bytes,
        "partitions": list(device.partitions),
        "holders": list(device.holders),
        "slaves": list(device.slaves),
        "pci_path": list(device.pcie.path) if device.pcie else [],
        "root_port": device.pcie.root_port if device.pcie else None,
        "link": device.pcie.link.to_dict() if device.pcie else None,
        "pcie": device.pcie.to_dict() if device.pcie else None,
    }


# --- targets -----------------------------------------------------------------


def _stat_target(
    path: str, system: SystemRoot, stat_of: Callable[[str], os.stat_result]
) -> tuple[TargetKind, str | None, tuple[int, ...]]:
    """The target judged by the inode the kernel resolves it to, never by how it is spelled.

    ``stat`` follows every symlink (``/dev/disk/by-id/…``, ``/proc/self/root/…``),
    so a block device node anywhere (made with mknod outside ``/dev``, bind
    mounted over a file) is a block device here; this is the one place that
    decides it. Returns the kind, the device and the identity judged
    (:attr:`TargetLocation.identity`).
    """
    existing = Path(path)
    try:
        info = stat_of(str(existing))
    except OSError:
        info = None
    if info is not None and stat.S_ISBLK(info.st_mode):
        return "block", blockdevs.block_name(system, devno_text(info.st_rdev)), (info.st_rdev,)
    if info is not None and not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        return "other", None, ()
    identity = (info.st_dev, info.st_ino) if info is not None else ()
    while info is None:
        existing = existing.parent.absolute()
        try:
            info = stat_of(str(existing))
        except OSError:
            if existing == existing.parent:
                return "unknown", None, ()
    if _on_devtmpfs(info, stat_of):
        # /dev/sdz that does not exist is a missing device, not a file to create.
        return "unknown", None, ()
    if os.major(info.st_dev) == 0:
        return "file", None, identity
    return "file", blockdevs.block_name(system, devno_text(info.st_dev)), identity


def _on_devtmpfs(info: os.stat_result, stat_of: Callable[[str], os.stat_result]) -> bool:
    """Whether a folder lies on the file system of ``/dev`` (by device number: any spelling of it)."""
    try:
        dev = stat_of("/dev")
    except OSError:
        return False
    return info.st_dev == dev.st_dev


def _name_target(path: str, system: SystemRoot) -> tuple[TargetKind, str | None]:
    parts = Path(path).parts
    if parts[:2] != ("/", "dev"):
        return "file", None
    # A snapshot's dev/ may hold symlinks such as disk/by-id/x -> ../../sda1.
    name = system.realpath(path.lstrip("/")).name
    if len(parts) == 4 and parts[2] == "mapper":
        name = blockdevs.dm_device(system, parts[3]) or name
    if system.block_dir(name) is not None:
        return "block", name
    return "unknown", None


def path_lookups(path: str) -> Iterator[tuple[Path, str]]:
    """Each folder the kernel looks a name up in while resolving ``path``, with that name.

    The path is resolved a component at a time as the kernel does (``lstat``
    and ``readlink``, ``..`` on the folder reached so far): every folder
    yielded is a real folder, never a link, and a link's own folder is
    yielded before the folders its text leads through. The walk ends after a
    name that does not exist (nothing lies beyond it) and after 40 links (the
    kernel's own limit: an open would fail with ELOOP).
    """
    pending = list(Path(os.path.abspath(path)).parts[1:])
    current = Path("/")
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        yield current, part
        candidate = current / part
        try:
            info = os.lstat(candidate)
        except OSError:
            return
        if not stat.S_ISLNK(info.st_mode):
            current = candidate
            continue
        hops += 1
        if hops > 40:
            return
        try:
            text = str(candidate.readlink())
        except OSError:
            return
        if text.startswith("/"):
            current = Path("/")
        pending = [p for p in Path(text).parts if p != "/"] + pending


def per_process_link(path: str) -> str | None:
    """The place in ``/proc`` on the way to ``path`` that each process reads as its own, or None.

    ``/proc/self/cwd``, ``/proc/self/fd/3``, ``/dev/fd/3`` and ``/dev/stdout``
    (links to ``/proc/self/fd``), or a link to any of them, lead in iobench to
    iobench's working folder and descriptors and in fio, which opens the path
    in its own process, to fio's: the write guard cannot judge what fio will
    open. Along :func:`path_lookups`, the first name looked up in a process's
    folder (``/proc/<pid>`` or ``/proc/<pid>/task/<tid>``) other than
    ``root``, which is one and the same for every process here, is returned.
    """
    for folder, part in path_lookups(path):
        if _process_folder(folder) and part != "root":
            return str(folder / part)
    return None


def _process_folder(folder: Path) -> bool:
    """``/proc/<pid>`` or ``/proc/<pid>/task/<tid>``."""
    parts = folder.parts
    return (len(parts) == 3 and parts[1] == "proc" and parts[2].isdigit()) or (
        len(parts) == 5
        and parts[1] == "proc"
        and parts[2].isdigit()
        and parts[3] == "task"
        and parts[4].isdigit()
    )

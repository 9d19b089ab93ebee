"""Which targets a matrix may touch (docs/guard.md). Refusals change nothing.

The rules: every folder on a target's way belongs to root or the run's user
and no one else may write it (:func:`open_folder`). Consent comes from the
command line only: a block device, and an existing file iobench did not
create, is written only when ``--allow-write`` names it; a matrix's
``allow_write`` grants nothing. A block device is never written when it or
anything beneath it (dm and md members, a loop device's backing device or
file) is mounted, swap, held by LVM/md/dm or under ``/``; a signature
beneath it (what libblkid recognises: a filesystem, RAID/LVM/bcache member,
crypto header, partition table, …) needs ``--allow-write`` for the device
that holds it, unless the device above shows it whole. Files iobench
created are remembered by an identity no later file shares (:func:`fd_identity`).

Devices are compared by device number, so any spelling (``/dev/mapper/…``,
``/dev/disk/by-id/…``, another node) counts as the same device. As a last
check the device is opened with ``O_EXCL``, which the kernel refuses with
EBUSY for any device it has claimed — mounted, swap, or a member of a RAID,
LVM or btrfs volume — even when sysfs and procfs do not show why.

Signatures are libblkid's, the library every Linux distribution uses to
recognise what a device holds, through util-linux's tools (see
:func:`probe_signatures`). Everything is read-only: the tools open devices
with ``O_RDONLY`` and ``wipefs`` runs with ``--no-act`` besides.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from iobench.errors import SafetyError
from iobench.system import blockdevs, created, surroundings
from iobench.system.hostfs import SystemRoot, block_node_devno, devno_text
from iobench.system.process import CommandNotFound, Completed, minimal_env, run_process
from iobench.system.topology import TargetLocation, per_process_link


def created_by_iobench(path: str, machine: Machine | None = None) -> bool:
    """Whether ``path`` is a file an earlier iobench run created on ``machine`` (default: here).

    The same file: the registry's identity (:func:`fd_identity`), which a file
    made later cannot share, not merely its name or inode number.
    """
    machine = machine or LOCAL
    identity = machine.file_identity(path)
    return identity is not None and created.registry().get(machine.registry_key(path)) == identity


def remember_created(paths: Iterable[str], machine: Machine | None = None) -> None:
    """Record files iobench just created (on ``machine``, default here), so later runs may write them again.

    Raises
    ------
    SafetyError
        When the registry lies where another user could write it (nothing recorded).
    """
    machine = machine or LOCAL
    found = {machine.registry_key(p): i for p in paths for i in [machine.file_identity(p)] if i is not None}
    created.record(found)


# --- the machine the targets are on ------------------------------------------------


@dataclass(frozen=True)
class FileInfo:
    """A file target as its machine sees it (for the rules on files)."""

    exists: bool
    is_dir: bool
    parent: str
    parent_is_dir: bool
    size: int | None


class Machine:
    """What the guard asks of the machine that holds the targets: this one.

    Everything the rules need beyond sysfs and procfs (which a
    :class:`~iobench.system.hostfs.SystemRoot` reads) goes through these
    methods: device numbers of nodes, ``/``, exclusive opens, the libblkid
    tools, file facts. :class:`iobench.system.fleet.RemoteMachine` answers
    them for another host over SSH, so the same rules guard remote targets.
    """

    #: Put before each refusal (``host a: ``); empty here.
    prefix = ""

    def devno(self, path: str) -> str | None:
        """``major:minor`` of a block device node, or None (see :func:`~iobench.system.hostfs.block_node_devno`)."""
        return block_node_devno(path)

    def realpath(self, path: str) -> str:
        """``path`` with its symlinks resolved."""
        return os.path.realpath(path)

    def root_devno(self) -> str | None:
        """The device number ``/`` lies on."""
        try:
            return devno_text(os.stat("/").st_dev)
        except OSError:
            return None

    def claimed(self, node: str) -> bool:
        """Whether the kernel holds the device exclusively (see :func:`_claimed`)."""
        return _claimed(node)

    def run_tool(self, tool: str, args: list[str], timeout: float) -> Completed:
        """Run one of util-linux's probes (``wipefs``, ``blkid``).

        Raises
        ------
        ProbeError
            When it is missing or does not finish.
        """
        return _run_tool(tool, args, timeout)

    def check_readable(self, device: str) -> None:
        """Read the device's first and last blocks (see :func:`_check_readable`)."""
        _check_readable(device)

    def file_info(self, path: str) -> FileInfo:
        """A file target's facts."""
        target = Path(path)
        try:
            size: int | None = target.stat().st_size
        except OSError:
            size = None
        return FileInfo(target.exists(), target.is_dir(), str(target.parent), target.parent.is_dir(), size)

    def per_process_link(self, path: str) -> str | None:
        """Where ``path`` goes through a ``/proc`` link each process reads as its own (see :func:`~iobench.system.topology.per_process_link`)."""
        return per_process_link(path)

    def open_folder(self, path: str, protected_symlinks: bool) -> str | None:
        """Why a user other than root and this one could change what ``path`` leads to, or None (see :func:`~iobench.system.surroundings.open_folder`)."""
        return surroundings.open_folder(path, protected_symlinks)

    def file_identity(self, path: str) -> str | None:
        """What tells the file from any made later (see :func:`~iobench.system.created.fd_identity`), or None."""
        return created.file_identity(path)

    def registry_key(self, path: str) -> str:
        """How the created-files registry names the file."""
        return path


LOCAL = Machine()


# --- what the kernel is using -------------------------------------------------


def _swap_devnos(system: SystemRoot, machine: Machine) -> set[str]:
    return {machine.devno(name) or name for name in blockdevs.swaps(system)}


def _stack_and_disks(system: SystemRoot, name: str) -> set[str]:
    """``name``, every device under it (dm/md members, recursively) and the disk of each partition among them."""
    return {
        n
        for device in blockdevs.devices_below(system, name)
        for n in (device, blockdevs.whole_disk(system, device))
    }


def root_disks(system: SystemRoot, machine: Machine | None = None) -> set[str]:
    """Every device under ``/``: its device, that device's disk and, for dm/md, their members.

    ``machine`` answers for another host (its ``/``); ``system`` is then that host's sysfs.
    """
    machine = machine or LOCAL
    root_mounts = [m for m in blockdevs.mounts(system) if m.point == "/"]
    devnos = {m.devno for m in root_mounts}
    root = machine.root_devno()
    if root is not None:
        devnos.add(root)
    # btrfs and friends report an anonymous 0:N; the mount source names the device.
    devnos |= {d for m in root_mounts for d in [machine.devno(m.source)] if d}
    names = {n for devno in devnos for n in [blockdevs.block_name(system, devno)] if n}
    return {disk for name in names for disk in _stack_and_disks(system, name)}


def _in_use(system: SystemRoot, name: str, mounted: set[str], swaps: set[str]) -> str | None:
    devno = blockdevs.block_devno(system, name)
    if devno is not None and devno in mounted:
        return f"{name} is mounted"
    if devno is not None and devno in swaps:
        return f"{name} is in use as swap"
    holders = blockdevs.holders(system, name)
    if holders:
        return f"{name} is held by {', '.join(holders)} (LVM, md or device-mapper)"
    return None


def _claimed(node: str) -> bool:
    """Whether the kernel holds ``node`` exclusively: O_EXCL on a block device fails with EBUSY then.

    This catches users the sysfs and procfs checks cannot see, such as the
    extra devices of a multi-device btrfs.
    """
    try:
        fd = os.open(node, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC)
    except OSError as exc:
        return exc.errno == errno.EBUSY
    os.close(fd)
    return False


def device_refusal(
    location: TargetLocation,
    *,
    sysfs: str | os.PathLike[str] = "/sys",
    proc: str | os.PathLike[str] = "/proc",
) -> str | None:
    """Why a block device must never be written, or None (the guard's first rule).

    Refused: the device or one of its partitions mounted, used as swap or held
    by LVM/md/dm; the device on, or a member of the device under, ``/``; a
    device the kernel holds exclusively for any other reason.

    Parameters
    ----------
    location
        From :func:`iobench.system.topology.locate_target`; symlinks (``/dev/mapper``,
        ``/dev/disk/by-id``) are already resolved to the device there.
    sysfs, proc
        Where sysfs and procfs are; fake trees in tests.
    """
    return _device_refusal(location, SystemRoot(sysfs=sysfs, procfs=proc), LOCAL)


def _device_refusal(location: TargetLocation, system: SystemRoot, machine: Machine) -> str | None:
    node = machine.realpath(location.path)
    name = location.device or Path(node).name
    mounts = blockdevs.mounts(system)
    sources = {m.source for m in mounts if m.source.startswith("/")}
    mounted = {m.devno for m in mounts} | {d for source in sources for d in [machine.devno(source)] if d}
    swaps = _swap_devnos(system, machine)
    for device in (name, *blockdevs.partitions(system, name)):
        reason = _in_use(system, device, mounted, swaps)
        if reason:
            return reason
    beneath = _beneath(system, name, machine)
    for lower in beneath:
        reason = _lower_in_use(lower, system, machine, mounted, swaps)
        if reason:
            return f"{name} writes onto {lower.node or lower.name} ({lower.how}), and {reason}"
    root = root_disks(system, machine)
    lower_names = {lower.name for lower in beneath if lower.name}
    if (set(location.disks) | {d for n in (name, *lower_names) for d in _stack_and_disks(system, n)}) & root:
        return f"{name} holds the root filesystem"
    if machine.claimed(node):
        return f"{name} is in use by the kernel (mounted, swap, or part of a RAID, LVM or btrfs volume)"
    return None


@dataclass(frozen=True)
class Beneath:
    """A device or file a block device's writes land on, below it.

    Attributes
    ----------
    node : str
        Its path: the ``/dev`` node of a device (empty when it has none), the
        backing file of a loop device; what ``--allow-write`` names to consent to it.
    name : str or None
        The kernel's name of a device; None for a file.
    how : str
        How the device above reaches it (``member of dm-0``, ``backing of
        loop3 at byte offset 1048576``).
    whole : bool
        Whether the device above shows all of it, byte for byte (a loop at
        offset 0 with no size limit): what is on it is then seen, and
        consented to, through the device above.
    slave : bool
        A dm or md member, which the device above holds (claims) by design.
    """

    node: str
    name: str | None
    how: str
    whole: bool
    slave: bool


def _beneath(system: SystemRoot, name: str, machine: Machine) -> list[Beneath]:
    """Everything under block device ``name``: dm and md members, loop devices' backing devices and files, recursively."""
    found: list[Beneath] = []
    seen = {name}
    todo = [name]
    while todo:
        current = todo.pop(0)
        below: list[Beneath] = [
            Beneath(_node_of(system, member, machine) or "", member, f"member of {current}", False, True)
            for member in blockdevs.slaves(system, current)
        ]
        backing = blockdevs.loop_backing_file(system, current)
        if backing:
            window = blockdevs.loop_window(system, current)
            whole = window == (0, 0)
            where = (
                "an offset sysfs does not show"
                if window is None
                else f"byte offset {window[0]}" + (f", {window[1]} bytes" if window[1] else "")
            )
            devno = machine.devno(backing)
            lower = blockdevs.block_name(system, devno) if devno else None
            below.append(Beneath(backing, lower, f"backing of {current} at {where}", whole, False))
        for lower_one in below:
            key = lower_one.name or lower_one.node
            if key in seen:
                continue
            seen.add(key)
            found.append(lower_one)
            if lower_one.name:
                todo.append(lower_one.name)
    return found


def _lower_in_use(
    lower: Beneath, system: SystemRoot, machine: Machine, mounted: set[str], swaps: set[str]
) -> str | None:
    """Why what lies beneath a target must never be written through it, or None."""
    if lower.name is None:
        if lower.node.endswith(" (deleted)"):
            return "that file is deleted"
        real = machine.realpath(lower.node)
        if any(machine.realpath(area) == real for area in blockdevs.swaps(system)):
            return "that file is in use as swap"
        return None
    for device in (lower.name, *blockdevs.partitions(system, lower.name)):
        devno = blockdevs.block_devno(system, device)
        if devno is not None and devno in mounted:
            return f"{device} is mounted"
        if devno is not None and devno in swaps:
            return f"{device} is in use as swap"
    if not lower.slave and lower.node and machine.claimed(lower.node):
        return f"{lower.name} is in use by the kernel (mounted, swap, or part of a RAID, LVM or btrfs volume)"
    return None


# --- what libblkid finds ------------------------------------------------------

WIPEFS = "wipefs"
BLKID = "blkid"
PROBE_TIMEOUT_S = 30.0
_SBIN = "/usr/sbin:/sbin"  # where both live; not on most users' PATH
_INSTALL = "apt-get install util-linux"


class ProbeError(SafetyError):
    """libblkid's tools are missing, timed out or failed: what a device holds is unknown."""


@dataclass(frozen=True)
class Signature:
    """One signature libblkid recognises on a device.

    Attributes
    ----------
    device : str
        The node that was probed (``/dev/loop3``).
    key : {"TYPE", "PTTYPE"}
        libblkid's name for what was found: a superblock (filesystem, RAID or
        LVM member, crypto header, swap, bcache, …) or a partition table.
    kind : str
        libblkid's type: ``ext4``, ``crypto_LUKS``, ``LVM2_member``, ``gpt``, ``PMBR``, ….
    usage : str
        ``filesystem``, ``raid``, ``crypto``, ``other`` or ``partition-table``;
        empty when libblkid does not say.
    offset : int or None
        Byte offset of the magic string on ``device``; None when only
        ``blkid -p``, which reports no offsets, saw it.
    """

    device: str
    key: Literal["TYPE", "PTTYPE"]
    kind: str
    usage: str
    offset: int | None


def _run_tool(tool: str, args: list[str], timeout: float) -> Completed:
    name = Path(tool).name
    search = os.pathsep.join(p for p in (os.environ.get("PATH"), _SBIN) if p)
    path = shutil.which(tool, path=search)
    if path is None:
        raise ProbeError(f"{name} is not installed ({_INSTALL})")
    try:
        done = run_process([path, *args], timeout=timeout, env=minimal_env({"LC_ALL": "C"}))
    except CommandNotFound as exc:
        raise ProbeError(f"{exc} ({_INSTALL})") from None
    if done.timed_out:
        raise ProbeError(f"{name} did not finish within {timeout:g} s")
    return done


def _failed(done: Completed) -> ProbeError:
    lines = done.stderr.strip().splitlines()
    why = lines[-1] if lines else "no message"
    return ProbeError(f"{Path(done.argv[0]).name} failed on {done.argv[-1]} (exit {done.returncode}): {why}")


def _wipefs(node: str, timeout: float, machine: Machine) -> list[Signature]:
    """Every signature with a magic string, at every offset, via ``wipefs --no-act``."""
    done = machine.run_tool(WIPEFS, ["--no-act", "--json", "--output", "OFFSET,TYPE,USAGE", node], timeout)
    if done.returncode != 0:
        raise _failed(done)
    try:
        rows = json.loads(done.stdout)["signatures"]
        return [
            Signature(
                node,
                "PTTYPE" if row.get("usage") == "partition-table" else "TYPE",
                str(row["type"]),
                str(row.get("usage") or ""),
                int(str(row["offset"]), 0),
            )
            for row in rows
        ]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ProbeError(
            f"wipefs printed what iobench cannot read for {node}: {done.stdout[:200]!r}"
        ) from None


def _blkid(node: str, timeout: float, machine: Machine) -> tuple[list[Signature], bool]:
    """TYPE and PTTYPE from ``blkid -p``, and whether it gave up on several superblocks (exit 8)."""
    done = machine.run_tool(BLKID, ["--probe", "--output", "export", node], timeout)
    # Exit 2 is both "nothing found" and "cannot open"; only the latter says so on stderr.
    if done.returncode == 2 and not done.stderr.strip():
        return [], False
    if done.returncode == 8:
        return [], True
    if done.returncode != 0:
        raise _failed(done)
    values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    found = []
    if values.get("TYPE"):
        found.append(Signature(node, "TYPE", values["TYPE"], values.get("USAGE", ""), None))
    if values.get("PTTYPE"):
        found.append(Signature(node, "PTTYPE", values["PTTYPE"], "partition-table", None))
    return found, False


def _check_readable(device: str) -> None:
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
            for offset in sorted({0, max(size - 4096, 0)}):
                os.pread(fd, 4096, offset)
        finally:
            os.close(fd)
    except OSError as exc:
        raise ProbeError(f"{device} cannot be read: {exc.strerror}") from None


def probe_signatures(
    device: str, *, timeout: float | None = None, machine: Machine | None = None
) -> tuple[Signature, ...]:
    """Every signature libblkid recognises on ``device``, with its byte offset.

    Two util-linux tools, both libblkid, both opening the device read-only:

    ``wipefs --no-act --json`` is the primary source. It lists every signature
    with the offset of its magic string: all superblocks when several coexist
    (a hybrid ISO's iso9660 and dos table, the three magics of a FAT boot
    sector), backup copies (GPT's header at the end, LUKS2's second header,
    NILFS2's backup superblock) and superblocks whose checksum fails.

    ``blkid -p`` (``--probe``) is the cross-check: the TYPE and PTTYPE udev
    and mount would see, including from a prober that records no magic
    offset, which wipefs leaves out of its list. It cannot be the primary
    source: it reports no offsets and gives up (exit 8) when several
    superblocks coexist.

    Both tools report a read error as "nothing found", so the device's first
    and last blocks are read here first.

    Parameters
    ----------
    device
        A block device node (or an image file).
    timeout
        Seconds each tool may take; :data:`PROBE_TIMEOUT_S` when None.
    machine
        The machine holding the device (default: this one).

    Returns
    -------
    tuple of Signature
        wipefs's findings in its order, then any TYPE or PTTYPE only blkid saw;
        empty for a blank device.

    Raises
    ------
    ProbeError
        When the device cannot be read, or a tool is missing, times out or
        fails: what the device holds is then unknown.
    """
    seconds = PROBE_TIMEOUT_S if timeout is None else timeout
    machine = machine or LOCAL
    machine.check_readable(device)
    found = _wipefs(device, seconds, machine)
    extra, ambivalent = _blkid(device, seconds, machine)
    found += [s for s in extra if not any((f.key, f.kind) == (s.key, s.kind) for f in found)]
    if ambivalent and not any(f.key == "TYPE" for f in found):
        found.append(Signature(device, "TYPE", "several superblocks", "", None))
    return tuple(found)


def _describe(found: Iterable[Signature], node: str) -> str:
    """``TYPE=vfat (filesystem) at byte offsets 0 (0x0), 54 (0x36) and PTTYPE=… on /dev/…``."""
    groups: dict[tuple[str, str, str, str], list[int | None]] = {}
    for sig in found:
        groups.setdefault((sig.device, sig.key, sig.kind, sig.usage), []).append(sig.offset)
    parts = []
    for (device, key, kind, usage), offsets in groups.items():
        text = f"{key}={kind}" + (f" ({usage.replace('-', ' ')})" if usage else "")
        known = sorted(o for o in offsets if o is not None)
        if known:
            plural = "s" if len(known) > 1 else ""
            text += f" at byte offset{plural} " + ", ".join(f"{o} (0x{o:x})" for o in known)
        else:
            text += " (seen by blkid -p only, which reports no offset)"
        parts.append(text if device == node else f"{text} on {device}")
    return " and ".join(parts)


def _node_of(system: SystemRoot, name: str, machine: Machine) -> str | None:
    """The /dev node of a block device, checked by device number."""
    devno = blockdevs.block_devno(system, name)
    for candidate in (f"/dev/{name}", f"/dev/block/{devno}"):
        if devno is not None and machine.devno(candidate) == devno:
            return candidate
    return None


def _probe_all(nodes: Iterable[str], machine: Machine) -> list[Signature]:
    """Every signature on each of ``nodes``.

    Raises
    ------
    ProbeError
        For the first that cannot be probed.
    """
    return [sig for node in nodes for sig in probe_signatures(node, machine=machine)]


def _with_partitions(system: SystemRoot, name: str, node: str, machine: Machine) -> list[str]:
    """``node`` (device ``name``) and the ``/dev`` node of each of its partitions.

    Raises
    ------
    ProbeError
        When a partition has no node to probe.
    """
    nodes = [node]
    for part in blockdevs.partitions(system, name):
        found = _node_of(system, part, machine)
        if found is None:
            raise ProbeError(f"{part} has no node in /dev to probe")
        nodes.append(found)
    return nodes


def _unconsented(target: Target, location: TargetLocation, system: SystemRoot, machine: Machine) -> str:
    """The refusal of a device the command line did not name: what it and everything under it holds."""
    node = machine.realpath(target.path)
    name = location.device or Path(node).name
    fix = f"pass --allow-write {target.path} on the command line"
    try:
        nodes = _with_partitions(system, name, node, machine)
        for lower in _beneath(system, name, machine):
            if lower.whole:
                continue  # the same bytes as the device above, probed there
            if lower.name is None:
                nodes.append(lower.node)
            elif lower.node:
                nodes += _with_partitions(system, lower.name, lower.node, machine)
            else:
                raise ProbeError(f"{lower.name} has no node in /dev to probe")
        found = _probe_all(nodes, machine)
    except ProbeError as exc:
        return (
            f"target {target.path}: what it holds is unknown, so it is not written: {exc}; "
            f"{fix} if whatever it holds may be destroyed"
        )
    if found:
        return f"target {target.path} holds {_describe(found, node)}; if it may be destroyed, {fix}"
    return (
        f"target {target.path} is a block device and the matrix writes to it; {fix} if its data may be "
        "destroyed (a matrix's allow_write never suffices)"
    )


def _lower_refusal(
    target: Target, lower: Beneath, allow_write: tuple[str, ...], system: SystemRoot, machine: Machine
) -> str | None:
    """Why a device consented to may still not be written: something beneath it holds data no one consented to."""
    if lower.whole or (lower.node and _consented(lower.node, allow_write, machine)):
        return None
    fix = f"pass --allow-write {lower.node} as well"
    try:
        if lower.name is None:
            nodes = [lower.node]
        elif lower.node:
            nodes = _with_partitions(system, lower.name, lower.node, machine)
        else:
            raise ProbeError(f"{lower.name} has no node in /dev to probe")
        found = _probe_all(nodes, machine)
    except ProbeError as exc:
        return (
            f"target {target.path} writes onto {lower.node} ({lower.how}), and what that holds is unknown: "
            f"{exc}; {fix} if whatever it holds may be destroyed"
        )
    if found:
        return (
            f"target {target.path} writes onto {lower.node} ({lower.how}), which holds "
            f"{_describe(found, lower.node)}; --allow-write {target.path} does not cover it: "
            f"if it may be destroyed, {fix}"
        )
    return None


def _consented(path: str, allow_write: Iterable[str], machine: Machine) -> bool:
    """Whether ``--allow-write`` names ``path``: the same file (its resolved path) or the same device (its number)."""
    real, devno = machine.realpath(path), machine.devno(path)
    for other in allow_write:
        if machine.realpath(other) == real or (devno is not None and machine.devno(other) == devno):
            return True
    return False


def _check_block(
    target: Target,
    location: TargetLocation,
    allow_write: tuple[str, ...],
    system: SystemRoot,
    machine: Machine,
) -> str | None:
    refusal = _device_refusal(location, system, machine)
    if refusal:
        return f"target {target.path}: {refusal}; iobench never writes to it"
    if not _consented(target.path, allow_write, machine):
        return _unconsented(target, location, system, machine)
    # Named on the command line: whatever it holds may go; what lies beneath it is another matter.
    name = location.device or Path(machine.realpath(target.path)).name
    for lower in _beneath(system, name, machine):
        refusal = _lower_refusal(target, lower, allow_write, system, machine)
        if refusal:
            return refusal
    return None


def _check_file(target: Target, writes: bool, allow_write: tuple[str, ...], machine: Machine) -> str | None:
    info = machine.file_info(target.path)
    if not info.exists:
        if not info.parent_is_dir:
            return f"target {target.path}: directory {info.parent} does not exist"
        if target.size is None:
            return f"target {target.path} does not exist yet; give it a `size:` so fio can create it"
        return None
    if info.is_dir:
        return f"target {target.path} is a directory; name a file or a block device"
    if _consented(target.path, allow_write, machine) or created_by_iobench(target.path, machine):
        return None
    if writes:
        return (
            f"target {target.path} exists and iobench did not create it; "
            f"{_allow_fix(target)} if it may be overwritten (a matrix's allow_write never suffices)"
        )
    if target.size is not None and info.size is not None and target.size > info.size:
        size_from = "the matrix's first target" if target.from_command_line else "the target"
        return (
            f"target {target.path} is smaller than size {target.size}: fio would extend it; "
            f"drop `size:` from {size_from}, or {_allow_fix(target)}"
        )
    return None


def _allow_fix(target: Target) -> str:
    """How the user allows ``target`` to be written: on the command line, always."""
    return f"pass --allow-write {target.path} on the command line"


def foreign_files(
    targets: Iterable[Target],
    locations: dict[str, TargetLocation],
    machine: Machine | None = None,
    allow_write: tuple[str, ...] = (),
) -> frozenset[str]:
    """The targets that are existing files iobench may not write: not created by it, not named by ``--allow-write``.

    Read points open these read-only (fio ``--readonly``), so that no ``size``,
    ``offset`` or ``filesize`` makes fio lay them out or extend them.
    """
    machine = machine or LOCAL
    found = set()
    for target in targets:
        if locations[target.path].kind != "file" or _consented(target.path, allow_write, machine):
            continue
        if machine.file_info(target.path).exists and not created_by_iobench(target.path, machine):
            found.add(target.path)
    return frozenset(found)


class Target(Protocol):
    """What the guard needs to know of a target (the matrix's targets are these)."""

    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int | None: ...
    @property
    def where(self) -> str: ...
    @property
    def from_command_line(self) -> bool: ...


def check_targets(
    targets: Iterable[Target],
    locations: dict[str, TargetLocation],
    *,
    writes: bool,
    allow_write: tuple[str, ...] = (),
    sysfs: str | os.PathLike[str] = "/sys",
    proc: str | os.PathLike[str] = "/proc",
    system: SystemRoot | None = None,
    machine: Machine | None = None,
) -> None:
    """Refuse, with every reason at once, targets the matrix must not touch.

    Parameters
    ----------
    targets
        The matrix's targets (path, size, where given).
    locations
        Each target's :class:`~iobench.system.topology.TargetLocation`, by target path.
    writes
        Whether any point writes or trims.
    allow_write
        Devices and files named with ``--allow-write``, the only consent: a
        device named is written whatever libblkid finds on it, and even when
        it cannot look (:class:`ProbeError`), though not what lies beneath it
        unless that is named too. Any spelling counts (a device by its number,
        a file by its resolved path).
    sysfs, proc
        Where sysfs and procfs are; fake trees in tests.
    system, machine
        Another host's sysfs and procfs (a snapshot of them) and the
        :class:`Machine` that answers for it; they replace ``sysfs`` and ``proc``.

    Raises
    ------
    SafetyError
        Naming each target and what to do about it.
    """
    system = system if system is not None else SystemRoot(sysfs=sysfs, procfs=proc)
    machine = machine or LOCAL
    problems: list[str] = []
    protected = system.read_text("proc/sys/fs/protected_symlinks") not in (None, "0")
    for target in targets:
        location = locations[target.path]
        link = machine.per_process_link(target.path)
        exposed = machine.open_folder(target.path, protected) if link is None else None
        if link is not None:
            problem: str | None = (
                f"target {target.path} goes through {link}, which each process reads as its own: fio, "
                "opening it in its own process, would open another file than the one judged; "
                "name the file or device itself"
            )
        elif exposed is not None:
            problem = (
                f"target {target.path}: {exposed}; "
                "move the target below directories only you and root can write"
            )
        elif location.kind == "block":
            problem = _check_block(target, location, allow_write, system, machine) if writes else None
        elif location.kind == "other":
            problem = (
                f"target {target.path} is neither a regular file nor a block device "
                "(a character device, FIFO or socket); name a file or a block device"
            )
        elif location.kind == "unknown":
            problem = f"target {target.path} does not exist"
        else:
            problem = _check_file(target, writes, allow_write, machine)
        if problem:
            where = f"{target.where}: " if target.where else ""
            problems.append(where + machine.prefix + problem)
    if problems:
        raise SafetyError("refused, nothing was run:\n" + "\n".join(f"  {p}" for p in problems))

"""Block devices as a machine's sysfs and procfs show them: every query takes its :class:`~iobench.system.hostfs.SystemRoot`.

Disks, partitions and the stacks on them (``holders/``, ``slaves/``), device numbers
and names, mounts and swap, a device's interrupt lines, a loop device's backing file.
The root is this machine, a snapshot of another (``--fsroot``) or a host over SSH.
"""

from __future__ import annotations

import os
import re
import stat

from iobench.system.hostfs import Mount, SystemRoot, devno_text, natural_key

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(text: str) -> str:
    r"""Decode the kernel's octal escapes in mount and swap paths (``\040`` is a space)."""
    return _OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), text)


def block_names(root: SystemRoot) -> tuple[str, ...]:
    """Every block device and partition sysfs lists, in :meth:`block_dir`'s search order."""
    names = dict.fromkeys(root.list_dir(root.sysfs / "class" / "block"))
    names.update(dict.fromkeys(root.list_dir(root.sysfs / "block")))
    return tuple(names)


def whole_disks(root: SystemRoot) -> tuple[str, ...]:
    """Every whole block device (no partitions), in natural order."""
    names = set(root.list_dir(root.sysfs / "block"))
    names.update(n for n in root.list_dir(root.sysfs / "class" / "block") if not is_partition(root, n))
    return tuple(sorted(names, key=natural_key))


def is_partition(root: SystemRoot, name: str) -> bool:
    """Whether ``name`` is a partition (its folder has a ``partition`` file)."""
    directory = root.block_dir(name)
    return directory is not None and os.path.exists(directory / "partition")


def whole_disk(root: SystemRoot, name: str) -> str:
    """The disk a partition lies on; any other name is returned as it is."""
    directory = root.block_dir(name)
    if directory is not None and os.path.exists(directory / "partition"):
        return directory.parent.name
    return name


def partitions(root: SystemRoot, name: str) -> tuple[str, ...]:
    """The partitions of a disk, in natural order; empty for a partition or an unknown name."""
    directory = root.block_dir(name)
    if directory is None:
        return ()
    return tuple(n for n in root.list_dir(directory) if os.path.exists(directory / n / "partition"))


def holders(root: SystemRoot, name: str) -> tuple[str, ...]:
    """Devices stacked on ``name`` (dm, md, bcache): its ``holders/``."""
    directory = root.block_dir(name)
    return root.list_dir(directory / "holders") if directory is not None else ()


def slaves(root: SystemRoot, name: str) -> tuple[str, ...]:
    """Devices ``name`` is built on (dm, md members): its ``slaves/``."""
    directory = root.block_dir(name)
    return root.list_dir(directory / "slaves") if directory is not None else ()


def devices_below(root: SystemRoot, name: str) -> tuple[str, ...]:
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
        todo.extend(reversed(slaves(root, current)))
    return tuple(found)


def disks_under(root: SystemRoot, name: str) -> tuple[str, ...]:
    """The whole disks carrying a device's I/O.

    A partition's disk; a dm or md device's members, recursively down to
    the devices with no ``slaves/`` (each as its whole disk); else the
    device itself.
    """
    leaves = (d for d in devices_below(root, name) if not slaves(root, d))
    return tuple(dict.fromkeys(whole_disk(root, d) for d in leaves))


def block_devno(root: SystemRoot, name: str) -> str | None:
    """A block device's ``major:minor`` from its ``dev`` file, or None."""
    directory = root.block_dir(name)
    return root.read_text(directory / "dev") if directory is not None else None


def block_name(root: SystemRoot, devno: str) -> str | None:
    """The kernel name of the block device with this ``major:minor``, or None.

    ``sys/dev/block/<major:minor>`` where that folder exists (Linux
    2.6.27+); else, for older kernels and small fake trees, the first name
    in :meth:`block_names` whose ``dev`` file matches.
    """
    by_number = root.sysfs / "dev" / "block"
    if os.path.isdir(by_number):  # noqa: PTH112 - False, never an exception
        link = by_number / devno
        return root.realpath(link).name if os.path.exists(link) else None
    return next((name for name in block_names(root) if block_devno(root, name) == devno), None)


def dm_device(root: SystemRoot, mapper_name: str) -> str | None:
    """The ``dm-N`` whose device-mapper name (``/dev/mapper/<name>``) is ``mapper_name``."""
    for name in whole_disks(root):
        directory = root.block_dir(name)
        if name.startswith("dm-") and directory is not None:
            if root.read_text(directory / "dm" / "name") == mapper_name:
                return name
    return None


def mounts(root: SystemRoot) -> list[Mount]:
    """Every mount of this process's namespace, from ``proc/self/mountinfo``; empty when unreadable."""
    text = root.read_text("proc/self/mountinfo")
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


def swaps(root: SystemRoot) -> list[str]:
    """The file or device of every active swap area, from ``proc/swaps``; empty when unreadable."""
    text = root.read_text("proc/swaps")
    lines = (text or "").splitlines()[1:]
    return [_unescape(line.split()[0]) for line in lines if line.strip()]


def device_irqs(root: SystemRoot, name: str) -> tuple[int, ...]:
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
    current = root.block_dir(name)
    top = root.realpath("sys/devices")
    while current is not None and current != top and top in current.parents:
        vectors = [int(n) for n in root.list_dir(current / "msi_irqs") if n.isdigit()]
        if vectors:
            return tuple(sorted(vectors))
        legacy = root.read_int(current / "irq") if root.exists(current / "subsystem") else None
        if legacy and root.realpath(current / "subsystem").name == "pci":
            return (legacy,)
        current = current.parent
    return ()


def loop_backing_file(root: SystemRoot, name: str) -> str | None:
    """The file behind loop device ``name`` (``loop/backing_file``), or None for anything else."""
    directory = root.block_dir(name)
    return root.read_text(directory / "loop" / "backing_file") if directory is not None else None


def loop_backing_device(root: SystemRoot, name: str) -> str | None:
    """The block device holding loop device ``name``'s backing file (or the backing device itself).

    None for anything but a loop device, a backing file on a file system without a
    block device (tmpfs), or a root that is not this machine (its backing file is a path there).
    """
    backing = loop_backing_file(root, name)
    if not backing or not root.live:
        return None
    try:
        info = os.stat(backing)
    except OSError:
        return None
    if stat.S_ISBLK(info.st_mode):
        return block_name(root, devno_text(info.st_rdev))
    return block_name(root, devno_text(info.st_dev)) if os.major(info.st_dev) else None


def loop_window(root: SystemRoot, name: str) -> tuple[int, int] | None:
    """Loop device ``name``'s ``offset`` and ``sizelimit`` in bytes on its backing file (0: to its end), or None.

    None also when either cannot be read: the caller cannot tell the loop
    shows its backing file whole.
    """
    directory = root.block_dir(name)
    if directory is None:
        return None
    offset = root.read_int(directory / "loop" / "offset")
    limit = root.read_int(directory / "loop" / "sizelimit")
    return None if offset is None or limit is None else (offset, limit)

"""Which targets a matrix may touch (SPEC §5). Refusals change nothing.

The rules, in order: a block device is written only when its target says
``allow_write: true`` and it is not mounted (itself or a partition), not swap,
not held by LVM/md/dm, and not the disk under ``/``; a filesystem, RAID, LVM
or partition-table signature additionally needs ``--allow-write DEV``. An
existing file iobench did not create is written only with ``allow_write``.

Devices are compared by device number, so any spelling (``/dev/mapper/…``,
``/dev/disk/by-id/…``, another node) counts as the same device. As a last
check the device is opened with ``O_EXCL``, which the kernel refuses with
EBUSY for any device it has claimed — mounted, swap, or a member of a RAID,
LVM or btrfs volume — even when sysfs and procfs do not show why.
Everything is read-only: signatures are read with ``O_RDONLY``.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from iobench.errors import SafetyError
from iobench.matrix import Matrix, Target
from iobench.topology import TargetLocation


@dataclass(frozen=True)
class Signature:
    """A magic string blkid would find, and where it may sit.

    ``offsets`` are byte offsets from the start of the device; a callable takes
    the device size and returns an offset (metadata kept near the end).
    """

    what: str
    magic: bytes
    offsets: tuple[int | Callable[[int], int], ...]


def _md_090(size: int) -> int:
    return (size & ~0xFFFF) - 0x10000


def _md_10(size: int) -> int:
    return (size - 0x2000) & ~0xFFF


_MD_MAGIC = b"\xfc\x4e\x2b\xa9"  # 0xa92b4efc, little-endian

# First match wins, so filesystems come before the MBR boot signature that
# FAT and NTFS boot sectors carry too.
SIGNATURES: tuple[Signature, ...] = (
    Signature("a LUKS encrypted volume", b"LUKS\xba\xbe", (0,)),
    Signature("an ext2/3/4 filesystem", b"\x53\xef", (0x438,)),
    Signature("an XFS filesystem", b"XFSB", (0,)),
    Signature("a btrfs filesystem", b"_BHRfS_M", (0x10040,)),
    Signature("swap", b"SWAPSPACE2", tuple(page - 10 for page in (4096, 8192, 16384, 65536))),
    Signature("swap", b"SWAP-SPACE", tuple(page - 10 for page in (4096, 8192, 16384, 65536))),
    Signature("an LVM physical volume", b"LVM2 001", (0x018, 0x218, 0x418, 0x618)),
    Signature("an md RAID member (v1.1)", _MD_MAGIC, (0,)),
    Signature("an md RAID member (v1.2)", _MD_MAGIC, (0x1000,)),
    Signature("an md RAID member (v1.0)", _MD_MAGIC, (_md_10,)),
    Signature("an md RAID member (v0.90)", _MD_MAGIC, (_md_090,)),
    Signature("an NTFS filesystem", b"NTFS    ", (3,)),
    Signature("an exFAT filesystem", b"EXFAT   ", (3,)),
    Signature("a FAT filesystem", b"FAT32   ", (0x52,)),
    Signature("a FAT filesystem", b"FAT16   ", (0x36,)),
    Signature("a FAT filesystem", b"FAT12   ", (0x36,)),
    Signature("an ISO 9660 filesystem", b"CD001", (0x8001, 0x8801, 0x9001)),
    Signature("a GPT partition table", b"EFI PART", (512, 4096)),
)
_MBR_ENTRIES = range(446, 510, 16)


def state_dir() -> Path:
    """Where iobench keeps state between runs (``$XDG_STATE_HOME/iobench``)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "iobench"


def _registry_path() -> Path:
    return state_dir() / "created-files.json"


def _registry() -> dict[str, int]:
    try:
        data = json.loads(_registry_path().read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def created_by_iobench(path: str) -> bool:
    """Whether ``path`` is a file an earlier iobench run created (same inode)."""
    try:
        inode = os.stat(path).st_ino
    except OSError:
        return False
    return _registry().get(path) == inode


def remember_created(paths: Iterable[str]) -> None:
    """Record files iobench just created, so later runs may write them again."""
    registry = _registry()
    for path in paths:
        try:
            registry[path] = os.stat(path).st_ino
        except OSError:
            continue
    target = _registry_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(registry, indent=1, sort_keys=True))
    tmp.replace(target)


def _pread(fd: int, offset: int, length: int) -> bytes:
    return os.pread(fd, length, offset) if offset >= 0 else b""


def _mbr_in_use(boot: bytes) -> bool:
    """A DOS partition table with at least one entry of a nonzero type."""
    return boot[510:512] == b"\x55\xaa" and any(boot[entry + 4] != 0 for entry in _MBR_ENTRIES)


def find_signature(device: str) -> str | None:
    """The first signature on ``device``, opened read-only.

    Raises
    ------
    OSError
        When the device cannot be opened or read.
    """
    fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        for sig in SIGNATURES:
            for where in sig.offsets:
                offset = where(size) if callable(where) else where
                if 0 <= offset <= size - len(sig.magic) and _pread(fd, offset, len(sig.magic)) == sig.magic:
                    return sig.what
        return "an MBR partition table" if _mbr_in_use(_pread(fd, 0, 512)) else None
    finally:
        os.close(fd)


def signature(device: str) -> str | None:
    """The first filesystem/RAID/LVM/partition signature on ``device``, read-only, or None.

    Unreadable devices give None; :func:`check_targets` refuses those itself.
    """
    try:
        return find_signature(device)
    except OSError:
        return None


# --- what the kernel is using -------------------------------------------------


@dataclass(frozen=True)
class _Mount:
    devno: str
    point: str
    source: str


def _mounts(proc: Path) -> list[_Mount]:
    try:
        lines = (proc / "self" / "mountinfo").read_text().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        source = after[1] if len(after) > 1 else ""
        mounts.append(_Mount(fields[2], fields[4].replace("\\040", " "), source))
    return mounts


def _devno_of_node(path: str) -> str | None:
    if not path.startswith("/"):
        return None  # "proc", "tmpfs": not a device, and must not be looked up in the cwd
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISBLK(info.st_mode):
        return None
    return f"{os.major(info.st_rdev)}:{os.minor(info.st_rdev)}"


def _swap_devnos(proc: Path) -> set[str]:
    try:
        lines = (proc / "swaps").read_text().splitlines()[1:]
    except OSError:
        return set()
    found = set()
    for line in lines:
        if line.strip():
            found.add(_devno_of_node(line.split()[0].replace("\\040", " ")) or line.split()[0])
    return found


def _devno(sys_block: Path) -> str | None:
    try:
        return (sys_block / "dev").read_text().strip()
    except OSError:
        return None


def _class_dir(sysfs: Path, name: str) -> Path:
    return Path(os.path.realpath(sysfs / "class" / "block" / name))


def _block_dirs(name: str, sysfs: Path) -> list[Path]:
    """The sysfs directory of ``name`` and of each of its partitions."""
    base = _class_dir(sysfs, name)
    dirs = [base]
    try:
        dirs += [base / child for child in sorted(os.listdir(base)) if (base / child / "partition").exists()]
    except OSError:
        pass
    return dirs


def _name_of_devno(sysfs: Path, devno: str) -> str | None:
    try:
        names = os.listdir(sysfs / "class" / "block")
    except OSError:
        return None
    return next((n for n in sorted(names) if _devno(sysfs / "class" / "block" / n) == devno), None)


def _whole_disks(sysfs: Path, name: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """``name`` itself, the disk of a partition, and the members under dm/md, recursively."""
    if name in seen:
        return set()
    directory = _class_dir(sysfs, name)
    found = {name}
    if (directory / "partition").exists():
        found.add(directory.parent.name)
    try:
        slaves = os.listdir(directory / "slaves")
    except OSError:
        slaves = []
    for slave in slaves:
        found |= _whole_disks(sysfs, slave, seen | {name})
    return found


def _root_disks(sysfs: Path, proc: Path) -> set[str]:
    """Every device under ``/``: its device, that device's disk and, for dm/md, their members."""
    devnos = {m.devno for m in _mounts(proc) if m.point == "/"}
    try:
        dev = os.stat("/").st_dev
        devnos.add(f"{os.major(dev)}:{os.minor(dev)}")
    except OSError:
        pass
    # btrfs and friends report an anonymous 0:N; the mount source names the device.
    devnos |= {d for m in _mounts(proc) if m.point == "/" for d in [_devno_of_node(m.source)] if d}
    names = {n for devno in devnos for n in [_name_of_devno(sysfs, devno)] if n}
    disks: set[str] = set()
    for name in names:
        disks |= _whole_disks(sysfs, name)
    return disks


def _in_use(directory: Path, mounted: set[str], swaps: set[str]) -> str | None:
    label, devno = directory.name, _devno(directory)
    if devno is not None and devno in mounted:
        return f"{label} is mounted"
    if devno is not None and devno in swaps:
        return f"{label} is in use as swap"
    try:
        holders = sorted(os.listdir(directory / "holders"))
    except OSError:
        holders = []
    if holders:
        return f"{label} is held by {', '.join(holders)} (LVM, md or device-mapper)"
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
    """Why a block device must never be written, or None (SPEC §5, first rule).

    Refused: the device or one of its partitions mounted, used as swap or held
    by LVM/md/dm; the device on, or a member of the device under, ``/``; a
    device the kernel holds exclusively for any other reason.

    Parameters
    ----------
    location
        From :func:`iobench.topology.locate_target`; symlinks (``/dev/mapper``,
        ``/dev/disk/by-id``) are already resolved to the device there.
    sysfs, proc
        Where sysfs and procfs are; fake trees in tests.
    """
    sysdir, procdir = Path(sysfs), Path(proc)
    node = os.path.realpath(location.path)
    name = location.device or Path(node).name
    mounts = _mounts(procdir)
    mounted = {m.devno for m in mounts} | {d for m in mounts for d in [_devno_of_node(m.source)] if d}
    swaps = _swap_devnos(procdir)
    for directory in _block_dirs(name, sysdir):
        reason = _in_use(directory, mounted, swaps)
        if reason:
            return reason
    root = _root_disks(sysdir, procdir)
    if (set(location.disks) | _whole_disks(sysdir, name)) & root:
        return f"{name} holds the root filesystem"
    if _claimed(node):
        return f"{name} is in use by the kernel (mounted, swap, or part of a RAID, LVM or btrfs volume)"
    return None


def _same_device(path: str, others: Iterable[str]) -> bool:
    real, devno = os.path.realpath(path), _devno_of_node(path)
    for other in others:
        if os.path.realpath(other) == real or (devno is not None and _devno_of_node(other) == devno):
            return True
    return False


def _check_block(
    target: Target, location: TargetLocation, allow_write: tuple[str, ...], sysfs: Path, proc: Path
) -> str | None:
    if not target.allow_write:
        return (
            f"target {target.path} is a block device and the matrix writes to it; "
            "add `allow_write: true` to the target if its data may be destroyed"
        )
    refusal = device_refusal(location, sysfs=sysfs, proc=proc)
    if refusal:
        return f"target {target.path}: {refusal}; iobench never writes to it"
    try:
        found = find_signature(target.path)
    except OSError as exc:
        return f"target {target.path} cannot be read to look for data on it: {exc.strerror}"
    if found and not _same_device(target.path, allow_write):
        return f"target {target.path} holds {found}; if it may be destroyed, pass --allow-write {target.path}"
    return None


def _check_file(target: Target, writes: bool) -> str | None:
    path = Path(target.path)
    if not path.exists():
        if not path.parent.is_dir():
            return f"target {target.path}: directory {path.parent} does not exist"
        if target.size is None:
            return f"target {target.path} does not exist yet; give it a `size:` so fio can create it"
        return None
    if path.is_dir():
        return f"target {target.path} is a directory; name a file or a block device"
    if target.allow_write or created_by_iobench(target.path):
        return None
    if writes:
        return (
            f"target {target.path} exists and iobench did not create it; "
            "add `allow_write: true` to the target if it may be overwritten"
        )
    if target.size is not None and target.size > path.stat().st_size:
        return (
            f"target {target.path} is smaller than size {target.size}: fio would extend it; "
            "drop `size:` or add `allow_write: true`"
        )
    return None


def check_targets(
    matrix: Matrix,
    locations: dict[str, TargetLocation],
    *,
    writes: bool,
    allow_write: tuple[str, ...] = (),
    sysfs: str | os.PathLike[str] = "/sys",
    proc: str | os.PathLike[str] = "/proc",
) -> None:
    """Refuse, with every reason at once, targets the matrix must not touch.

    Parameters
    ----------
    matrix
        The validated matrix.
    locations
        Each target's :class:`~iobench.topology.TargetLocation`, by target path.
    writes
        Whether any point writes or trims.
    allow_write
        Devices named with ``--allow-write``: written despite a signature.
        Any spelling of the device counts (symlinks, another node).
    sysfs, proc
        Where sysfs and procfs are; fake trees in tests.

    Raises
    ------
    SafetyError
        Naming each target and what to do about it.
    """
    problems: list[str] = []
    for target in matrix.targets:
        location = locations[target.path]
        if location.kind == "block":
            problem = _check_block(target, location, allow_write, Path(sysfs), Path(proc)) if writes else None
        elif location.kind == "unknown":
            problem = f"target {target.path} does not exist"
        else:
            problem = _check_file(target, writes)
        if problem:
            problems.append(problem)
    if problems:
        raise SafetyError("refused, nothing was run:\n" + "\n".join(f"  {p}" for p in problems))

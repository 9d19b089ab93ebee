"""Which targets a matrix may touch (SPEC §5). Refusals change nothing.

The rules, in order: a block device is written only when its target says
``allow_write: true`` and it is not mounted (itself or a partition), not swap,
not held by LVM/md/dm, and not the disk under ``/``; a filesystem, RAID, LVM
or partition-table signature additionally needs ``--allow-write DEV``. An
existing file iobench did not create is written only with ``allow_write``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from iobench.errors import SafetyError
from iobench.matrix import Matrix, Target
from iobench.topology import TargetLocation

# (offset, magic, what) for the signatures blkid would find first.
SIGNATURES: tuple[tuple[int, bytes, str], ...] = (
    (0x438, b"\x53\xef", "an ext2/3/4 filesystem"),
    (0, b"XFSB", "an XFS filesystem"),
    (0x10040, b"_BHRfS_M", "a btrfs filesystem"),
    (0x1000, b"\xfc\x4e\x2b\xa9", "an md RAID member (v1.2)"),
    (0x218, b"LVM2 001", "an LVM physical volume"),
    (512, b"EFI PART", "a GPT partition table"),
    (0xFF6, b"SWAPSPACE2", "swap"),
    (0x3, b"NTFS    ", "an NTFS filesystem"),
    (0x52, b"FAT32   ", "a FAT32 filesystem"),
    (0x36, b"FAT16   ", "a FAT filesystem"),
    (510, b"\x55\xaa", "an MBR partition table"),
)


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


def signature(device: str) -> str | None:
    """The first filesystem/RAID/LVM/partition signature on ``device``, read-only, or None."""
    try:
        with open(device, "rb") as handle:
            head = handle.read(0x10048)
    except OSError:
        return None
    for offset, magic, what in SIGNATURES:
        if head[offset : offset + len(magic)] == magic:
            return what
    return None


def _mounted_devices() -> set[str]:
    found: set[str] = set()
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) > 2:
            found.add(fields[2])
    return found


def _swap_devices() -> set[str]:
    try:
        lines = Path("/proc/swaps").read_text().splitlines()[1:]
    except OSError:
        return set()
    return {os.path.realpath(line.split()[0]) for line in lines if line.strip()}


def _devno(sys_block: Path) -> str | None:
    try:
        return (sys_block / "dev").read_text().strip()
    except OSError:
        return None


def _block_dirs(name: str) -> list[Path]:
    """The sysfs directory of ``name`` and of each of its partitions."""
    base = Path("/sys/class/block") / name
    dirs = [base]
    try:
        dirs += [base / child for child in os.listdir(base) if (base / child / "partition").exists()]
    except OSError:
        pass
    return dirs


def _root_disks() -> set[str]:
    try:
        devno = os.stat("/").st_dev
    except OSError:
        return set()
    link = Path(f"/sys/dev/block/{os.major(devno)}:{os.minor(devno)}")
    try:
        resolved = link.resolve(strict=True)
    except OSError:
        return set()
    if (resolved / "partition").exists():
        resolved = resolved.parent
    return {resolved.name}


def device_refusal(location: TargetLocation) -> str | None:
    """Why a block device must never be written, or None (SPEC §5, first rule)."""
    name = location.device or Path(location.path).name
    mounted, swaps = _mounted_devices(), _swap_devices()
    for directory in _block_dirs(name):
        label = directory.name
        if _devno(directory) in mounted:
            return f"{label} is mounted"
        if f"/dev/{label}" in swaps:
            return f"{label} is in use as swap"
        try:
            holders = os.listdir(directory / "holders")
        except OSError:
            holders = []
        if holders:
            return f"{label} is held by {', '.join(sorted(holders))} (LVM, md or device-mapper)"
    disks = set(location.disks) | {name}
    if disks & _root_disks():
        return f"{name} holds the root filesystem"
    return None


def _check_block(target: Target, location: TargetLocation, allow_write: tuple[str, ...]) -> str | None:
    if not target.allow_write:
        return (
            f"target {target.path} is a block device and the matrix writes to it; "
            "add `allow_write: true` to the target if its data may be destroyed"
        )
    refusal = device_refusal(location)
    if refusal:
        return f"target {target.path}: {refusal}; iobench never writes to it"
    found = signature(target.path)
    if found and target.path not in allow_write and os.path.realpath(target.path) not in allow_write:
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
) -> None:
    """Refuse, with every reason at once, targets the matrix must not touch.

    Raises
    ------
    SafetyError
        Naming each target and what to do about it.
    """
    problems: list[str] = []
    for target in matrix.targets:
        location = locations[target.path]
        if location.kind == "block":
            problem = _check_block(target, location, allow_write) if writes else None
        elif target.path.startswith("/dev/") and not Path(target.path).exists():
            problem = f"target {target.path} does not exist"
        else:
            problem = _check_file(target, writes)
        if problem:
            problems.append(problem)
    if problems:
        raise SafetyError("refused, nothing was run:\n" + "\n".join(f"  {p}" for p in problems))

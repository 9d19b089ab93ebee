"""The write guard (SPEC §5) on real loop devices, driven through parse_matrix + plan.

Every refusal is checked to name the device and the reason, and to leave every
byte of the device as it was (sha256 of the whole device before and after).
Cases this machine cannot build for real (partitions: the kernel does not scan
loop partition tables here; dm/md holders: no device-mapper driver) use a fake
sysfs/procfs tree with :func:`iobench.safety.device_refusal`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from loopdev import Loop, LoopFactory, sha256_of

from iobench.errors import SafetyError
from iobench.matrix import parse_matrix
from iobench.plan import Plan, plan
from iobench.safety import SIGNATURES, device_refusal, find_signature, signature
from iobench.topology import TargetLocation

MATRIX = """
version: 1
name: guard
targets:
  - path: {path}
    allow_write: {allow}
fio:
  ioengine: psync
  rw: randwrite
  bs: 4k
  runtime: 1
  time_based: 1
"""

Planner = Callable[..., Plan]


@pytest.fixture
def plan_for() -> Planner:
    """Plan a writing matrix on ``path`` the way ``iobench plan`` does."""

    def make(path: str, *, allow: bool = True, allow_write: tuple[str, ...] = ()) -> Plan:
        text = MATRIX.format(path=path, allow=str(allow).lower())
        return plan(parse_matrix(text, "t.yaml", allow_write=allow_write), allow_write=allow_write)

    return make


@pytest.fixture
def unchanged() -> Iterator[Callable[[Loop], None]]:
    """Register devices whose every byte must be the same at the end of the test."""
    watched: list[tuple[Loop, str]] = []
    yield lambda loop: watched.append((loop, sha256_of(loop.path)))
    for loop, before in watched:
        assert sha256_of(loop.path) == before, f"{loop.path} changed"


def _ext4(loops: LoopFactory, loop: Loop) -> None:
    loops.mkfs_ext4(loop)


@pytest.mark.loopdev
@pytest.mark.fio
def test_a_blank_device_with_allow_write_is_planned(
    loops: LoopFactory, plan_for: Planner, unchanged: Callable[[Loop], None]
) -> None:
    loop = loops.attach()
    unchanged(loop)
    the_plan = plan_for(loop.path)
    assert the_plan.locations[loop.path].kind == "block"
    assert the_plan.runs


@pytest.mark.loopdev
@pytest.mark.fio
def test_any_block_device_needs_allow_write_in_the_target(
    loops: LoopFactory, plan_for: Planner, unchanged: Callable[[Loop], None]
) -> None:
    loop = loops.attach()
    unchanged(loop)
    with pytest.raises(SafetyError, match=rf"target {loop.path} is a block device .* `allow_write: true`"):
        plan_for(loop.path, allow=False)


@pytest.mark.loopdev
@pytest.mark.fio
def test_a_mounted_filesystem_is_refused_even_when_allowed_twice(
    loops: LoopFactory, plan_for: Planner, unchanged: Callable[[Loop], None]
) -> None:
    loop = loops.attach()
    loops.mkfs_ext4(loop)
    loops.mount(loop)
    unchanged(loop)
    with pytest.raises(SafetyError, match=rf"target {loop.path}: {loop.name} is mounted; iobench never"):
        plan_for(loop.path, allow_write=(loop.path,))


@pytest.mark.loopdev
@pytest.mark.fio
def test_a_symlink_to_a_mounted_device_is_refused(
    loops: LoopFactory, plan_for: Planner, unchanged: Callable[[Loop], None], tmp_path: Path
) -> None:
    loop = loops.attach()
    loops.mkfs_ext4(loop)
    loops.mount(loop)
    unchanged(loop)
    by_id = tmp_path / "disk" / "by-id" / "virtio-test"
    by_id.parent.mkdir(parents=True)
    by_id.symlink_to(loop.path)
    with pytest.raises(SafetyError, match=rf"target {by_id}: {loop.name} is mounted"):
        plan_for(str(by_id), allow_write=(str(by_id),))


@pytest.mark.loopdev
@pytest.mark.fio
def test_active_swap_is_refused(
    loops: LoopFactory, plan_for: Planner, unchanged: Callable[[Loop], None]
) -> None:
    loop = loops.attach()
    loops.swapon(loop)
    unchanged(loop)
    with pytest.raises(SafetyError, match=rf"{loop.name} is in use as swap; iobench never writes to it"):
        plan_for(loop.path, allow_write=(loop.path,))


@pytest.mark.loopdev
def test_the_kernel_claim_catches_what_procfs_does_not_show(loops: LoopFactory, tmp_path: Path) -> None:
    loop = loops.attach()
    loops.mkfs_ext4(loop)
    loops.mount(loop)
    blind = tmp_path / "proc"
    (blind / "self").mkdir(parents=True)
    (blind / "self" / "mountinfo").write_text("")
    (blind / "swaps").write_text("Filename Type Size Used Priority\n")
    location = TargetLocation(loop.path, "block", loop.name, (loop.name,), None)
    assert device_refusal(location, proc=blind) == (
        f"{loop.name} is in use by the kernel (mounted, swap, or part of a RAID, LVM or btrfs volume)"
    )


@pytest.mark.root
@pytest.mark.fio
def test_the_disk_under_root_is_always_refused(plan_for: Planner) -> None:
    root = os.stat("/").st_dev
    link = Path(f"/sys/dev/block/{os.major(root)}:{os.minor(root)}")
    if not link.exists():
        pytest.skip(f"/ is not on a block device here ({os.major(root)}:{os.minor(root)})")
    device = link.resolve()
    disk = device.parent.name if (device / "partition").exists() else device.name
    # Planning only reads: the refusal comes before anything could be written.
    with pytest.raises(
        SafetyError, match=rf"target /dev/{disk}: {disk} (is mounted|holds the root filesystem)"
    ):
        plan_for(f"/dev/{disk}", allow_write=(f"/dev/{disk}",))


@pytest.mark.loopdev
@pytest.mark.parametrize(
    ("make", "what"),
    [
        (_ext4, "an ext2/3/4 filesystem"),
        (lambda loops, loop: loops.mkswap(loop), "swap"),
    ],
    ids=["ext4", "swap"],
)
@pytest.mark.fio
def test_a_signature_needs_allow_write_naming_the_device(
    loops: LoopFactory,
    plan_for: Planner,
    unchanged: Callable[[Loop], None],
    tmp_path: Path,
    make: Callable[[LoopFactory, Loop], None],
    what: str,
) -> None:
    loop, other = loops.attach(), loops.attach()
    make(loops, loop)
    unchanged(loop)
    with pytest.raises(SafetyError, match=rf"target {loop.path} holds {what}; .* --allow-write {loop.path}$"):
        plan_for(loop.path)
    with pytest.raises(SafetyError, match=f"holds {what}"):
        plan_for(loop.path, allow_write=(other.path,))
    assert plan_for(loop.path, allow_write=(loop.path,)).runs
    alias = tmp_path / "alias"
    alias.symlink_to(loop.path)
    # --allow-write names the device in any spelling.
    assert plan_for(loop.path, allow_write=(str(alias),)).runs


@pytest.mark.loopdev
@pytest.mark.fio
def test_md_090_metadata_at_the_end_of_the_device_is_found(
    loops: LoopFactory, plan_for: Planner, unchanged: Callable[[Loop], None]
) -> None:
    loop = loops.attach(size_mib=17)
    size = 17 << 20
    with loop.backing.open("r+b") as handle:
        handle.seek((size & ~0xFFFF) - 0x10000)
        handle.write(b"\xfc\x4e\x2b\xa9")
    unchanged(loop)
    with pytest.raises(SafetyError, match=r"holds an md RAID member \(v0.90\)"):
        plan_for(loop.path)


# --- the signature table, on plain files --------------------------------------------


def _image(tmp_path: Path, writes: dict[int, bytes], size: int = 4 << 20) -> str:
    path = tmp_path / "image"
    with path.open("wb") as handle:
        handle.truncate(size)
        for offset, data in writes.items():
            handle.seek(offset)
            handle.write(data)
    return str(path)


def _mbr(partition_type: int) -> bytes:
    boot = bytearray(512)
    boot[446:462] = struct.pack("<B3sB3sII", 0, b"", partition_type, b"", 2048, 8192)
    boot[510:512] = b"\x55\xaa"
    return bytes(boot)


SIZE = 4 << 20
CASES = {
    "luks": ({0: b"LUKS\xba\xbe"}, "a LUKS encrypted volume"),
    "ext4": ({0x438: b"\x53\xef"}, "an ext2/3/4 filesystem"),
    "xfs": ({0: b"XFSB"}, "an XFS filesystem"),
    "btrfs": ({0x10040: b"_BHRfS_M"}, "a btrfs filesystem"),
    "swap-4k": ({4086: b"SWAPSPACE2"}, "swap"),
    "swap-64k": ({65526: b"SWAPSPACE2"}, "swap"),
    "lvm2": ({0x200: b"LABELONE", 0x218: b"LVM2 001"}, "an LVM physical volume"),
    "md-1.1": ({0: b"\xfc\x4e\x2b\xa9"}, "an md RAID member (v1.1)"),
    "md-1.2": ({0x1000: b"\xfc\x4e\x2b\xa9"}, "an md RAID member (v1.2)"),
    "md-1.0": ({(SIZE - 0x2000) & ~0xFFF: b"\xfc\x4e\x2b\xa9"}, "an md RAID member (v1.0)"),
    "md-0.90": ({SIZE - 0x10000: b"\xfc\x4e\x2b\xa9"}, "an md RAID member (v0.90)"),
    "ntfs": ({3: b"NTFS    ", 510: b"\x55\xaa"}, "an NTFS filesystem"),
    "vfat": ({0x52: b"FAT32   ", 510: b"\x55\xaa"}, "a FAT filesystem"),
    "fat16": ({0x36: b"FAT16   ", 510: b"\x55\xaa"}, "a FAT filesystem"),
    "exfat": ({3: b"EXFAT   ", 510: b"\x55\xaa"}, "an exFAT filesystem"),
    "iso9660": ({0x8001: b"CD001"}, "an ISO 9660 filesystem"),
    "gpt": ({0: _mbr(0xEE), 512: b"EFI PART"}, "a GPT partition table"),
    "mbr": ({0: _mbr(0x83)}, "an MBR partition table"),
}


@pytest.mark.parametrize(("writes", "what"), CASES.values(), ids=CASES.keys())
def test_each_signature_is_found(tmp_path: Path, writes: dict[int, bytes], what: str) -> None:
    path = _image(tmp_path, writes, SIZE)
    before = sha256_of(path)
    assert signature(path) == what
    assert sha256_of(path) == before


def test_every_table_entry_has_a_case() -> None:
    assert {sig.what for sig in SIGNATURES} | {"an MBR partition table"} == {
        what for _, what in CASES.values()
    }


@pytest.mark.parametrize(
    "writes",
    [{}, {0: _mbr(0)}, {0: b"\x00" * 512, 510: b"\x55\xaa"}],
    ids=["zeros", "empty-mbr", "boot-signature-only"],
)
def test_blank_devices_and_empty_partition_tables_have_no_signature(
    tmp_path: Path, writes: dict[int, bytes]
) -> None:
    assert find_signature(_image(tmp_path, writes)) is None


def test_a_tiny_file_is_read_without_error(tmp_path: Path) -> None:
    path = tmp_path / "tiny"
    path.write_bytes(b"XF")
    assert find_signature(str(path)) is None


def test_an_unreadable_device_has_no_signature_but_find_signature_says_why(tmp_path: Path) -> None:
    assert signature(str(tmp_path / "missing")) is None
    with pytest.raises(FileNotFoundError):
        find_signature(str(tmp_path / "missing"))


# --- fake sysfs for what this machine cannot build --------------------------------


def _fake_block(sysfs: Path, name: str, devno: str, *, parent: str | None = None) -> Path:
    """A device under devices/virtual/block, linked from class/block as the kernel does."""
    base = sysfs / "devices" / "virtual" / "block"
    directory = base / parent / name if parent else base / name
    directory.mkdir(parents=True)
    (directory / "dev").write_text(devno + "\n")
    (directory / "holders").mkdir()
    (directory / "slaves").mkdir()
    if parent:
        (directory / "partition").write_text("1\n")
    link = sysfs / "class" / "block" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(directory)
    return directory


def _fake_proc(tmp_path: Path, mountinfo: str = "", swaps: str = "") -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(mountinfo)
    (proc / "swaps").write_text("Filename Type Size Used Priority\n" + swaps)
    return proc


def _location(name: str, disks: tuple[str, ...]) -> TargetLocation:
    # /dev/<name> does not exist here, so only the fake trees decide.
    return TargetLocation(f"/nonexistent/dev/{name}", "block", name, disks, None)


def test_a_mounted_partition_refuses_its_disk(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    _fake_block(sysfs, "sdx", "8:96")
    _fake_block(sysfs, "sdx1", "8:97", parent="sdx")
    _fake_block(sysfs, "sdx2", "8:98", parent="sdx")
    proc = _fake_proc(tmp_path, "36 25 8:98 / /data rw,relatime - ext4 /dev/sdx2 rw\n")
    assert device_refusal(_location("sdx", ("sdx",)), sysfs=sysfs, proc=proc) == "sdx2 is mounted"
    # The other partition itself is free to use.
    assert device_refusal(_location("sdx1", ("sdx",)), sysfs=sysfs, proc=proc) is None


@pytest.mark.parametrize("holder", ["dm-0", "md127"])
def test_a_device_or_partition_with_holders_is_refused(tmp_path: Path, holder: str) -> None:
    sysfs = tmp_path / "sys"
    _fake_block(sysfs, "sdx", "8:96")
    part = _fake_block(sysfs, "sdx1", "8:97", parent="sdx")
    (part / "holders" / holder).mkdir()
    proc = _fake_proc(tmp_path)
    assert device_refusal(_location("sdx", ("sdx",)), sysfs=sysfs, proc=proc) == (
        f"sdx1 is held by {holder} (LVM, md or device-mapper)"
    )


@pytest.mark.loopdev
def test_swap_is_matched_by_device_number_in_any_spelling(loops: LoopFactory, tmp_path: Path) -> None:
    loop = loops.attach()
    sysfs = tmp_path / "sys"
    devno = f"{os.major(os.stat(loop.path).st_rdev)}:{os.minor(os.stat(loop.path).st_rdev)}"
    _fake_block(sysfs, "swapdisk", devno)
    alias = tmp_path / "mapper-swap"
    alias.symlink_to(loop.path)
    proc = _fake_proc(tmp_path, swaps=f"{alias} partition 1024 0 -2\n")
    assert device_refusal(_location("swapdisk", ("swapdisk",)), sysfs=sysfs, proc=proc) == (
        "swapdisk is in use as swap"
    )


def test_members_of_a_root_volume_are_refused(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    dm = _fake_block(sysfs, "dm-3", "252:3")
    _fake_block(sysfs, "sdy", "8:128")
    _fake_block(sysfs, "sdy1", "8:129", parent="sdy")
    (dm / "slaves" / "sdy1").mkdir()
    proc = _fake_proc(tmp_path, "1 0 252:3 / / rw - ext4 /dev/mapper/root rw\n")
    assert (
        device_refusal(_location("sdy", ("sdy",)), sysfs=sysfs, proc=proc) == "sdy holds the root filesystem"
    )

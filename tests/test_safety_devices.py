"""The write guard on real loop devices, driven through parse_matrix + plan.

Every refusal is checked to name the device and the reason, and to leave every
byte of the device as it was (sha256 of the whole device before and after).
Cases this machine cannot build for real (partitions: the kernel does not scan
loop partition tables here; dm/md holders: no device-mapper driver) use a fake
sysfs/procfs tree with :func:`iobench.system.safety.device_refusal`, or a fake sysfs
whose partitions and members are real loop devices for the signature probe.
Every kind of signature is in ``test_safety_signatures.py``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from loopdev import Loop, LoopFactory, sha256_of

from iobench.errors import SafetyError
from iobench.matrix.model import parse_matrix
from iobench.planner.plans import Plan, plan
from iobench.system.safety import check_targets, device_refusal
from iobench.system.topology import TargetLocation

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
def test_a_blank_device_named_by_allow_write_is_planned(
    loops: LoopFactory, plan_for: Planner, unchanged: Callable[[Loop], None]
) -> None:
    loop = loops.attach()
    unchanged(loop)
    the_plan = plan_for(loop.path, allow_write=(loop.path,))
    assert the_plan.locations[loop.path].kind == "block"
    assert the_plan.runs


@pytest.mark.loopdev
@pytest.mark.fio
def test_any_block_device_needs_allow_write_on_the_command_line(
    loops: LoopFactory, plan_for: Planner, unchanged: Callable[[Loop], None]
) -> None:
    loop = loops.attach()
    unchanged(loop)
    # The matrix's allow_write, which a copied config carries, is no consent, with or without it.
    for allow in (False, True):
        with pytest.raises(
            SafetyError,
            match=rf"target {loop.path} is a block device .* pass --allow-write {loop.path} on the command line",
        ):
            plan_for(loop.path, allow=allow)


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
        (_ext4, "TYPE=ext4 (filesystem) at byte offset 1080 (0x438)"),
        (lambda loops, loop: loops.mkswap(loop), "TYPE=swap (other) at byte offset 4086 (0xff6)"),
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
    with pytest.raises(
        SafetyError,
        match=rf"target {loop.path} holds {re.escape(what)}; .* --allow-write {loop.path} on the command line$",
    ):
        plan_for(loop.path)
    with pytest.raises(SafetyError, match=f"holds {re.escape(what)}"):
        plan_for(loop.path, allow_write=(other.path,))
    assert plan_for(loop.path, allow_write=(loop.path,)).runs
    alias = tmp_path / "alias"
    alias.symlink_to(loop.path)
    # --allow-write names the device in any spelling.
    assert plan_for(loop.path, allow_write=(str(alias),)).runs


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


# --- the signature probe follows partitions and the devices under a target -------------


def _devno_of(loop: Loop) -> str:
    rdev = os.stat(loop.path).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def _guard(loop: Loop, sysfs: Path, allow_write: tuple[str, ...] = ()) -> None:
    matrix = parse_matrix(MATRIX.format(path=loop.path, allow="true"), "t.yaml")
    location = TargetLocation(loop.path, "block", loop.name, (loop.name,), None)
    check_targets(matrix.targets, {loop.path: location}, writes=True, allow_write=allow_write, sysfs=sysfs)


@pytest.mark.loopdev
@pytest.mark.fio
def test_a_signature_on_a_partition_refuses_its_disk(
    loops: LoopFactory, tmp_path: Path, unchanged: Callable[[Loop], None]
) -> None:
    disk, partition = loops.attach(), loops.attach()
    loops.mkfs_ext4(partition)
    unchanged(disk)
    unchanged(partition)
    sysfs = tmp_path / "sys"
    _fake_block(sysfs, disk.name, _devno_of(disk))
    _fake_block(sysfs, partition.name, _devno_of(partition), parent=disk.name)
    with pytest.raises(
        SafetyError,
        match=rf"target {disk.path} holds TYPE=ext4 \(filesystem\) at byte offset 1080 \(0x438\) on {partition.path};",
    ):
        _guard(disk, sysfs)
    # Naming the disk on the command line gives up everything on it.
    _guard(disk, sysfs, allow_write=(disk.path,))


@pytest.mark.loopdev
@pytest.mark.fio
def test_a_signature_on_a_device_under_the_target_refuses_it(
    loops: LoopFactory, tmp_path: Path, unchanged: Callable[[Loop], None]
) -> None:
    top, middle, bottom = loops.attach(), loops.attach(), loops.attach()
    loops.mkswap(bottom)
    for loop in (top, middle, bottom):
        unchanged(loop)
    sysfs = tmp_path / "sys"
    # top is a dm device over middle, itself a dm device over bottom.
    (_fake_block(sysfs, top.name, _devno_of(top)) / "slaves" / middle.name).mkdir()
    (_fake_block(sysfs, middle.name, _devno_of(middle)) / "slaves" / bottom.name).mkdir()
    _fake_block(sysfs, bottom.name, _devno_of(bottom))
    with pytest.raises(
        SafetyError, match=rf"holds TYPE=swap \(other\) at byte offset 4086 \(0xff6\) on {bottom.path};"
    ):
        _guard(top, sysfs)
    # Consent for the top does not reach a member that holds data of its own: that needs naming too.
    with pytest.raises(
        SafetyError,
        match=rf"target {top.path} writes onto {bottom.path} \(member of {middle.name}\), which holds TYPE=swap"
        rf".*pass --allow-write {bottom.path} as well$",
    ):
        _guard(top, sysfs, allow_write=(top.path,))
    _guard(top, sysfs, allow_write=(top.path, bottom.path))


@pytest.mark.loopdev
@pytest.mark.fio
def test_a_device_under_the_target_without_a_node_cannot_be_probed_and_refuses(
    loops: LoopFactory, tmp_path: Path
) -> None:
    loop = loops.attach()
    sysfs = tmp_path / "sys"
    _fake_block(sysfs, loop.name, _devno_of(loop))
    _fake_block(sysfs, "iobench-no-node1", "7:1048575", parent=loop.name)
    with pytest.raises(
        SafetyError,
        match=r"what it holds is unknown, so it is not written: iobench-no-node1 has no node in /dev to probe;",
    ):
        _guard(loop, sysfs)

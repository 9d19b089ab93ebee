"""The system layer: one block-device lookup, one parser per procfs file, durable writes, the state dir."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from sysfs_snapshots import FakeSysfs, SnapshotCache

from iobench.store.atomic import atomic_replacing, atomic_write, fsync_directory, state_dir
from iobench.system import blockdevs, procfs
from iobench.system.hostfs import Mount, SystemFileError, SystemRoot, block_node_devno, devno_text


@pytest.fixture(scope="session")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> SnapshotCache:
    return SnapshotCache(tmp_path_factory)


def _device(sysfs: Path, where: str, devno: str, *, partition: bool = False) -> Path:
    """A block device folder at ``sys/<where>`` holding ``dev`` (and ``partition``)."""
    directory = sysfs / where
    directory.mkdir(parents=True)
    (directory / "dev").write_text(devno + "\n")
    if partition:
        (directory / "partition").write_text("1\n")
    return directory


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


# --- the paths ------------------------------------------------------------------


def test_relative_paths_are_the_machines_and_land_under_the_root(tmp_path: Path) -> None:
    snap = SystemRoot(tmp_path)
    assert snap.path("sys/block/sda") == tmp_path / "sys" / "block" / "sda"
    assert snap.path("proc/swaps") == tmp_path / "proc" / "swaps"
    assert snap.path("dev/sda") == tmp_path / "dev" / "sda"
    fake = SystemRoot(sysfs=tmp_path / "s", procfs=tmp_path / "p")
    assert fake.path("sys/block") == tmp_path / "s" / "block"
    assert fake.path("proc/self/mountinfo") == tmp_path / "p" / "self" / "mountinfo"
    # An absolute path is already a host path under the root.
    assert fake.path(tmp_path / "s" / "block") == tmp_path / "s" / "block"
    assert SystemRoot().path("sys/block") == Path("/sys/block")


def test_only_this_machines_sysfs_is_live(tmp_path: Path) -> None:
    assert SystemRoot().live
    assert SystemRoot("/", procfs=tmp_path).live
    assert not SystemRoot(tmp_path).live
    assert not SystemRoot(sysfs=tmp_path).live


# --- reading files ----------------------------------------------------------------


def test_missing_files_read_as_none_never_a_traceback(tmp_path: Path) -> None:
    system = SystemRoot(tmp_path)
    (tmp_path / "sys" / "a-dir").mkdir(parents=True)
    (tmp_path / "sys" / "nul").write_text("0-3\x00\n")
    (tmp_path / "sys" / "word").write_text("lots\n")
    assert system.read_text("sys/nul") == "0-3"
    assert system.read_text("sys/missing") is None
    assert system.read_text("sys/a-dir") is None
    assert system.read_int("sys/word") is None
    assert system.read_int("sys/missing") is None
    assert system.list_dir("sys/missing") == ()
    assert not system.exists("sys/missing")
    assert system.read_cpus("sys", "cpulist", "cpumap") is None
    assert system.read_text("sys/nul\x00byte") is None


def test_a_file_that_must_be_read_names_itself_and_why(tmp_path: Path) -> None:
    system = SystemRoot(tmp_path)
    with pytest.raises(
        SystemFileError, match=rf"^cannot read {tmp_path}/sys/block/sda/dev: No such file"
    ) as gone:
        system.read_required("sys/block/sda/dev")
    assert gone.value.missing and gone.value.errno == errno.ENOENT
    (tmp_path / "sys" / "dir").mkdir(parents=True)
    with pytest.raises(SystemFileError) as directory:
        system.read_required("sys/dir")
    assert not directory.value.missing and directory.value.errno == errno.EISDIR


def test_listings_are_in_natural_order(tmp_path: Path) -> None:
    for name in ("sda10", "sda2", "sda1", "nvme10n1", "nvme2n1"):
        (tmp_path / name).mkdir()
    assert SystemRoot().list_dir(tmp_path) == ("nvme2n1", "nvme10n1", "sda1", "sda2", "sda10")


def test_cpus_from_the_list_else_the_mask(tmp_path: Path) -> None:
    system = SystemRoot(tmp_path)
    (tmp_path / "cpumap").write_text("00000000,0000000f\n")
    assert system.read_cpus(tmp_path, "cpulist", "cpumap") == (0, 1, 2, 3)
    (tmp_path / "cpulist").write_text("garbage\n")
    assert system.read_cpus(tmp_path, "cpulist", "cpumap") == (0, 1, 2, 3)
    (tmp_path / "cpulist").write_text("8-9\n")
    assert system.read_cpus(tmp_path, "cpulist", "cpumap") == (8, 9)


# --- writing attributes ----------------------------------------------------------------


def test_an_attribute_is_written_whole_and_a_refusal_keeps_its_errno(tmp_path: Path) -> None:
    system = SystemRoot(sysfs=tmp_path)
    (tmp_path / "read_ahead_kb").write_text("128\n")
    system.write_attribute("sys/read_ahead_kb", "0")
    assert (tmp_path / "read_ahead_kb").read_text() == "0"
    (tmp_path / "scheduler").mkdir()
    with pytest.raises(SystemFileError, match=rf"^cannot write {tmp_path}/scheduler: ") as refused:
        system.write_attribute("sys/scheduler", "none")
    assert refused.value.errno == errno.EISDIR


def test_a_0444_attribute_is_not_writable_even_for_root(tmp_path: Path) -> None:
    attribute = tmp_path / "rotational"
    attribute.write_text("0\n")
    assert SystemRoot().writable(attribute)
    attribute.chmod(0o444)
    assert not SystemRoot().writable(attribute)
    assert not SystemRoot().writable(tmp_path / "missing")


# --- block devices: one lookup ----------------------------------------------------------


def test_class_block_is_searched_before_block(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    in_class = _device(sysfs, "devices/pci0000:00/0000:00:02.0/block/sda", "8:0")
    elsewhere = _device(sysfs, "devices/virtual/block/sda", "8:99")
    _link(sysfs / "class" / "block" / "sda", in_class)
    _link(sysfs / "block" / "sda", elsewhere)
    only_block = _device(sysfs, "devices/virtual/block/old0", "3:0")
    _link(sysfs / "block" / "old0", only_block)
    system = SystemRoot(tmp_path)
    assert system.block_dir("sda") == in_class
    assert blockdevs.block_devno(system, "sda") == "8:0"
    assert system.block_dir("old0") == only_block  # an old kernel's disk, in block/ only
    assert blockdevs.block_names(system) == ("sda", "old0")
    assert blockdevs.whole_disks(system) == ("old0", "sda")


@pytest.mark.parametrize("name", ["", ".", "..", "../sda", "a/b", "nosuch"])
def test_no_directory_for_names_that_are_not_devices(tmp_path: Path, name: str) -> None:
    system = SystemRoot(tmp_path)
    _link(tmp_path / "sys" / "class" / "block" / "sda", _device(tmp_path / "sys", "devices/x/sda", "8:0"))
    assert system.block_dir(name) is None
    assert blockdevs.block_devno(system, name) is None
    assert (
        blockdevs.partitions(system, name),
        blockdevs.holders(system, name),
        blockdevs.slaves(system, name),
    ) == ((), (), ())


def test_partitions_and_their_disk(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.disk("sdx", partitions=("sdx1", "sdx2", "sdx10"))
    fake.disk("sdy")
    system = SystemRoot(tmp_path)
    assert blockdevs.partitions(system, "sdx") == ("sdx1", "sdx2", "sdx10")
    assert blockdevs.whole_disk(system, "sdx10") == "sdx"
    assert blockdevs.whole_disk(system, "sdx") == "sdx"
    assert blockdevs.whole_disk(system, "nosuch") == "nosuch"
    assert blockdevs.is_partition(system, "sdx2") and not blockdevs.is_partition(system, "sdx")
    assert blockdevs.partitions(system, "sdx1") == ()
    assert blockdevs.whole_disks(system) == ("sdx", "sdy")


def test_dm_and_md_stacks_down_to_their_disks(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.disk("nvme0n1", partitions=("nvme0n1p1",))
    fake.disk("nvme1n1", partitions=("nvme1n1p1",))
    fake.disk("sda")
    fake.disk("dm-0", slaves=("nvme0n1p1", "nvme1n1p1"), dm_name="vg-fast")
    fake.disk("dm-1", slaves=("nvme0n1", "sda"), dm_name="vg-mixed")
    fake.disk("md0", slaves=("dm-0", "dm-1"))
    system = SystemRoot(tmp_path)
    assert blockdevs.slaves(system, "dm-0") == ("nvme0n1p1", "nvme1n1p1")
    assert blockdevs.holders(system, "nvme0n1p1") == ("dm-0",)
    assert blockdevs.devices_below(system, "md0") == (
        "md0",
        "dm-0",
        "nvme0n1p1",
        "nvme1n1p1",
        "dm-1",
        "nvme0n1",
        "sda",
    )
    assert blockdevs.disks_under(system, "md0") == ("nvme0n1", "nvme1n1", "sda")
    assert blockdevs.disks_under(system, "nvme1n1p1") == ("nvme1n1",)
    assert blockdevs.disks_under(system, "sda") == ("sda",)
    assert blockdevs.dm_device(system, "vg-mixed") == "dm-1"
    assert blockdevs.dm_device(system, "nothing") is None


def test_a_cycle_in_slaves_ends_the_walk(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.disk("dm-0")
    fake.disk("dm-1", slaves=("dm-0",))
    dm0 = (tmp_path / "sys" / "class" / "block" / "dm-0").resolve()
    (dm0 / "slaves" / "dm-1").symlink_to((tmp_path / "sys" / "class" / "block" / "dm-1").resolve())
    assert blockdevs.devices_below(SystemRoot(tmp_path), "dm-1") == ("dm-1", "dm-0")
    assert blockdevs.disks_under(SystemRoot(tmp_path), "dm-1") == ()


def test_device_numbers_to_names_by_link_else_by_dev_files(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path / "linked")
    fake.disk("sdx", partitions=("sdx1",))
    linked = SystemRoot(tmp_path / "linked")
    assert blockdevs.block_name(linked, blockdevs.block_devno(linked, "sdx1") or "") == "sdx1"
    assert blockdevs.block_name(linked, "8:250") is None
    # No sys/dev/block (old kernels, small fake trees): the dev files decide.
    bare = tmp_path / "bare" / "sys"
    disk = _device(bare, "devices/virtual/block/sdz", "8:16")
    _link(bare / "class" / "block" / "sdz", disk)
    _link(
        bare / "class" / "block" / "sdz1",
        _device(bare, "devices/virtual/block/sdz/sdz1", "8:17", partition=True),
    )
    assert blockdevs.block_name(SystemRoot(sysfs=bare), "8:17") == "sdz1"
    assert blockdevs.block_name(SystemRoot(sysfs=bare), "8:18") is None


def test_a_real_snapshot(snapshots: SnapshotCache) -> None:
    root = snapshots.root("32em64t-2n8c+dax+nvme+mic+dimms")
    system = SystemRoot(root)
    sda3 = system.block_dir("sda3")
    assert sda3 is not None and (root / "sys" / "devices") in sda3.parents
    assert blockdevs.whole_disk(system, "sda3") == "sda"
    assert blockdevs.partitions(system, "sda") == ("sda1", "sda2", "sda3", "sda4", "sda5")
    assert blockdevs.disks_under(system, "nvme0n1p1") == ("nvme0n1",)
    assert blockdevs.block_name(system, blockdevs.block_devno(system, "nvme0n1p1") or "") == "nvme0n1p1"
    assert "sda3" not in blockdevs.whole_disks(system) and "nvme0n1" in blockdevs.whole_disks(system)


def test_devno_text_and_nodes() -> None:
    assert devno_text(os.makedev(259, 3)) == "259:3"
    assert block_node_devno("/dev/null") is None  # a character device
    assert block_node_devno("tmpfs") is None  # a mount source, not a path
    assert block_node_devno("/nonexistent/sda") is None


# --- procfs: one parser per file --------------------------------------------------------


def _proc(tmp_path: Path, files: dict[str, str]) -> SystemRoot:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return SystemRoot(procfs=tmp_path)


def test_mountinfo_and_swaps(tmp_path: Path) -> None:
    system = _proc(
        tmp_path,
        {
            "self/mountinfo": (
                "22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/mapper/root rw\n"
                "36 22 8:98 / /mnt/my\\040data rw - xfs /dev/sdx2 rw\n"
                "37 22 0:52 / /srv rw - btrfs /dev/sdc1 rw,compress=zstd:3,space_cache=v2\n"
                "not a mountinfo line\n"
            ),
            "swaps": "Filename Type Size Used Priority\n/swap\\040file file 1024 0 -2\n/dev/sdb2 partition 8 0 -3\n",
        },
    )
    assert blockdevs.mounts(system) == [
        Mount("252:1", "/", "/dev/mapper/root", "ext4", "rw"),
        Mount("8:98", "/mnt/my data", "/dev/sdx2", "xfs", "rw"),
        Mount("0:52", "/srv", "/dev/sdc1", "btrfs", "rw,compress=zstd:3,space_cache=v2"),
    ]
    assert blockdevs.swaps(system) == ["/swap file", "/dev/sdb2"]
    assert blockdevs.mounts(SystemRoot(procfs=tmp_path / "none")) == []
    assert blockdevs.swaps(SystemRoot(procfs=tmp_path / "none")) == []


def test_process_stat_survives_any_command_name(tmp_path: Path) -> None:
    tail = " ".join(str(n) for n in range(4, 53))  # fields 4 (ppid) to 52 (exit_code)
    system = _proc(
        tmp_path,
        {
            "40/stat": f"40 (a) (b c) Z {tail}\n",
            "41/stat": "41 (fio) S 40 41 41 0\n",
            "42/stat": "garbage\n",
            "43/stat": "43 (x) S\n",
        },
    )
    zombie = procfs.process_stat(system, 40)
    assert zombie is not None
    assert (zombie.comm, zombie.state, zombie.ppid, zombie.start_ticks, zombie.exit_code) == (
        "a) (b c",
        "Z",
        4,
        22,
        52,
    )
    assert zombie.field(3) == "Z" and zombie.field(53) is None and zombie.field(1) is None
    short = procfs.process_stat(system, 41)
    assert short is not None and (short.ppid, short.start_ticks, short.exit_code) == (40, None, None)
    assert procfs.process_stat(system, 42) is None and procfs.process_stat(system, 43) is None
    assert procfs.process_stat(system, 44) is None
    assert procfs.pids(system) == [40, 41, 42, 43]
    assert procfs.parent_pids(system) == {40: 4, 41: 40}


def test_this_process_through_the_real_procfs() -> None:
    system = SystemRoot()
    me = procfs.process_stat(system, os.getpid())
    assert me is not None and me.ppid == os.getppid() and me.start_ticks is not None
    assert procfs.has_children_lists(system, os.getpid())
    status = procfs.process_status(system, os.getpid())
    assert status is not None and status["Pid"] == str(os.getpid())
    assert os.getpid() in procfs.pids(system)
    environ = procfs.process_environ(system, os.getpid())
    assert environ is not None and any(entry.startswith(b"PATH=") for entry in environ)


def test_status_children_numa_maps_and_cpuinfo(tmp_path: Path) -> None:
    system = _proc(
        tmp_path,
        {
            "10/status": "Name:\tfio\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n",
            "10/task/10/children": "11 12 ",
            "10/task/13/children": "14",
            "10/numa_maps": "7f00 bind:1 anon=1\n7f01 default file=/x\n7f02 bind:0 anon=1\n7f03 interleave",
            "cpuinfo": "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon Gold\n",
        },
    )
    assert procfs.process_status(system, 10) == {
        "Name": "fio",
        "Cpus_allowed_list": "0-1",
        "Mems_allowed_list": "0",
    }
    assert procfs.process_status(system, 99) is None
    assert procfs.has_children_lists(system, 10) and not procfs.has_children_lists(system, 99)
    assert sorted(procfs.task_children(system, 10)) == [11, 12, 14]
    assert procfs.task_children(system, 99) == []
    # The last line may be cut short by the read: it is left out.
    assert procfs.memory_policies(system, 10) == ("bind:0", "bind:1", "default")
    assert procfs.memory_policies(system, 10, head=20) == ("bind:1",)
    assert procfs.memory_policies(system, 99) is None
    assert procfs.process_environ(system, 99) is None
    assert procfs.cpu_model(system) == "Xeon Gold"
    assert procfs.cpu_model(SystemRoot(procfs=tmp_path / "none")) is None


# --- atomic writes and the state directory ---------------------------------------------


def test_atomic_write_replaces_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "journal.json"
    atomic_write(target, "old")
    atomic_write(target, b"new", mode=0o600)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["journal.json"]


def test_atomic_write_syncs_the_file_and_then_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[bool] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write(tmp_path / "f", "x")
    assert synced == [False, True]


@pytest.mark.parametrize("existed", [True, False])
def test_a_failure_mid_write_leaves_the_old_file_and_no_partial_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existed: bool
) -> None:
    target = tmp_path / "created-files.json"
    if existed:
        target.write_text("old")
    real_write = os.write

    def write_half_then_fill_the_disk(fd: int, data: bytes | memoryview) -> int:
        if len(data) > 4:
            return real_write(fd, data[:4])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write_half_then_fill_the_disk)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(target, "x" * 100)
    assert [p.name for p in tmp_path.iterdir()] == (["created-files.json"] if existed else [])
    if existed:
        assert target.read_text() == "old"


def test_atomic_replacing_keeps_the_suffix_and_undoes_a_failed_block(tmp_path: Path) -> None:
    target = tmp_path / "results.parquet"
    with atomic_replacing(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".parquet" and tmp.name.startswith(".")
        tmp.write_text("frame")
    assert target.read_text() == "frame"
    with pytest.raises(RuntimeError), atomic_replacing(target) as tmp:  # noqa: PT012
        tmp.write_text("half")
        raise RuntimeError
    assert target.read_text() == "frame"
    assert [p.name for p in tmp_path.iterdir()] == ["results.parquet"]


def test_a_folder_that_cannot_be_synced_is_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def einval(fd: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "fsync", einval)
    fsync_directory(tmp_path)
    with pytest.raises(FileNotFoundError):
        fsync_directory(tmp_path / "missing")


def test_state_dir_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert state_dir() == tmp_path / "state" / "iobench"
    monkeypatch.setenv("XDG_STATE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_dir() == tmp_path / "home" / ".local" / "state" / "iobench"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert state_dir() == tmp_path / "home" / ".local" / "state" / "iobench"

"""The facts a point's validity checks need, read before and after fio (iobench.system.pointfacts)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest
from loopdev import LoopFactory

from iobench.system import blockdevs, procfs
from iobench.system.hostfs import SystemRoot
from iobench.system.pointfacts import collect, data_extents, data_home
from iobench.system.topology import TargetLocation

CPU = "sys/devices/system/cpu"


def write(root: Path, path: str, text: str) -> Path:
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text + "\n")
    return file


def hot_nvme_machine(root: Path) -> SystemRoot:
    """Two CPUs with cpufreq and throttle counters, an NVMe disk with its hwmon sensor and poll settings."""
    for cpu, (governor, khz) in enumerate((("schedutil", 1_200_000), ("performance", 3_000_000))):
        write(root, f"{CPU}/cpu{cpu}/cpufreq/scaling_governor", governor)
        write(root, f"{CPU}/cpu{cpu}/cpufreq/scaling_cur_freq", str(khz))
        write(root, f"{CPU}/cpu{cpu}/thermal_throttle/core_throttle_count", str(10 + cpu))
        write(root, f"{CPU}/cpu{cpu}/thermal_throttle/package_throttle_count", "3")
    controller = root / "sys/devices/pci0000:00/0000:00:04.0/nvme/nvme0"
    disk = controller / "nvme0n1"
    write(root, str((disk / "queue/io_poll").relative_to(root)), "0")
    write(root, str((disk / "dev").relative_to(root)), "259:0")
    hwmon = controller / "hwmon1"
    write(root, str((hwmon / "name").relative_to(root)), "nvme")
    write(root, str((hwmon / "temp1_input").relative_to(root)), "71850")
    write(root, str((hwmon / "temp1_max").relative_to(root)), "70850")
    write(root, str((hwmon / "temp1_crit").relative_to(root)), "84850")
    (hwmon / "device").symlink_to(controller)
    (disk / "device").symlink_to(controller)
    (root / "sys/block").mkdir(parents=True)
    (root / "sys/block/nvme0n1").symlink_to(disk)
    (root / "sys/class/hwmon").mkdir(parents=True)
    (root / "sys/class/hwmon/hwmon1").symlink_to(hwmon)
    write(root, "sys/module/nvme/parameters/poll_queues", "0")
    write(root, "proc/meminfo", "MemTotal: 1000 kB\nMemAvailable: 512 kB")
    write(root, "proc/self/mountinfo", "22 1 259:1 / / rw - ext4 /dev/nvme0n1p1 rw")
    return SystemRoot(root)


def nvme_target() -> TargetLocation:
    return TargetLocation("/dev/nvme0n1", "block", "nvme0n1", ("nvme0n1",), 0)


def test_cpu_disk_and_sensor_facts_from_sysfs(tmp_path: Path) -> None:
    facts = collect(hot_nvme_machine(tmp_path), [nvme_target()], [0, 1], phase="before")
    assert facts["phase"] == "before"
    assert facts["cpus"] == {
        "0": {"governor": "schedutil", "freq_khz": 1_200_000, "core_throttle": 10, "package_throttle": 3},
        "1": {"governor": "performance", "freq_khz": 3_000_000, "core_throttle": 11, "package_throttle": 3},
    }
    assert facts["disks"]["nvme0n1"] == {"io_poll": 0, "nvme_poll_queues": 0, "write_cache": None}
    assert facts["sensors"] == {
        "nvme0n1": {"name": "nvme", "temp_c": 71.85, "warn_c": 70.85, "crit_c": 84.85}
    }
    assert facts["mem_available"] == 512 * 1024
    assert facts["targets"]["/dev/nvme0n1"]["kind"] == "block"
    assert facts["targets"]["/dev/nvme0n1"]["note"] == "not this machine's: its data extents were not read"


def test_after_fio_only_what_moves_is_read_again(tmp_path: Path) -> None:
    facts = collect(hot_nvme_machine(tmp_path), [nvme_target()], [0], phase="after")
    assert set(facts) == {"phase", "cpus", "sensors", "counts", "notes"}
    assert facts["cpus"]["0"]["core_throttle"] == 10


def test_a_machine_without_these_files_gives_notes_not_errors(tmp_path: Path) -> None:
    facts = collect(SystemRoot(tmp_path), [nvme_target()], [0], phase="before")
    assert facts["cpus"] == {}
    assert facts["sensors"] == {}
    assert facts["disks"]["nvme0n1"] == {"io_poll": None, "nvme_poll_queues": None, "write_cache": None}
    assert any("no cpufreq" in note for note in facts["notes"])
    assert any("no thermal throttle counters" in note for note in facts["notes"])


def test_data_extents_of_a_sparse_a_written_and_a_half_written_file(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse"
    with sparse.open("wb") as handle:
        handle.truncate(8 << 20)
    written = tmp_path / "written"
    written.write_bytes(os.urandom(1 << 20))
    half = tmp_path / "half"
    with half.open("wb") as handle:
        handle.write(os.urandom(2 << 20))
        handle.truncate(4 << 20)
    assert data_extents(str(sparse), 0, 8 << 20) == (0, None)
    assert data_extents(str(written), 0, 1 << 20) == (1 << 20, None)
    assert data_extents(str(half), 0, 4 << 20) == (2 << 20, None)
    assert data_extents(str(half), 1 << 20, 2 << 20) == (1 << 20, None)  # a window of the file
    assert data_extents(str(tmp_path / "missing"), 0, 10)[0] is None


def test_a_file_targets_data_mount_and_region(tmp_path: Path) -> None:
    target = tmp_path / "t.dat"
    with target.open("wb") as handle:
        handle.write(os.urandom(1 << 20))
        handle.truncate(4 << 20)
    location = TargetLocation(str(target), "file", None, (), None)
    facts = collect(SystemRoot(), [location], [0], phase="before", regions={str(target): (0, 2 << 20)})
    seen = facts["targets"][str(target)]
    assert (seen["kind"], seen["region_bytes"], seen["data_bytes"]) == ("file", 2 << 20, 1 << 20)
    later = collect(SystemRoot(), [location], [0], phase="before", regions={str(target): (1 << 20, None)})
    assert later["targets"][str(target)]["region_bytes"] == 3 << 20  # from 1 MiB to the end
    assert later["targets"][str(target)]["data_bytes"] == 0
    assert seen["fstype"]  # the mount holding tmp_path, whatever it is


def test_a_file_fio_has_not_laid_out_yet(tmp_path: Path) -> None:
    location = TargetLocation(str(tmp_path / "new.dat"), "file", None, (), None)
    facts = collect(SystemRoot(), [location], [0], phase="before")
    assert facts["targets"][location.path]["data_bytes"] is None
    assert "does not exist yet" in facts["targets"][location.path]["note"]


@pytest.mark.loopdev
def test_a_loop_devices_data_is_its_backing_files(loops: LoopFactory) -> None:
    loop = loops.attach(16, content=os.urandom(4 << 20))
    location = TargetLocation(loop.path, "block", loop.name, (loop.name,), None)
    facts = collect(SystemRoot(), [location], [0], phase="before")
    seen = facts["targets"][loop.path]
    assert seen["backing"] == str(loop.backing)
    assert seen["region_bytes"] == 16 << 20
    assert seen["data_bytes"] == 4 << 20
    head = collect(SystemRoot(), [location], [0], phase="before", regions={loop.path: (0, 4 << 20)})
    assert head["targets"][loop.path]["data_bytes"] == head["targets"][loop.path]["region_bytes"] == 4 << 20
    assert facts["disks"][loop.name]["io_poll"] == 0


@pytest.mark.loopdev
def test_a_block_device_without_a_backing_file_says_its_data_is_not_visible(
    loops: LoopFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = loops.attach(4)
    monkeypatch.setattr(blockdevs, "loop_backing_file", lambda root, name: None)
    location = TargetLocation(loop.path, "block", loop.name, (loop.name,), None)
    seen = collect(SystemRoot(), [location], [0], phase="before")["targets"][loop.path]
    assert seen["data_bytes"] is None
    assert "written regions of a block device are not visible" in seen["note"]


@pytest.mark.fio
def test_a_run_keeps_each_points_facts_in_its_meta(null_matrix: Any, tmp_path: Path) -> None:
    from iobench.matrix.model import load_matrix
    from iobench.runner.sweep import run
    from iobench.store.rundir import RunDir

    result = run(load_matrix(null_matrix()), out=tmp_path / "out")
    metas = [meta for _, meta in RunDir.open(result.run_dir).point_metas()]
    assert len(metas) == 4
    for meta in metas:
        assert meta.facts is not None
        assert meta.facts["before"]["phase"] == "before" and meta.facts["after"]["phase"] == "after"
        target = str(tmp_path / "target.dat")
        assert target in meta.facts["before"]["targets"]
        assert meta.facts["before"]["mem_available"] > 0
    # iobench makes the new file empty before the first point, and fio lays it out during it
    first = metas[0].facts["before"]["targets"][str(tmp_path / "target.dat")]  # type: ignore[index]
    assert first["data_bytes"] in (0, 8 << 20), first


def test_facts_that_cannot_be_read_are_a_note_never_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def gone(root: SystemRoot) -> dict[str, int]:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(procfs, "meminfo", gone)
    facts = collect(hot_nvme_machine(tmp_path), [nvme_target()], [0], phase="before")
    assert facts == {
        "phase": "before",
        "notes": ["the facts could not be read: [Errno 5] Input/output error"],
    }


def stacked_machine(root: Path) -> SystemRoot:
    """dm-0 over sda and sdb, zram0, and /proc/diskstats for them."""
    for name in ("dm-0", "sda", "sdb", "zram0"):
        write(root, f"sys/block/{name}/dev", "0:0")
    for member in ("sda", "sdb"):
        (root / "sys/block/dm-0/slaves").mkdir(parents=True, exist_ok=True)
        (root / "sys/block/dm-0/slaves" / member).mkdir()
    write(
        root,
        "proc/diskstats",
        "   8 0 sda 10 1 80 0 20 2 160 0 0 0 0\n   8 16 sdb 30 3 240 0 40 4 320 0 0 0 0\n"
        " 253 0 dm-0 40 0 320 0 60 0 480 0 0 0 0",
    )
    return SystemRoot(root)


def test_where_a_stacks_data_is_held_and_what_its_devices_counted(tmp_path: Path) -> None:
    system = stacked_machine(tmp_path)
    assert data_home(system, "dm-0") == {"holding": ["sda", "sdb"], "memory": None, "loops": []}
    assert data_home(system, "zram0") == {"holding": [], "memory": "zram0 is RAM (zram)", "loops": []}
    location = TargetLocation("/dev/dm-0", "block", "dm-0", ("sda", "sdb"), None)
    counts = collect(system, [location], [], phase="after")["counts"]
    assert counts == {
        "dm-0": {
            "read_ios": 40,
            "read_merges": 0,
            "read_bytes": 320 * 512,
            "write_ios": 60,
            "write_merges": 0,
            "write_bytes": 480 * 512,
        },
        "sda": {
            "read_ios": 10,
            "read_merges": 1,
            "read_bytes": 80 * 512,
            "write_ios": 20,
            "write_merges": 2,
            "write_bytes": 160 * 512,
        },
        "sdb": {
            "read_ios": 30,
            "read_merges": 3,
            "read_bytes": 240 * 512,
            "write_ios": 40,
            "write_merges": 4,
            "write_bytes": 320 * 512,
        },
    }


@pytest.mark.loopdev
def test_a_loop_devices_data_is_held_by_the_disk_under_its_backing_file(loops: LoopFactory) -> None:
    loop = loops.attach(4, content=os.urandom(4 << 20))
    system = SystemRoot()
    disk = blockdevs.block_name(
        system, f"{os.major(loop.backing.stat().st_dev)}:{os.minor(loop.backing.stat().st_dev)}"
    )
    home = data_home(system, loop.name)
    assert home["holding"] == [disk] and home["memory"] is None
    assert home["loops"] == [{"name": loop.name, "backing": str(loop.backing), "dio": 0}]
    location = TargetLocation(loop.path, "block", loop.name, (loop.name,), None)
    before = collect(system, [location], [0], phase="before")
    with open(loop.path, "rb") as handle:  # a read the loop device counts
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        handle.read(1 << 20)
    after = collect(system, [location], [0], phase="after")
    assert set(before["counts"]) == {loop.name, disk}
    assert after["counts"][loop.name]["read_bytes"] - before["counts"][loop.name]["read_bytes"] >= 1 << 20
    assert before["targets"][loop.path]["holding"] == [disk]


@pytest.mark.loopdev
def test_a_stack_of_loop_devices_is_walked_to_the_disk_at_the_bottom(loops: LoopFactory) -> None:
    """loop B over a file of ext4 on loop A over a file of this machine's disk: the disk holds B's data."""
    lower = loops.attach(64)
    loops.mkfs_ext4(lower)
    mount = loops.mount(lower)
    with contextlib.ExitStack() as stack:
        upper = LoopFactory(mount, stack).attach(4, content=os.urandom(4 << 20))
        system = SystemRoot()
        home = data_home(system, upper.name)
        assert [loop["name"] for loop in home["loops"]] == [upper.name, lower.name]
        info = lower.backing.stat()
        assert home["holding"] == [
            blockdevs.block_name(system, f"{os.major(info.st_dev)}:{os.minor(info.st_dev)}")
        ]
        assert home["memory"] is None

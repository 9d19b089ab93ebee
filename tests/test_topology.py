"""Topology discovery against real sysfs snapshots (checked with hwloc) and small fake trees."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from loopdev import LoopFactory
from sysfs_snapshots import SNAPSHOTS, FakeSysfs, SnapshotCache, hwloc_reading

from iobench.errors import TopologyError
from iobench.system.topology import Topology, discover_topology, locate_target


@pytest.fixture(scope="session")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> SnapshotCache:
    return SnapshotCache(tmp_path_factory)


def _snapshot(snapshots: SnapshotCache, name: str) -> Topology:
    return discover_topology(snapshots.root(name))


# --- every snapshot against hwloc's reading ----------------------------------


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_nodes_match_hwloc(snapshots: SnapshotCache, name: str) -> None:
    topo = _snapshot(snapshots, name)
    hwloc = hwloc_reading(name)
    assert {node.id: node.cpus for node in topo.nodes} == hwloc.nodes


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_cores_match_hwloc(snapshots: SnapshotCache, name: str) -> None:
    topo = _snapshot(snapshots, name)
    hwloc = hwloc_reading(name)
    assert {core.cpus for core in topo.cores} == hwloc.cores
    assert len(topo.cores) == len(hwloc.cores)
    # Every core's node is the node holding its CPUs.
    for core in topo.cores:
        node = topo.node(core.node) if core.node is not None else None
        assert node is not None
        assert set(core.cpus) <= set(node.cpus)


@pytest.mark.parametrize(
    ("name", "expected_devices"),
    [
        ("2pa-pcidomain32bits", {"vda", "sr0"}),
        ("32em64t-2n8c+dax+nvme+mic+dimms", {"sda", "nvme0n1", "pmem0.1", "pmem1"}),
        ("40intel64-2g2n4c+pcilocality", {"sda", "sr0"}),
    ],
)
def test_device_home_nodes_match_hwloc(
    snapshots: SnapshotCache, name: str, expected_devices: set[str]
) -> None:
    topo = _snapshot(snapshots, name)
    hwloc = hwloc_reading(name)
    compared = {dev.name for dev in topo.devices if dev.name in hwloc.device_nodes}
    assert expected_devices <= compared
    for dev_name in compared:
        device = topo.device(dev_name)
        assert device is not None
        assert device.numa_node == hwloc.device_nodes[dev_name], dev_name


# --- what each snapshot is there for ------------------------------------------


def test_power_sparse_nodes_and_distances(snapshots: SnapshotCache) -> None:
    topo = _snapshot(snapshots, "256ppc-8n8s4t")
    assert [node.id for node in topo.nodes] == [0, 1, 4, 5, 8, 9, 12, 13]
    assert topo.distance(0, 1) == 20
    assert topo.distance(0, 4) == 40
    assert topo.distance(12, 13) == 20
    assert topo.distance(13, 13) == 10
    assert topo.distance(0, 2) is None  # node 2 does not exist
    assert len(topo.online_cpus()) == 256
    # Old kernels there have only cpumap, no cpulist.
    assert [n.cpus for n in topo.nodes if n.id == 4] == [tuple(range(64, 96))]
    # POWER LPARs report physical_package_id -1; SMT4 cores are still found.
    assert {core.package for core in topo.cores} == {-1}
    assert topo.cores[1].cpus == (4, 5, 6, 7)


def test_hex_masks_only_and_no_online_file(snapshots: SnapshotCache) -> None:
    root = snapshots.root("16em64t-4s2c2t")
    assert not (root / "sys/devices/system/cpu/online").exists()
    assert not (root / "sys/devices/system/cpu/cpu0/topology/thread_siblings_list").exists()
    topo = discover_topology(root)
    assert topo.online_cpus() == tuple(range(16))
    assert topo.cores[0].cpus == (0, 8)
    # core_id repeats across packages: four cores have core_id 0, one per package.
    assert sorted((c.package, c.core_id) for c in topo.cores if c.core_id == 0) == [
        (0, 0),
        (1, 0),
        (2, 0),
        (3, 0),
    ]


def test_nvme_home_from_local_cpulist(snapshots: SnapshotCache) -> None:
    root = snapshots.root("32em64t-2n8c+dax+nvme+mic+dimms")
    pci = root / "sys/devices/pci0000:00/0000:00:02.0"
    # The kernel does not know the NVMe's node, but its local CPUs lie in node 0.
    assert (pci / "numa_node").read_text().strip() == "-1"
    assert (pci / "local_cpulist").read_text().strip() == "0-3"
    topo = discover_topology(root)
    nvme = topo.device("nvme0n1")
    assert nvme is not None
    assert nvme.numa_node == 0
    assert nvme.partitions == ("nvme0n1p1",)
    sda = topo.device("sda")
    assert sda is not None
    assert (sda.numa_node, sda.scheduler, sda.readahead_kb, sda.rotational) == (0, "cfq", 128, True)
    assert sda.schedulers == ("noop", "anticipatory", "deadline", "cfq")
    assert sda.model == "ST9250610NS"
    assert sda.size_bytes == 488397168 * 512
    assert sda.partitions == ("sda1", "sda2", "sda3", "sda4", "sda5")
    names = [dev.name for dev in topo.devices]
    assert "loop0" in names
    assert not any(name.startswith("ram") for name in names)
    assert "sda1" not in names  # partitions are listed under their disk


def test_unknown_locality_stays_unknown(snapshots: SnapshotCache) -> None:
    """40intel64: the RAID controller reports numa_node -1 and local_cpulist 0-39.

    hwloc (this test of its suite) attaches the host bridge to a Group of
    nodes 0 and 2; the kernel, and so numactl, only knows "anywhere". We follow
    the kernel: no single node, so `local` must be skipped, not guessed.
    """
    root = snapshots.root("40intel64-2g2n4c+pcilocality")
    assert (root / "sys/devices/pci0000:00/0000:00:03.0/numa_node").read_text().strip() == "-1"
    topo = discover_topology(root)
    sda = topo.device("sda")
    assert sda is not None
    assert sda.numa_node is None
    assert hwloc_reading("40intel64-2g2n4c+pcilocality").device_nodes["sda"] is None


def test_to_dict_is_spec_shape_and_json(snapshots: SnapshotCache) -> None:
    topo = _snapshot(snapshots, "32em64t-2n8c+dax+nvme+mic+dimms")
    data = json.loads(json.dumps(topo.to_dict()))
    assert {"nodes", "cores", "devices"} <= set(data)
    assert data["nodes"][0] == {"id": 0, "cpus": list(range(8)), "distances": [10, 21]}
    assert {"package", "core_id", "cpus"} <= set(data["cores"][0])
    sda = next(d for d in data["devices"] if d["name"] == "sda")
    assert sda["numa_node"] == 0
    assert sda["schedulers"] == ["noop", "anticipatory", "deadline", "cfq"]
    for key in ("scheduler", "readahead_kb", "rotational", "model", "size_bytes"):
        assert key in sda


@pytest.mark.parametrize(
    ("name", "path", "kind", "device", "disks", "home"),
    [
        ("32em64t-2n8c+dax+nvme+mic+dimms", "/dev/sda3", "block", "sda3", ("sda",), 0),
        ("32em64t-2n8c+dax+nvme+mic+dimms", "/dev/nvme0n1p1", "block", "nvme0n1p1", ("nvme0n1",), 0),
        ("32em64t-2n8c+dax+nvme+mic+dimms", "/dev/pmem1", "block", "pmem1", ("pmem1",), 1),
        ("40intel64-2g2n4c+pcilocality", "/dev/sda", "block", "sda", ("sda",), None),
        ("2pa-pcidomain32bits", "/dev/vda1", "block", "vda1", ("vda",), 0),
        ("2pa-pcidomain32bits", "/dev/sdq", "unknown", None, (), None),
        ("2pa-pcidomain32bits", "/data/fio.dat", "file", None, (), None),
    ],
)
def test_locate_target_in_snapshot(
    snapshots: SnapshotCache,
    name: str,
    path: str,
    kind: str,
    device: str | None,
    disks: tuple[str, ...],
    home: int | None,
) -> None:
    loc = locate_target(path, _snapshot(snapshots, name))
    assert (loc.path, loc.kind, loc.device, loc.disks, loc.home_node) == (path, kind, device, disks, home)


# --- fake trees for what the snapshots lack -----------------------------------


def _two_node_machine(tmp_path: Path) -> FakeSysfs:
    """4 CPUs, SMT2: cores {0,2} and {1,3}; node 0 = {0,2}, node 1 = {1,3}."""
    fake = FakeSysfs(tmp_path)
    fake.write("devices/system/cpu/online", "0-3\n")
    for cpu in range(4):
        fake.cpu(cpu, package=cpu % 2, core=0, siblings=f"{cpu % 2},{cpu % 2 + 2}")
    fake.node(0, cpulist="0,2", distance="10 21")
    fake.node(1, cpulist="1,3", distance="21 10")
    return fake


def test_offline_cpus_are_left_out(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.write("devices/system/cpu/online", "0-1,3\n")
    fake.cpu(0, 0, 0, siblings="0,2")
    fake.cpu(1, 0, 1, siblings="1,3")
    fake.cpu(2, 0, 0, online=False)
    fake.cpu(3, 0, 1, siblings="1,3")
    fake.node(0, cpulist="0-3")
    topo = discover_topology(tmp_path)
    assert topo.online_cpus() == (0, 1, 3)
    assert [n.cpus for n in topo.nodes] == [(0, 1, 3)]
    assert [core.cpus for core in topo.cores] == [(0,), (1, 3)]


def test_per_cpu_online_files_without_global_file(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.cpu(0, 0, 0, siblings="0")
    fake.cpu(1, 0, 1, online=False)
    fake.cpu(2, 0, 2, siblings="2")
    topo = discover_topology(tmp_path)
    assert topo.online_cpus() == (0, 2)
    # No node directory at all: one node 0 with every online CPU.
    assert [(n.id, n.cpus) for n in topo.nodes] == [(0, (0, 2))]


def test_siblings_decide_cores_not_core_id(tmp_path: Path) -> None:
    # Two dies in one package both number their first core 0 (die_id tells them
    # apart); thread_siblings says they are different cores.
    fake = FakeSysfs(tmp_path)
    fake.cpu(0, 0, 0, siblings="0,2")
    fake.cpu(1, 0, 0, siblings="1,3")
    fake.cpu(2, 0, 0, siblings="0,2")
    fake.cpu(3, 0, 0, siblings="1,3")
    topo = discover_topology(tmp_path)
    assert [core.cpus for core in topo.cores] == [(0, 2), (1, 3)]


def test_sparse_nodes_and_node_without_cpus(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.write("devices/system/cpu/online", "0-1\n")
    fake.cpu(0, 0, 0, siblings="0")
    fake.cpu(1, 1, 0, siblings="1")
    fake.node(0, cpulist="0", distance="10 20 30")
    fake.node(2, cpulist="", distance="20 10 30")  # memory only (CXL, HBM)
    fake.node(5, cpulist="1", distance="30 30 10")
    topo = discover_topology(tmp_path)
    assert [(n.id, n.cpus) for n in topo.nodes] == [(0, (0,)), (2, ()), (5, (1,))]
    assert topo.distance(0, 5) == 30
    assert topo.distance(5, 2) == 30
    assert topo.distance(2, 0) == 20
    assert topo.cores[1].node == 5


def test_only_hex_masks_with_nul_bytes(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.write("devices/system/cpu/online", "0-3\x00\n")
    for cpu in range(4):
        fake.cpu(cpu, 0, cpu % 2, siblings_mask=f"00000000,0000000{5 << (cpu % 2):x}\x00")
    fake.node(0, cpumap="00000000,0000000f\x00", distance="10\x00")
    topo = discover_topology(tmp_path)
    assert [n.cpus for n in topo.nodes] == [(0, 1, 2, 3)]
    assert [core.cpus for core in topo.cores] == [(0, 2), (1, 3)]
    assert topo.distance(0, 0) == 10


def test_distance_row_of_wrong_length_is_dropped(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.cpu(0, 0, 0, siblings="0")
    fake.node(0, cpulist="0", distance="10 20")  # names a node that has no directory
    topo = discover_topology(tmp_path)
    assert topo.nodes[0].distances == ()
    assert topo.distance(0, 0) is None


def test_garbage_and_unreadable_files_become_none(tmp_path: Path) -> None:
    fake = _two_node_machine(tmp_path)
    fake.write("devices/system/cpu/online", "zzz\n")  # falls back to cpu* directories
    dev = fake.disk("nvme0n1", parent=fake.pci("0000:00:02.0", numa_node=1))
    (dev / "queue" / "scheduler").unlink()
    (dev / "queue" / "scheduler").mkdir()  # reading a directory fails
    (dev / "queue" / "read_ahead_kb").write_text("lots\n")
    (dev / "size").unlink()
    topo = discover_topology(tmp_path)
    assert topo.online_cpus() == (0, 1, 2, 3)
    nvme = topo.device("nvme0n1")
    assert nvme is not None
    assert (nvme.scheduler, nvme.schedulers, nvme.readahead_kb, nvme.size_bytes) == (None, (), None, None)
    assert nvme.numa_node == 1


def test_no_cpu_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="contains sys/"):
        discover_topology(tmp_path)


@pytest.mark.parametrize(
    ("numa_node", "local_cpulist", "home"),
    [
        (1, None, 1),
        (-1, None, None),
        (-1, "0-3", None),  # spans both nodes
        (-1, "1,3", 1),  # inside node 1 only
        (-1, "3", 1),
    ],
)
def test_home_node_rules(tmp_path: Path, numa_node: int, local_cpulist: str | None, home: int | None) -> None:
    fake = _two_node_machine(tmp_path)
    fake.disk("nvme0n1", parent=fake.pci("0000:00:02.0", numa_node, local_cpulist))
    topo = discover_topology(tmp_path)
    assert topo.device("nvme0n1") is not None
    assert topo.device("nvme0n1").numa_node == home  # type: ignore[union-attr]


def test_stacked_devices_resolve_to_member_disks(tmp_path: Path) -> None:
    fake = _two_node_machine(tmp_path)
    fake.disk("nvme0n1", parent=fake.pci("0000:00:02.0", 1), partitions=("nvme0n1p1",))
    fake.disk("nvme1n1", parent=fake.pci("0000:00:03.0", 1), partitions=("nvme1n1p1",))
    fake.disk("sda", parent=fake.pci("0000:00:1f.2", 0))
    fake.disk("dm-0", slaves=("nvme0n1p1", "nvme1n1p1"), dm_name="vg-fast")
    fake.disk("dm-1", slaves=("nvme0n1", "sda"), dm_name="vg-mixed")
    fake.disk("md0", slaves=("dm-0",))
    topo = discover_topology(tmp_path)

    part = locate_target("/dev/nvme0n1p1", topo)
    assert (part.kind, part.device, part.disks, part.home_node) == ("block", "nvme0n1p1", ("nvme0n1",), 1)
    fast = locate_target("/dev/mapper/vg-fast", topo)
    assert (fast.device, fast.disks, fast.home_node) == ("dm-0", ("nvme0n1", "nvme1n1"), 1)
    mixed = locate_target("/dev/dm-1", topo)
    assert (mixed.disks, mixed.home_node) == (("nvme0n1", "sda"), None)  # members disagree
    md = locate_target("/dev/md0", topo)
    assert (md.disks, md.home_node) == (("nvme0n1", "nvme1n1"), 1)
    nvme = topo.device("nvme0n1")
    assert nvme is not None
    assert set(nvme.holders) == {"dm-1"}
    dm0 = topo.device("dm-0")
    assert dm0 is not None
    assert dm0.slaves == ("nvme0n1p1", "nvme1n1p1")
    loop = locate_target("/dev/mapper/nothing", topo)
    assert (loop.kind, loop.device) == ("unknown", None)


def test_loop_device_has_no_home(tmp_path: Path) -> None:
    fake = _two_node_machine(tmp_path)
    fake.disk("loop3")
    topo = discover_topology(tmp_path)
    assert topo.device("loop3") is not None
    assert topo.device("loop3").numa_node is None  # type: ignore[union-attr]
    assert locate_target("/dev/loop3", topo).home_node is None


# --- this machine ---------------------------------------------------------------


def test_live_machine() -> None:
    topo = discover_topology("/")
    node_dirs = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    assert len(topo.nodes) == max(1, len(node_dirs))
    # os.cpu_count() is sysconf(_SC_NPROCESSORS_ONLN): the kernel's own online count.
    assert len(topo.online_cpus()) == os.cpu_count()
    assert sorted(cpu for core in topo.cores for cpu in core.cpus) == list(topo.online_cpus())
    assert topo.fsroot == "/"


def test_locate_real_file(tmp_path: Path) -> None:
    topo = discover_topology("/")
    target = tmp_path / "fio.dat"
    target.write_bytes(b"x")
    loc = locate_target(str(target), topo)
    devno = tmp_path.stat().st_dev
    assert loc.kind == "file"
    if os.major(devno) == 0:
        assert (loc.device, loc.home_node) == (None, None)
    else:
        expected = Path(os.path.realpath(f"/sys/dev/block/{os.major(devno)}:{os.minor(devno)}"))
        assert loc.device == expected.name
        assert loc.disks
        # A file not created yet is placed by its nearest existing directory.
        later = locate_target(str(tmp_path / "not" / "yet" / "there.dat"), topo)
        assert (later.kind, later.device, later.home_node) == ("file", loc.device, loc.home_node)


def test_locate_file_on_pseudo_filesystem() -> None:
    # /proc (major 0, like tmpfs and overlay) has no block device under it.
    loc = locate_target("/proc/iobench-does-not-exist", discover_topology("/"))
    assert (loc.kind, loc.device, loc.disks, loc.home_node) == ("file", None, (), None)


def test_locate_missing_device_node() -> None:
    loc = locate_target("/dev/iobench-no-such-disk", discover_topology("/"))
    assert (loc.kind, loc.device) == ("unknown", None)


@pytest.fixture
def loop_device(loops: LoopFactory) -> str:
    """A 16 MiB loop device over a file in tmp_path, detached (and its settings restored) afterwards."""
    return loops.attach().path


@pytest.mark.loopdev
def test_live_loop_device(loop_device: str) -> None:
    name = Path(loop_device).name
    topo = discover_topology("/")
    device = topo.device(name)
    assert device is not None
    assert device.size_bytes == 16 << 20
    assert device.numa_node is None  # virtual: no PCI device above it
    assert device.scheduler is None or device.scheduler in device.schedulers
    loc = locate_target(loop_device, topo)
    assert (loc.kind, loc.device, loc.disks, loc.home_node) == ("block", name, (name,), None)


@pytest.mark.loopdev
def test_live_file_on_loop_filesystem(loops: LoopFactory) -> None:
    loop = loops.attach()
    loops.mkfs_ext4(loop)
    mountpoint = loops.mount(loop)
    topo = discover_topology("/")
    loc = locate_target(str(mountpoint / "fio.dat"), topo)  # not created yet
    assert (loc.kind, loc.device, loc.disks, loc.home_node) == ("file", loop.name, (loop.name,), None)

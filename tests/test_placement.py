"""Placement: what users trust when they compare local, remote and SMT results."""

from __future__ import annotations

from pathlib import Path

import pytest
from sysfs_snapshots import FakeSysfs, SnapshotCache

from iobench.planner.placement import Placement, Skip, resolve_placement
from iobench.system.topology import Topology, discover_topology


@pytest.fixture(scope="session")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> SnapshotCache:
    return SnapshotCache(tmp_path_factory)


@pytest.fixture(scope="session")
def power(snapshots: SnapshotCache) -> Topology:
    """256ppc-8n8s4t: 8 sparse nodes of 32 CPUs, SMT4, distances 10/20/40."""
    return discover_topology(snapshots.root("256ppc-8n8s4t"))


@pytest.fixture(scope="session")
def intel_smt2(snapshots: SnapshotCache) -> Topology:
    """16em64t-4s2c2t: 4 sockets, one NUMA node, SMT2 (cores {0,8}, {1,9}, ...)."""
    return discover_topology(snapshots.root("16em64t-4s2c2t"))


@pytest.fixture(scope="session")
def amd8(snapshots: SnapshotCache) -> Topology:
    """16amd64-8n2c: 8 nodes of 2 single-thread cores, all remote distances 20."""
    return discover_topology(snapshots.root("16amd64-8n2c"))


def _placed(result: Placement | Skip) -> Placement:
    assert isinstance(result, Placement), result
    return result


def _skipped(result: Placement | Skip) -> str:
    assert isinstance(result, Skip), result
    return result.reason


# --- parsing ---------------------------------------------------------------------


def test_bad_numjobs_is_a_programming_error(power: Topology) -> None:
    with pytest.raises(ValueError, match="numjobs 0"):
        resolve_placement("local", "node", 0, 0, power)


# --- binding ---------------------------------------------------------------------


def test_local_binds_cpus_and_memory_to_home(power: Topology) -> None:
    p = _placed(resolve_placement("local", "node", 60, 4, power))
    assert (p.cpu_node, p.mem_node) == (4, 4)
    assert p.cpus == tuple(range(64, 96))
    assert p.job_cpus is None
    assert p.numactl_args == ("--cpunodebind=4", "--membind=4")


@pytest.mark.parametrize(
    ("home", "remote"),
    # POWER: each node's nearest other node is its pair (distance 20), not id order.
    [(0, 1), (1, 0), (4, 5), (5, 4), (12, 13), (13, 12)],
)
def test_remote_is_nearest_other_node(power: Topology, home: int, remote: int) -> None:
    p = _placed(resolve_placement("remote", "node", 4, home, power))
    assert p.cpu_node == p.mem_node == remote
    assert p.numactl_args == (f"--cpunodebind={remote}", f"--membind={remote}")


@pytest.mark.parametrize(("home", "remote"), [(0, 1), (1, 0), (5, 0), (7, 0)])
def test_remote_distance_ties_go_to_lowest_id(amd8: Topology, home: int, remote: int) -> None:
    assert _placed(resolve_placement("remote", "node", 1, home, amd8)).cpu_node == remote


def test_remote_skips_nodes_without_cpus(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    for cpu in range(2):
        fake.cpu(cpu, cpu, 0, siblings=str(cpu))
    fake.node(0, cpulist="0", distance="10 12 20")
    fake.node(1, cpulist="", distance="12 10 20")  # nearer, but memory only
    fake.node(2, cpulist="1", distance="20 20 10")
    topo = discover_topology(tmp_path)
    assert _placed(resolve_placement("remote", "node", 1, 0, topo)).cpu_node == 2
    reason = _skipped(resolve_placement("local", "node", 1, 1, topo, target="/dev/pmem0"))
    assert reason.startswith("target /dev/pmem0: home node 1 has no online CPUs")
    assert "node:N with one of 0, 2" in reason
    assert "no online CPUs" in _skipped(resolve_placement("node:1", "node", 1, 0, topo))


def test_remote_on_one_node_is_skipped(intel_smt2: Topology) -> None:
    reason = _skipped(resolve_placement("remote", "node", 4, 0, intel_smt2))
    assert reason == ("binding remote needs a second NUMA node with CPUs; this machine has 1 (node 0)")
    # Even when the device's node is unknown, the one-node reason is the useful one.
    assert _skipped(resolve_placement("remote", "node", 4, None, intel_smt2)) == reason


def test_unknown_home_is_skipped_with_the_fix(power: Topology) -> None:
    for binding in ("local", "remote"):
        reason = _skipped(resolve_placement(binding, "node", 4, None, power, target="/dev/sdb"))
        assert reason.startswith("target /dev/sdb: home NUMA node unknown")
        assert "numa_node -1" in reason
        assert "`home_node:`" in reason


def test_unknown_home_on_a_one_node_machine_is_that_node(intel_smt2: Topology) -> None:
    p = _placed(resolve_placement("local", "node", 4, None, intel_smt2))
    assert p.cpu_node == 0
    assert p.cpus == tuple(range(16))


def test_home_node_that_does_not_exist(power: Topology) -> None:
    reason = _skipped(resolve_placement("local", "node", 1, 2, power, target="/dev/nvme0n1"))
    assert reason == (
        "target /dev/nvme0n1: home node 2 does not exist on this machine "
        "(nodes: 0, 1, 4, 5, 8, 9, 12, 13); fix `home_node:` on the target"
    )


def test_explicit_node(power: Topology) -> None:
    p = _placed(resolve_placement("node:9", "node", 2, None, power))  # home not needed
    assert (p.binding, p.cpu_node, p.cpus) == ("node:9", 9, tuple(range(160, 192)))
    assert _skipped(resolve_placement("node:3", "node", 2, 0, power)) == (
        "node:3 does not exist (nodes: 0, 1, 4, 5, 8, 9, 12, 13)"
    )


def test_none_is_unbound(power: Topology) -> None:
    p = _placed(resolve_placement("none", "node", 60, None, power))
    assert (p.cpu_node, p.mem_node, p.job_cpus, p.numactl_args) == (None, None, None, ())
    assert p.cpus == tuple(range(256))


# --- SMT placements ----------------------------------------------------------------


@pytest.mark.parametrize("numjobs", [1, 2, 3, 4])
def test_same_core_on_smt4(power: Topology, numjobs: int) -> None:
    p = _placed(resolve_placement("local", "same-core", numjobs, 5, power))
    # Node 5 holds CPUs 96-127; its first core is threads 96-99.
    assert p.job_cpus == tuple((96 + i,) for i in range(numjobs))
    assert p.cpus == tuple(range(96, 96 + numjobs))
    assert p.numactl_args == (
        f"--physcpubind={p.cpus[0]}-{p.cpus[-1]}" if numjobs > 1 else "--physcpubind=96",
        "--membind=5",
    )
    assert (p.cpu_node, p.mem_node) == (5, 5)


def test_same_core_beyond_smt_width_is_skipped(power: Topology, intel_smt2: Topology) -> None:
    assert _skipped(resolve_placement("local", "same-core", 5, 0, power)) == (
        "placement same-core with numjobs 5 needs 5 hardware threads on one core; "
        "cores on node 0 have at most 4"
    )
    assert "at most 2" in _skipped(resolve_placement("local", "same-core", 3, 0, intel_smt2))


def test_same_core_without_smt(amd8: Topology) -> None:
    assert _skipped(resolve_placement("node:2", "same-core", 2, None, amd8)).endswith(
        "cores on node 2 have at most 1 (no SMT)"
    )
    p = _placed(resolve_placement("node:2", "same-core", 1, None, amd8))
    assert p.job_cpus == ((4,),)


def test_diff_cores_on_smt4(power: Topology) -> None:
    p = _placed(resolve_placement("remote", "diff-cores", 8, 0, power))
    # Remote of node 0 is node 1 (CPUs 32-63): first thread of each of its 8 cores.
    assert p.cpu_node == 1
    assert p.job_cpus == tuple((32 + 4 * i,) for i in range(8))
    assert p.numactl_args == ("--physcpubind=32,36,40,44,48,52,56,60", "--membind=1")
    assert "needs 9 physical cores; node 1 has 8" in _skipped(
        resolve_placement("remote", "diff-cores", 9, 0, power)
    )


def test_smt2_same_core_vs_diff_cores(intel_smt2: Topology) -> None:
    same = _placed(resolve_placement("local", "same-core", 2, 0, intel_smt2))
    diff = _placed(resolve_placement("local", "diff-cores", 2, 0, intel_smt2))
    # The SMT experiment: two jobs sharing a core vs two jobs on two cores.
    assert same.job_cpus == ((0,), (8,))
    assert diff.job_cpus == ((0,), (1,))
    assert same.numactl_args == ("--physcpubind=0,8", "--membind=0")
    cores = {core.cpus for core in intel_smt2.cores}
    assert (0, 8) in cores
    assert not any({0, 1} <= set(c) for c in cores)


def test_unbound_pinning_uses_whole_machine(intel_smt2: Topology) -> None:
    p = _placed(resolve_placement("none", "diff-cores", 8, None, intel_smt2))
    assert p.job_cpus == tuple((cpu,) for cpu in range(8))
    assert (p.cpu_node, p.mem_node) == (None, None)
    assert p.numactl_args == ("--physcpubind=0-7",)  # pinned, but memory left to the kernel
    same = _placed(resolve_placement("none", "same-core", 2, None, intel_smt2))
    assert same.job_cpus == ((0,), (8,))
    assert "this machine has 8" in _skipped(resolve_placement("none", "diff-cores", 9, None, intel_smt2))


def test_same_core_skips_cores_with_offline_threads(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.write("devices/system/cpu/online", "0-1,3\n")
    fake.cpu(0, 0, 0, siblings="0,2")
    fake.cpu(1, 0, 1, siblings="1,3")
    fake.cpu(2, 0, 0, online=False)
    fake.cpu(3, 0, 1, siblings="1,3")
    topo = discover_topology(tmp_path)
    # Core 0 lost its second thread; core 1 still has two.
    assert _placed(resolve_placement("local", "same-core", 2, 0, topo)).job_cpus == ((1,), (3,))

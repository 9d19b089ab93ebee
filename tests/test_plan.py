"""Planning: every point × repeat with placement, argv and job file; no side effects."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iobench.errors import SafetyError, TopologyError, TuningError
from iobench.matrix.model import load_matrix
from iobench.planner.plans import plan
from iobench.system.safety import remember_created

pytestmark = pytest.mark.fio


def test_plan_lists_every_point_and_repeat_interleaved(null_matrix: Callable[..., Path]) -> None:
    p = plan(load_matrix(null_matrix("repeat: 2\n")))
    assert [r.key for r in p.runs] == [f"{i:04d}-r{r}" for r in (1, 2) for i in (1, 2, 3, 4)]
    assert p.runs[0].params == {"iodepth": 1, "numjobs": 1}


def test_sequential_and_shuffled_orders(null_matrix: Callable[..., Path]) -> None:
    seq = plan(load_matrix(null_matrix("repeat: 2\norder: sequential\n")))
    assert [r.key for r in seq.runs][:3] == ["0001-r1", "0001-r2", "0002-r1"]
    shuffled = load_matrix(null_matrix("repeat: 2\norder: shuffled\nseed: 7\n"))
    first, again = plan(shuffled), plan(shuffled)
    assert first.seed == 7
    assert [r.key for r in first.runs] == [r.key for r in again.runs]
    assert sorted(r.key for r in first.runs) == sorted(r.key for r in seq.runs)
    assert [r.key for r in first.runs] != [r.key for r in seq.runs]
    unseeded = plan(load_matrix(null_matrix("order: shuffled\n")))
    assert unseeded.seed is not None


def test_plan_json_has_the_spec_fields(null_matrix: Callable[..., Path], tmp_path: Path) -> None:
    p = plan(load_matrix(null_matrix()))
    data = json.loads(json.dumps(p.to_json()))
    first = data[0]
    assert {"point", "repeat", "params", "status", "reason", "settings", "processes"} <= set(first)
    process = first["processes"][0]
    assert {"argv", "jobfile", "targets", "cpu_node", "target_node", "cpus", "job_cpus"} <= set(process)
    assert process["argv"][1:] == ["--output-format=json+", "--output=fio.json", "job.fio"]
    assert process["argv"][0].endswith("fio")
    assert process["targets"] == [str(tmp_path / "target.dat")]
    assert process["job_cpus"] is None
    assert "filename=" + str(tmp_path / "target.dat") in process["jobfile"]
    assert "iodepth=1\nnumjobs=1\n" in process["jobfile"]


def test_job_files_are_deterministic(null_matrix: Callable[..., Path]) -> None:
    path = null_matrix()
    assert plan(load_matrix(path)).to_json() == plan(load_matrix(path)).to_json()


def test_node_binding_runs_under_numactl(null_matrix: Callable[..., Path]) -> None:
    unbound = plan(load_matrix(null_matrix())).runs
    assert unbound[0].processes[0].argv[0].endswith("fio")
    # Apart from unbound points: on a one-node machine node:0 would run where none does (run once).
    path = null_matrix()
    path.write_text(
        path.read_text().replace("  numjobs: [1, 2]\n", "  numjobs: [1, 2]\n  binding: ['node:0']\n")
    )
    bound = plan(load_matrix(path)).runs
    argv = bound[0].processes[0].argv
    assert Path(argv[0]).name == "numactl"
    assert "--cpunodebind=0" in argv and "--membind=0" in argv
    assert argv[argv.index("--") + 1].endswith("fio")
    assert bound[0].processes[0].cpu_node == 0


def test_unplaceable_points_are_skipped_with_a_reason(null_matrix: Callable[..., Path]) -> None:
    path = null_matrix()
    path.write_text(path.read_text().replace("  numjobs: [1, 2]\n", "  binding: [none, 'node:9']\n"))
    p = plan(load_matrix(path))
    skipped = [r for r in p.runs if r.status == "skipped"]
    assert len(skipped) == 2 and all("node" in (r.reason or "") for r in skipped)
    assert all(r.processes == () for r in skipped)


def test_all_points_skipped_is_an_error(null_matrix: Callable[..., Path]) -> None:
    path = null_matrix()
    path.write_text(path.read_text().replace("  numjobs: [1, 2]\n", "  binding: ['node:9']\n"))
    with pytest.raises(TopologyError, match="every point is skipped"):
        plan(load_matrix(path))


def test_existing_foreign_file_is_not_written(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    victim = tmp_path / "precious.db"
    victim.write_bytes(b"data" * 1024)
    path = write_matrix(
        f"""
        version: 1
        name: w
        targets: [{{path: {victim}}}]
        fio: {{ioengine: psync, rw: randwrite, size: 4k}}
        """
    )
    with pytest.raises(SafetyError, match="exists and iobench did not create it; pass --allow-write"):
        plan(load_matrix(path))
    assert plan(load_matrix(path), allow_write=[str(victim)]).runs
    remember_created([str(victim)])
    assert plan(load_matrix(path)).runs


def test_reads_may_not_grow_a_foreign_file(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    small = tmp_path / "small.dat"
    small.write_bytes(b"x" * 4096)
    path = write_matrix(
        f"""
        version: 1
        name: r
        targets: [{{path: {small}, size: 1M}}]
        fio: {{ioengine: psync, rw: randread}}
        """
    )
    with pytest.raises(SafetyError, match="fio would extend it"):
        plan(load_matrix(path))


def test_new_file_needs_a_size_and_an_existing_directory(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_matrix(f"version: 1\nname: n\ntargets: [{{path: {tmp_path}/new.dat}}]\nfio: {{rw: read}}\n")
    with pytest.raises(SafetyError, match="give it a `size:`"):
        plan(load_matrix(path))
    path = write_matrix(f"version: 1\nname: n\ntargets: [{{path: {tmp_path}/no/dir.dat, size: 1M}}]\n")
    with pytest.raises(SafetyError, match="does not exist"):
        plan(load_matrix(path))


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from sysfs_snapshots import SnapshotCache

    return SnapshotCache(tmp_path_factory)


def test_plan_for_another_machine_from_its_sysfs(snapshots: Any, write_matrix: Callable[..., Path]) -> None:
    """A 2-node box with an NVMe on node 0, planned from its snapshot: local, remote and unbound."""
    root = snapshots.root("32em64t-2n8c+dax+nvme+mic+dimms")
    path = write_matrix(
        """
        version: 1
        name: numa
        targets: [{path: /dev/nvme0n1}]
        fio: {ioengine: libaio, direct: 1, rw: randread, bs: 4k, numjobs: 4}
        matrix:
          iodepth: [1, 32]
          binding: [local, remote, none]
        """
    )
    p = plan(load_matrix(path), fsroot=root)
    by_binding = {r.params["binding"]: r.processes[0] for r in p.runs if r.params["iodepth"] == 1}
    local, remote, unbound = by_binding["local"], by_binding["remote"], by_binding["none"]
    assert (local.target_node, local.cpu_node, remote.cpu_node, unbound.cpu_node) == (0, 0, 1, None)
    assert local.argv[1:3] == ("--cpunodebind=0", "--membind=0")
    assert remote.argv[1:3] == ("--cpunodebind=1", "--membind=1")
    assert unbound.argv[0].endswith("fio")
    assert all("--readonly" in proc.argv for proc in by_binding.values())
    assert set(local.cpus).isdisjoint(remote.cpus) and len(local.cpus) == 8


def test_writes_to_a_device_need_allow_write(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    dev = next((f"/dev/{p.name}" for p in Path("/sys/block").iterdir() if p.name.startswith("loop")), None)
    if dev is None or not Path(dev).exists():
        pytest.skip("no loop device node to point at")
    path = write_matrix(f"version: 1\nname: w\ntargets: [{{path: {dev}}}]\nfio: {{rw: randwrite}}\n")
    with pytest.raises(SafetyError, match="block device and the matrix writes.*pass --allow-write"):
        plan(load_matrix(path))


def test_vesnin_numa_sweep_planned_for_a_power8_box(snapshots: Any) -> None:
    """Plan the VESNIN NUMA sweep from a multi-socket POWER snapshot and see numactl."""
    root = snapshots.root("256ppc-8n8s4t")
    m = load_matrix(Path(__file__).parents[1] / "configs" / "vesnin-numa.yaml")
    p = plan(m, fsroot=root)
    assert len(p.runs) == 6 * 3 * 3 and all(r.status == "run" for r in p.runs)
    first = {
        r.params["binding"]: r.processes[0] for r in p.runs if r.params["iodepth"] == 16 and r.repeat == 1
    }
    assert first["local"].argv[1:4] == ("--cpunodebind=0", "--membind=0", "--")
    # node 1 is node 0's nearest neighbour (distance 20; the others are 40)
    assert first["remote"].argv[1:4] == ("--cpunodebind=1", "--membind=1", "--")
    assert Path(first["none"].argv[0]).name == "fio"
    assert first["local"].jobfile.count("filename=/dev/nvme") == 6
    assert "numjobs=10" in first["local"].jobfile and "iodepth=16" in first["local"].jobfile
    assert first["local"].workers == 6 * 10  # a section per disk, numjobs processes each


def test_a_process_knows_how_many_workers_fio_forks(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    """numjobs × sections, whether numjobs is an axis or a fio option; none when jobs are threads."""
    targets = f"[{{path: {tmp_path / 'a.dat'}, size: 1M}}, {{path: {tmp_path / 'b.dat'}, size: 1M}}]"
    axis = write_matrix(
        f"version: 1\nname: w\ntargets: {targets}\nfio: {{ioengine: null, rw: read}}\n"
        "matrix: {numjobs: [1, 3]}\n"
    )
    assert [r.processes[0].workers for r in plan(load_matrix(axis)).runs] == [2, 6]
    threads = write_matrix(
        f"version: 1\nname: t\ntargets: {targets}\nfio: {{ioengine: null, rw: read, numjobs: 2, thread: 1}}\n"
    )
    assert [r.processes[0].workers for r in plan(load_matrix(threads)).runs] == [0]


def test_a_home_node_the_machine_lacks_is_refused(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    path = write_matrix(
        f"""
        version: 1
        name: t
        targets: [{{path: {tmp_path / "t.dat"}, size: 1M, home_node: 999}}]
        fio: {{ioengine: null, rw: read}}
        """
    )
    with pytest.raises(TopologyError, match="home_node 999 is not a NUMA node of this machine"):
        plan(load_matrix(path))
    assert not (tmp_path / "t.dat").exists()


@pytest.mark.root
def test_settings_of_the_system_disk_are_never_changed(write_matrix: Callable[..., Path]) -> None:
    import os
    import tempfile

    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        if os.stat(folder).st_dev != os.stat("/").st_dev:
            pytest.skip("/var/tmp is not on the root filesystem here")
        path = write_matrix(
            f"""
            version: 1
            name: t
            targets: [{{path: {folder}/t.dat, size: 1M}}]
            fio: {{ioengine: null, rw: read}}
            matrix: {{readahead_kb: [128, 256]}}
            """
        )
        with pytest.raises(
            TuningError, match=r"holds / \(the system disk\): iobench does not change its readahead_kb"
        ):
            plan(load_matrix(path))
        assert os.listdir(folder) == []


def test_placements_that_coincide_here_run_once_and_say_why(
    snapshots: Any, write_matrix: Callable[..., Path]
) -> None:
    """One NUMA node with SMT2: local is none; with one job same-core is diff-cores; with two they differ."""
    root = snapshots.root("16em64t-4s2c2t")
    path = write_matrix(
        """
        version: 1
        name: same
        targets: [{path: /dev/nvme0n1, home_node: 0}]
        fio: {ioengine: libaio, direct: 1, rw: randread, bs: 4k}
        matrix:
          numjobs: [1, 2]
          placement: [same-core, diff-cores]
          binding: [local, none]
        repeat: 2
        """
    )
    p = plan(load_matrix(path), fsroot=root)
    first = {
        (r.params["numjobs"], r.params["placement"], r.params["binding"]): r for r in p.runs if r.repeat == 1
    }
    ran = {k for k, r in first.items() if r.status == "run"}
    assert ran == {(1, "same-core", "local"), (2, "same-core", "local"), (2, "diff-cores", "local")}
    assert first[(1, "same-core", "none")].same_as == first[(1, "same-core", "local")].point
    assert first[(1, "same-core", "none")].reason == (
        f"same as point {first[(1, 'same-core', 'local')].point}: one NUMA node (node 0): "
        "binding none runs on the same CPUs and memory as local"
    )
    assert first[(1, "diff-cores", "local")].reason.endswith(  # type: ignore[union-attr]
        "one job: placement diff-cores pins the jobs to the same CPUs as same-core"
    )
    assert first[(2, "diff-cores", "none")].same_as == first[(2, "diff-cores", "local")].point
    # every repeat of a point that runs once is skipped alike, its processes gone
    assert all(r.status == "skipped" and not r.processes for r in p.runs if r.same_as is not None)
    assert {r.same_as for r in p.runs if r.repeat == 2} == {r.same_as for r in p.runs if r.repeat == 1}
    assert p.runs[1].to_json().get("same_as") == p.runs[1].same_as


def test_a_two_node_machine_runs_local_and_unbound_apart(
    snapshots: Any, write_matrix: Callable[..., Path]
) -> None:
    root = snapshots.root("32em64t-2n8c+dax+nvme+mic+dimms")
    path = write_matrix(
        """
        version: 1
        name: apart
        targets: [{path: /dev/nvme0n1}]
        fio: {ioengine: libaio, direct: 1, rw: randread, bs: 4k}
        matrix:
          binding: [local, none]
        """
    )
    p = plan(load_matrix(path), fsroot=root)
    assert [r.status for r in p.runs] == ["run", "run"] and all(r.same_as is None for r in p.runs)

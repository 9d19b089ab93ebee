"""Every shipped matrix validates, plans on real machines, and sets up what its seed describes."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from loopdev import LoopFactory
from sysfs_snapshots import FakeSysfs, SnapshotCache

from iobench.errors import TuningError
from iobench.matrix.model import Matrix, load_matrix
from iobench.planner.plans import Plan, PlannedRun, plan

pytestmark = pytest.mark.fio
ROOT = Path(__file__).parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
DOCS = ROOT / "docs" / "configs.md"
TWO_NODE = "32em64t-2n8c+dax+nvme+mic+dimms"  # nvme0n1 and sda on node 0, pmem on nodes 0 and 1
SMT2 = "16em64t-4s2c2t"  # 4 sockets × 2 cores × SMT2, one NUMA node
GIB = 1 << 30


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> SnapshotCache:
    return SnapshotCache(tmp_path_factory)


@pytest.fixture(scope="module")
def two_node_box(snapshots: SnapshotCache) -> Path:
    return snapshots.root(TWO_NODE)


@pytest.fixture(scope="module")
def smt_box(snapshots: SnapshotCache) -> Path:
    return snapshots.root(SMT2)


@functools.cache
def _matrix(stem: str, targets: tuple[str, ...] = ()) -> Matrix:
    """A shipped config, loaded once (fio validates every load with --parse-only)."""
    return load_matrix(ROOT / "configs" / f"{stem}.yaml", targets=targets)


def _jobfile(text: str) -> dict[str, dict[str, str]]:
    """A job file as {section: {option: value}}."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith(";"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
        else:
            name, _, value = line.partition("=")
            current[name] = value
    return sections


def _runs(p: Plan) -> list[PlannedRun]:
    """The first repeat of every point, in point order."""
    return sorted((r for r in p.runs if r.repeat == 1), key=lambda r: r.point)


def _node_cpus(p: Plan, node: int) -> tuple[int, ...]:
    (found,) = [n.cpus for n in p.topology.nodes if n.id == node]
    return found


def _global(run: PlannedRun) -> dict[str, str]:
    (options,) = {json.dumps(_jobfile(proc.jobfile)["global"], sort_keys=True) for proc in run.processes}
    return dict(json.loads(options))


# --- every config ---------------------------------------------------------------


def test_the_configs_are_the_seed_experiments() -> None:
    stems = {p.stem for p in CONFIGS}
    assert {
        "demo",
        "vesnin-single-disk",
        "vesnin-smt",
        "vesnin-numa",
        "vesnin-max-load",
        "threadripper-one-ssd",
        "threadripper-all-disks",
        "threadripper-scheduler",
        "storageland-mysql-seqread",
        "storageland-mysql-randwrite",
        "storageland-mysql-mix",
        "lkml-buffered-vs-direct",
    } <= stems


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_is_named_quoted_documented_and_safe(path: Path) -> None:
    text = path.read_text()
    header = text.split("\nversion:", 1)[0]
    assert text.startswith("# ") and all(line.startswith("#") for line in header.splitlines())
    if path.stem != "demo":
        assert header.count('"') >= 2, "the header quotes the seed's setup"
    assert "iobench run configs/" in header or path.stem == "demo", "the header shows how to run it"
    m = _matrix(path.stem)
    assert m.name == path.stem and m.description
    assert f"configs/{path.name}" in DOCS.read_text(), "every config has a row in docs/configs.md"
    # A shipped config never opts a raw device in to being destroyed: the user does.
    assert not any(t.allow_write for t in m.targets if t.path.startswith("/dev/"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_plans_on_a_real_two_node_snapshot(path: Path, two_node_box: Path) -> None:
    m = _matrix(path.stem)
    if "mq-deadline" in m.axes.get("scheduler", ()):
        # This 2012 kernel's nvme0n1 offers only "none": refused before anything runs.
        with pytest.raises(TuningError, match="nvme0n1.*mq-deadline"):
            plan(m, fsroot=two_node_box)
        return
    p = plan(m, fsroot=two_node_box)
    assert len(p.runs) == len(m.combos) * m.repeat
    assert any(r.status == "run" for r in p.runs)
    for run in p.runs:
        if run.status == "skipped":
            assert run.reason and not run.processes
            continue
        assert run.processes
        for proc in run.processes:
            sections = _jobfile(proc.jobfile)
            assert [sections[s]["filename"] for s in proc.sections] == list(proc.targets)
            assert proc.argv[-1] == proc.jobfile_name
            assert proc.argv[0].endswith("numactl") == (
                proc.cpu_node is not None or proc.job_cpus is not None
            )
    json.dumps(p.to_json())  # `plan --json` works


@pytest.mark.loopdev
@pytest.mark.root
@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_plans_here_on_a_loop_device(path: Path, loops: LoopFactory) -> None:
    loop = loops.attach(64)
    p = plan(load_matrix(path, targets=[loop.path], allow_write=[loop.path]), allow_write=[loop.path])
    assert p.runs and all(proc.targets == (loop.path,) for r in p.runs for proc in r.processes)
    for run in p.runs:
        assert set(run.settings) <= {loop.name}
        assert all(("--readonly" in proc.argv) != run.writes for proc in run.processes)


def test_demo_is_a_real_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOBENCH_DEMO_DIR", str(tmp_path))
    m = load_matrix(ROOT / "configs" / "demo.yaml")
    assert len(m.combos) >= 12 and {"bs", "iodepth", "numjobs"} <= set(m.axes)
    assert m.targets[0].path == str(tmp_path / "iobench-demo.dat")
    p = plan(m)
    assert p.expected_s is not None and p.expected_s <= 120


# --- VESNIN -----------------------------------------------------------------------


def test_vesnin_single_disk_is_one_job_at_qd16_on_one_cpu_of_the_home_node(two_node_box: Path) -> None:
    p = plan(_matrix("vesnin-single-disk"), fsroot=two_node_box)
    (run,) = _runs(p)
    (proc,) = run.processes
    (cpu,) = proc.cpus
    assert proc.job_cpus == ((cpu,),) and cpu in _node_cpus(p, 0)
    assert proc.argv[:3] == (proc.argv[0], f"--physcpubind={cpu}", "--membind=0")
    options = _global(run)
    assert {k: options[k] for k in ("ioengine", "direct", "rw", "bs", "iodepth", "numjobs")} == {
        "ioengine": "libaio",
        "direct": "1",
        "rw": "randread",
        "bs": "4096",
        "iodepth": "16",
        "numjobs": "1",
    }
    assert options["cpus_allowed"] == str(cpu) and not run.writes


def test_vesnin_smt_puts_same_core_jobs_on_sibling_threads_and_diff_cores_on_distinct_cores(
    smt_box: Path,
) -> None:
    threads = 2
    p = plan(_matrix("vesnin-smt"), fsroot=smt_box)
    core_of = {cpu: core for core in p.topology.cores for cpu in core.cpus}
    node0 = set(_node_cpus(p, 0))
    seen = set()
    for run in _runs(p):
        numjobs, placement = int(run.params["numjobs"]), run.params["placement"]
        seen.add((numjobs, placement))
        if placement == "same-core" and numjobs > threads:
            assert run.status == "skipped" and "hardware threads on one core" in (run.reason or "")
            continue
        if placement == "diff-cores" and numjobs == 1:  # one job: the same CPU as same-core, run once
            assert run.status == "skipped" and run.same_as is not None
            continue
        assert run.status == "run"
        (proc,) = run.processes
        assert proc.job_cpus is not None and len(proc.job_cpus) == numjobs
        cpus = [cpu for (cpu,) in proc.job_cpus]
        assert len(set(cpus)) == numjobs and set(cpus) <= node0
        cores = {core_of[cpu] for cpu in cpus}
        assert len(cores) == (1 if placement == "same-core" else numjobs)
        assert _global(run)["iodepth"] == "16" and _global(run)["numjobs"] == str(numjobs)
    assert seen == {(n, pl) for n in range(1, 9) for pl in ("same-core", "diff-cores")}


def test_vesnin_numa_runs_60_jobs_local_remote_and_unbound(two_node_box: Path) -> None:
    p = plan(_matrix("vesnin-numa"), fsroot=two_node_box)
    runs = _runs(p)
    assert sorted({int(r.params["iodepth"]) for r in runs}) == [1, 2, 4, 8, 16, 32]
    for run in runs:
        (proc,) = run.processes
        assert int(_global(run)["numjobs"]) * len(proc.sections) == 60
        binding = run.params["binding"]
        expected = {"local": 0, "remote": 1, "none": None}[str(binding)]
        assert (proc.cpu_node, proc.target_node) == (expected, 0)


def test_vesnin_max_load_places_one_fio_per_disk_on_its_own_node_or_lets_the_kernel(
    two_node_box: Path,
) -> None:
    disks = ("/dev/pmem0.1", "/dev/pmem0.3", "/dev/pmem1", "/dev/pmem1.2")  # nodes 0, 0, 1, 1
    assert len(_matrix("vesnin-max-load").targets) == 12
    p = plan(_matrix("vesnin-max-load", disks), fsroot=two_node_box)
    runs = _runs(p)
    assert {(r.params["bs"], r.params["binding"]) for r in runs} == {
        (bs, b) for bs in (4096, 65536) for b in ("none", "local")
    }
    for run in runs:
        assert run.status == "run" and [proc.targets for proc in run.processes] == [(d,) for d in disks]
        assert [proc.target_node for proc in run.processes] == [0, 0, 1, 1]
        for proc in run.processes:
            assert "--readonly" in proc.argv
            if run.params["binding"] == "none":  # kernel-placed: no numactl at all
                assert proc.argv[0].endswith("fio") and proc.cpu_node is None
            else:  # home socket
                assert proc.cpu_node == proc.target_node
                assert proc.argv[1:3] == (
                    f"--cpunodebind={proc.target_node}",
                    f"--membind={proc.target_node}",
                )


# --- ThreadRipper -----------------------------------------------------------------

ONESSD = {
    "ioengine": "io_uring",
    "registerfiles": "1",
    "fixedbufs": "1",
    "rw": "randread",
    "direct": "1",
    "numjobs": "3",
    "iodepth": "32",
    "gtod_reduce": "1",
}


def test_threadripper_one_ssd_is_onessd_sh_at_4k_and_1m(two_node_box: Path) -> None:
    runs = _runs(plan(_matrix("threadripper-one-ssd"), fsroot=two_node_box))
    assert [r.params["bs"] for r in runs] == [4096, 1048576]
    for run in runs:
        (proc,) = run.processes
        assert ONESSD.items() <= _global(run).items() and "hipri" not in _global(run)
        assert "--readonly" in proc.argv and proc.cpu_node is None


def test_threadripper_all_disks_launches_one_fio_per_disk_and_hipri_only_at_4k(two_node_box: Path) -> None:
    m = _matrix("threadripper-all-disks")
    disks = tuple(t.path for t in m.targets)
    assert disks == tuple(f"/dev/nvme{i}n1" for i in range(10))
    runs = _runs(plan(m, fsroot=two_node_box))
    per_target = [r for r in runs if r.params["launch"] == "per-target"]
    assert [r.params["bs"] for r in per_target] == [4096, 65536, 524288, 1048576]
    for run in runs:
        options = _global(run)
        assert ONESSD.items() <= options.items()
        assert options.get("hipri") == ("1" if run.params["bs"] == 4096 else None)
        assert all(proc.cpu_node is None for proc in run.processes)  # kernel-placed, as in allmulti.sh
    for run in per_target:
        assert [proc.targets for proc in run.processes] == [(d,) for d in disks]
        assert len({proc.jobfile_name for proc in run.processes}) == 10
    # The article's "one single fio instance accessing all 10 disks": one extra 4k point.
    (single,) = [r for r in runs if r.params["launch"] == "single"]
    assert single.params["bs"] == 4096 and [proc.targets for proc in single.processes] == [disks]


def test_threadripper_scheduler_sets_none_and_mq_deadline_where_offered(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.write("devices/system/cpu/online", "0-1\n")
    for cpu in range(2):
        fake.cpu(cpu, package=0, core=cpu, siblings=str(cpu))
    fake.node(0, cpulist="0-1", distance="10")
    fake.disk("nvme0n1", parent=fake.pci("0000:00:01.0", 0), scheduler="[none] mq-deadline kyber")
    runs = _runs(plan(_matrix("threadripper-scheduler"), fsroot=tmp_path))
    assert [r.settings for r in runs] == [
        {"nvme0n1": {"scheduler": "none"}},
        {"nvme0n1": {"scheduler": "mq-deadline"}},
    ]
    for run in runs:
        assert ONESSD.items() <= _global(run).items() and _global(run)["bs"] == "4096"


def test_readahead_buffered_sets_readahead_on_the_disk(two_node_box: Path) -> None:
    runs = _runs(plan(_matrix("readahead-buffered"), fsroot=two_node_box))
    assert [r.settings for r in runs] == [{"nvme0n1": {"readahead_kb": kb}} for kb in (0, 128, 4096)]
    assert all(_global(r)["direct"] == "0" for r in runs)


# --- Storageland and LKML -------------------------------------------------------


@pytest.mark.parametrize(
    ("stem", "rw", "numjobs", "writes"),
    [
        ("storageland-mysql-seqread", "read", 1, False),
        ("storageland-mysql-randwrite", "randwrite", 8, True),
        ("storageland-mysql-mix", "rw", 8, True),
    ],
)
def test_storageland_specs(two_node_box: Path, stem: str, rw: str, numjobs: int, writes: bool) -> None:
    m = _matrix(stem)
    (run,) = _runs(plan(m, fsroot=two_node_box))
    (proc,) = run.processes
    sections = _jobfile(proc.jobfile)
    options = sections["global"]
    assert (options["rw"], int(options["numjobs"]), run.writes) == (rw, numjobs, writes)
    assert options.get("rwmixread") == ("80" if rw == "rw" else None)
    for name, value in {"bs": "16384", "direct": "1", "ioengine": "libaio", "iodepth": "1"}.items():
        assert options[name] == value
    assert (options["runtime"], options["time_based"], options["fadvise_hint"]) == ("300s", "1", "0")
    assert "group_reporting" not in options  # the article reads every writer's numbers
    # One 40 GiB file for all three specs; writers get 5 GiB regions of it, none shared.
    assert m.targets[0].path.endswith("/iobench-storageland.dat")
    (section,) = proc.sections
    size = int(sections[section]["size"])
    if numjobs > 1:
        assert options["offset_increment"] == str(5 * GIB) and size == 5 * GIB
    assert size * numjobs == 40 * GIB


def test_lkml_writes_buffered_and_direct_with_one_to_sixteen_writers(two_node_box: Path) -> None:
    m = _matrix("lkml-buffered-vs-direct")
    runs = _runs(plan(m, fsroot=two_node_box))
    assert {(r.params["direct"], r.params["numjobs"]) for r in runs} == {
        (d, n) for d in (0, 1) for n in (1, 2, 4, 16)
    }
    for run in runs:
        (proc,) = run.processes
        sections = _jobfile(proc.jobfile)
        options = sections["global"]
        assert run.writes and (options["rw"], options["bs"], options["end_fsync"]) == (
            "write",
            "1048576",
            "1",
        )
        # Writers do not overlap: each starts where the previous one's region ends.
        size = int(sections[proc.sections[0]]["size"])
        assert int(options["offset_increment"]) == size

"""Telemetry without a live run: procfs/sysfs readers on fake trees, the sampler, the summary and every verdict."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from sysfs_snapshots import SnapshotCache

import iobench
from iobench.errors import MatrixError
from iobench.matrix.model import parse_matrix
from iobench.results import samples as long_form
from iobench.results import telemetry as tm
from iobench.results.points import TELEMETRY, parameter_columns, point_totals, summarize
from iobench.store.records import MachineFacts, Manifest, PointMeta
from iobench.store.rundir import RunDir
from iobench.system import blockdevs, procfs
from iobench.system.hostfs import DiskStat, Interrupts, SystemRoot, TaskStat
from iobench.system.sampler import THREAD_NAME, Sampler, Snapshot, Watch

# --- the readers, on fake /proc and /sys trees -----------------------------------------


@pytest.fixture(scope="session")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> SnapshotCache:
    return SnapshotCache(tmp_path_factory)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


#: What iobench.telemetry gives (docs/telemetry.md): a samples file's columns and the site's host.
TELEMETRY_COLUMNS = ["point", "repeat", "host", "t_s", "source", "entity", "node", "metric", "value"]

PROC_STAT = """\
cpu  300 10 200 5000 40 7 9 3 0 0
cpu0 100 10 50 2500 20 2 4 1 0 0
cpu2 200 0 150 2500 20 5 5 2 0 0
intr 12345 0 0
ctxt 999
"""

DISKSTATS = """\
   7       0 loop0 100 0 800 50 0 0 0 0 0 60 50 0 0 0 0
 259       0 nvme0n1 10 1 80 5 20 2 160 9 3 14 17 4 0 64 2 6 1
   8       0 sda 1 2 3 4 5 6 7 8 9 10 11
   8       1 sda1 1 2 3 4
"""

INTERRUPTS = """\
           CPU0       CPU2
  0:         44          0   IO-APIC   2-edge      timer
 46:       1000        200   PCI-MSI 1048576-edge      nvme0q0
 47:          0       3000   PCI-MSI 1048577-edge      nvme0q1
NMI:          1          2   Non-maskable interrupts
ERR:          0
"""

MEMINFO = """\
MemTotal:       24000000 kB
Cached:          1000000 kB
Dirty:               512 kB
Writeback:             0 kB
HugePages_Total:       0
"""


def test_proc_counter_readers_parse_what_the_kernel_writes(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _write(proc / "stat", PROC_STAT)
    _write(proc / "diskstats", DISKSTATS)
    _write(proc / "interrupts", INTERRUPTS)
    _write(proc / "meminfo", MEMINFO)
    system = SystemRoot(tmp_path)
    # Only per-CPU lines, by their own number (CPU 1 is offline here).
    assert procfs.cpu_times(system) == {
        0: (100, 10, 50, 2500, 20, 2, 4, 1, 0, 0),
        2: (200, 0, 150, 2500, 20, 5, 5, 2, 0, 0),
    }
    disks = procfs.diskstats(system)
    assert disks is not None
    assert disks["loop0"].reads == 100 and disks["loop0"].io_ms == 60 and disks["loop0"].discards == 0
    assert (
        disks["nvme0n1"].flushes == 6 and disks["nvme0n1"].flush_ms == 1 and disks["nvme0n1"].in_flight == 3
    )
    assert disks["sda"].queue_ms == 11 and disks["sda"].discards == 0  # before Linux 4.18: 11 counters
    assert "sda1" not in disks  # Linux 2.6's short partition lines carry no times
    table = procfs.interrupts(system)
    assert table is not None and table.cpus == (0, 2)
    assert table.counts["47"] == (0, 3000) and table.names["47"].endswith("nvme0q1")
    assert table.counts["ERR"] == (0, 0)  # one count for the whole machine, padded
    assert procfs.meminfo(system) == {
        "MemTotal": 24000000 * 1024,
        "Cached": 1000000 * 1024,
        "Dirty": 512 * 1024,
        "Writeback": 0,
        "HugePages_Total": 0,
    }
    assert long_form.irq_entity("47", table.names["47"]) == "47 nvme0q1"


def test_missing_counters_read_as_none_never_an_error(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    system = SystemRoot(tmp_path)
    assert procfs.cpu_times(system) is None
    assert procfs.diskstats(system) is None
    assert procfs.interrupts(system) is None
    assert procfs.meminfo(system) is None
    assert procfs.tasks(system) == []
    assert blockdevs.device_irqs(system, "nvme0n1") == ()
    assert blockdevs.loop_backing_file(system, "loop0") is None


def _task(
    proc: Path,
    pid: int,
    tid: int,
    comm: str,
    utime: int,
    stime: int,
    cpu: int,
    *,
    kernel: bool,
    threads: int = 1,
) -> None:
    """``<pid>/task/<tid>/stat``, and for the main thread ``<pid>/stat`` with the process's thread count."""
    flags = 0x00200040 if kernel else 0x00400100
    fields_ = ["S", "1", str(pid), "0", "0", "-1", str(flags), "0", "0", "0", "0", str(utime), str(stime)]
    fields_ += ["0", "0", "20", "0", str(threads)]
    fields_ += ["0"] * (38 - 3 - len(fields_) + 1) + [str(cpu), "0", "0"]
    line = f"{tid} ({comm}) {' '.join(fields_)}\n"
    _write(proc / str(pid) / "task" / str(tid) / "stat", line)
    if tid == pid:
        _write(proc / str(pid) / "stat", line)


def test_tasks_lists_every_thread_and_kernel_thread(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _task(proc, 2, 2, "kthreadd", 0, 5, 1, kernel=True)
    _task(proc, 40, 40, "kworker/1:1H-kblockd", 0, 700, 1, kernel=True)
    _task(proc, 100, 100, "fio", 300, 40, 0, kernel=False, threads=2)
    _task(proc, 100, 101, "iou-wrk-100", 2, 90, 0, kernel=False, threads=2)
    _task(proc, 200, 200, "a) (b", 1, 1, 3, kernel=False)  # comm may hold parentheses and spaces
    _write(proc / "300" / "task" / "300" / "stat", "garbage\n")
    (proc / "40" / "task" / "40" / "stat").unlink()  # one thread: <pid>/stat alone is read
    found = {t.tid: t for t in procfs.tasks(SystemRoot(tmp_path))}
    assert set(found) == {2, 40, 100, 101, 200}
    assert found[40] == TaskStat(40, 40, "kworker/1:1H-kblockd", 0, 700, 1, True)
    assert found[101].pid == 100 and found[101].comm == "iou-wrk-100" and not found[101].kernel
    assert found[100].user_ticks == 300 and found[100].system_ticks == 40 and found[100].processor == 0
    assert found[200].comm == "a) (b" and found[200].processor == 3


def test_device_irqs_come_from_the_pci_function_above_the_disk(snapshots: SnapshotCache) -> None:
    system = SystemRoot(snapshots.root("32em64t-2n8c+dax+nvme+mic+dimms"))
    assert blockdevs.device_irqs(system, "nvme0n1") == tuple(range(46, 54))
    assert blockdevs.device_irqs(system, "nvme0n1p1") == tuple(range(46, 54))  # a partition's disk
    assert blockdevs.device_irqs(system, "nosuchdisk") == ()


def test_a_legacy_irq_line_counts_where_there_are_no_msi_vectors(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    function = sysfs / "devices" / "pci0000:00" / "0000:00:1f.2"
    disk = function / "ata1" / "host0" / "target0:0:0" / "0:0:0:0" / "block" / "sda"
    _write(disk / "dev", "8:0\n")
    _write(function / "irq", "19\n")
    _write(sysfs / "bus" / "pci" / ".keep", "")
    (function / "subsystem").symlink_to(sysfs / "bus" / "pci")
    loop = sysfs / "devices" / "virtual" / "block" / "loop0"
    _write(loop / "dev", "7:0\n")
    _write(loop / "loop" / "backing_file", "/var/tmp/disk.img\n")
    (sysfs / "class" / "block").mkdir(parents=True)
    (sysfs / "class" / "block" / "sda").symlink_to(disk)
    (sysfs / "class" / "block" / "loop0").symlink_to(loop)
    system = SystemRoot(tmp_path)
    assert blockdevs.device_irqs(system, "sda") == (19,)
    assert blockdevs.device_irqs(system, "loop0") == ()
    assert blockdevs.loop_backing_file(system, "loop0") == "/var/tmp/disk.img"


# --- the sampler ------------------------------------------------------------------------


def _comms_of_this_process() -> set[str]:
    names = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            names.add((task / "comm").read_text().strip())
    return names


def test_the_sampler_samples_on_schedule_off_the_points_cpus_and_names_itself() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    avoid = tuple(cpus[:1]) if len(cpus) > 1 else ()
    sampler = Sampler(
        Watch(devices=("nosuchdisk",), irqs=("NMI",), avoid_cpus=avoid), 0.05, delay=0.1
    ).start()
    # Wait for samples, not for a time: a loaded machine only makes this take longer.
    deadline = time.monotonic() + 30
    while len(sampler.snapshots) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "iobench-sample" in _comms_of_this_process()
    snaps = sampler.stop()
    assert len(snaps) >= 5  # the thread's four and the last, taken by stop()
    assert all(b.t > a.t for a, b in zip(snaps, snaps[1:], strict=False))
    assert snaps[0].cpu and snaps[0].tasks and snaps[0].mem
    assert snaps[0].disks == {}  # watched, but the kernel has no such device
    if avoid:
        assert sampler.placed_on is not None and not set(sampler.placed_on) & set(avoid)
    assert sampler.cpu_s > 0 and sampler.read_s > 0
    assert THREAD_NAME not in {t.name for t in threading.enumerate()}  # stop() joined it


def test_without_a_ramp_the_first_sample_is_taken_before_start_returns() -> None:
    sampler = Sampler(Watch(), 10.0).start()
    first = list(sampler.snapshots)
    snaps = sampler.stop()
    assert len(first) == 1 and first[0].cpu and first[0].tasks is None  # counters only: threads cost
    assert len(snaps) == 3 and snaps[1].tasks and snaps[2].tasks  # the thread's first and last


def test_a_sampler_stopped_during_the_ramp_takes_nothing() -> None:
    # A ramp far longer than any test: stop() must end the thread without waiting it out.
    sampler = Sampler(Watch(), 0.05, delay=3600.0).start()
    assert sampler.stop() == []
    assert THREAD_NAME not in {t.name for t in threading.enumerate()}


# --- synthetic points: the summary and the verdicts -------------------------------------

CLK = long_form._CLK_TCK


@dataclass
class Load:
    """Counter rates of a synthetic point: per second, from t=0 to ``seconds``."""

    cpu: dict[int, dict[str, float]]  # CPU → field → share of the CPU (0..1)
    disks: dict[str, dict[str, float]]  # device → DiskStat field → per second
    irqs: dict[str, dict[int, float]]  # irq → CPU → per second
    tasks: dict[
        tuple[int, int, str, bool], tuple[float, float, int]
    ]  # (pid, tid, comm, kernel) → (user, system, cpu)


def idle_cpu(**shares: float) -> dict[str, float]:
    out = dict(shares)
    out["idle"] = 1.0 - sum(shares.values())
    return out


def make_snapshots(
    load: Load, seconds: float = 4.0, step: float = 1.0, *, missing: bool = False
) -> list[Snapshot]:
    names = [f.name for f in fields(DiskStat)]
    cpus = sorted({c for per in load.irqs.values() for c in per} | set(load.cpu))
    snaps = []
    count = int(round(seconds / step))
    for k in range(count + 1):
        t = k * step
        cpu = {
            c: tuple(
                int(round(shares.get(f, 0.0) * CLK * t))
                for f in (
                    "user",
                    "nice",
                    "system",
                    "idle",
                    "iowait",
                    "irq",
                    "softirq",
                    "steal",
                    "guest",
                    "guest_nice",
                )
            )
            for c, shares in load.cpu.items()
        }
        disks = {
            d: DiskStat(*[int(round(rates.get(n, 0.0) * t)) for n in names])
            for d, rates in load.disks.items()
        }
        irqs = Interrupts(
            tuple(cpus),
            {i: tuple(int(round(per.get(c, 0.0) * t)) for c in cpus) for i, per in load.irqs.items()},
            {i: irq_name(i) for i in load.irqs},
        )
        tasks = {
            tid: TaskStat(
                pid, tid, comm, int(round(user * CLK * t)), int(round(system * CLK * t)), cpu_, kernel
            )
            for (pid, tid, comm, kernel), (user, system, cpu_) in load.tasks.items()
        }
        mem = {"Dirty": 4096 * k, "Writeback": 0, "Cached": 10_000 + 1000 * k}
        if missing:
            snaps.append(Snapshot(t, None, None, None, None, None))
        else:
            snaps.append(Snapshot(t, cpu, disks, irqs if load.irqs else None, mem, tasks))
    return snaps


TWO_NODES = {"0": 0, "1": 1}


def irq_name(irq: str) -> str:
    return f"PCI-MSIX-0000:01:00.0 {irq}-edge nvme0q{irq}"


def watched(*irqs: str) -> dict[str, dict[str, str]]:
    return {irq: {"device": "nvme0n1", "name": irq_name(irq)} for irq in irqs}


def context(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "interval_s": 1.0,
        "ramp_s": 0.0,
        "point_cpus": [0, 1],
        "cpu_nodes": {"0": 0, "1": 0},
        "devices": {"nvme0n1": {"role": "target", "target": "/dev/nvme0n1", "home_node": 0}},
        "irqs": {},
        "notes": [],
        "threads": True,
        "status": "ok",
    }
    base.update(extra)
    return base


@dataclass
class FakeRun:
    run: RunDir
    rows: list[dict[str, Any]]

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


@pytest.fixture
def fake_run(tmp_path: Path) -> Callable[..., FakeRun]:
    """A run directory of synthetic points: each gets fio's numbers (a frame row) and telemetry."""

    def make(points: Sequence[Mapping[str, Any]], *, links: Mapping[str, Any] | None = None) -> FakeRun:
        run = RunDir.create(tmp_path, "fake", "version: 1\n")
        devices = [{"name": name, **facts} for name, facts in (links or {}).items()]
        run.write_manifest(
            Manifest(name="fake", machine=MachineFacts(host="h", topology={"devices": devices}))
        )
        rows = []
        for index, spec in enumerate(points, start=1):
            key = f"{index:04d}-r1"
            staging = run.staging(key)
            params = dict(spec.get("params", {}))
            ctx = context(**spec.get("context", {}))
            if spec.get("load") is not None:
                snaps = make_snapshots(spec["load"], missing=spec.get("missing", False))
                window = spec.get("window", (snaps[0].t, snaps[-1].t))
                table = long_form.build_table(snaps, point=index, repeat=1, window=window, context=ctx)
                long_form.write_table(staging / long_form.FILE_NAME, table, ctx)
            meta = PointMeta(key=key, point=index, repeat=1, params=params, status="ok")
            run.commit(staging, key, meta)
            for direction, iops in spec.get("fio", {"read": 1000.0}).items():
                rows.append(
                    {
                        "run_id": run.path.name,
                        "point": index,
                        "repeat": 1,
                        "jobname": "job",
                        "job_index": 0,
                        "direction": direction,
                        "status": "ok",
                        **params,
                        "iops": iops,
                        "bw_bytes": iops * 4096,
                        "runtime_ms": 4000,
                        "total_ios": iops * 4,
                    }
                )
        return FakeRun(run, rows)

    return make


def nvme(
    reads: float, *, util: float = 0.5, await_ms: float = 0.1, queue: float = 1.0
) -> dict[str, dict[str, float]]:
    return {
        "nvme0n1": {
            "reads": reads,
            "sectors_read": reads * 8,
            "read_ms": reads * await_ms,
            "io_ms": util * 1000,
            "queue_ms": queue * 1000,
        }
    }


QUIET = {0: idle_cpu(user=0.2, system=0.1), 1: idle_cpu(user=0.2, system=0.1)}
FIO = {(100, 100, "fio", False): (0.2, 0.1, 0)}


def summary(fake: FakeRun) -> pd.DataFrame:
    return tm.with_telemetry(fake.frame(), fake.run)


def test_device_numbers_are_the_devices_own_counts_over_fios_window(fake_run: Callable[..., FakeRun]) -> None:
    # I/O only inside [0.5, 3.5]: the sampler's edge intervals are half idle, the counts still add up.
    snaps_load = Load(QUIET, nvme(1000.0), {}, FIO)
    snaps = make_snapshots(snaps_load)
    for index, snap in enumerate(snaps):
        done = min(max(snap.t - 0.5, 0.0), 3.0) * 1000
        snaps[index] = Snapshot(
            snap.t,
            snap.cpu,
            {"nvme0n1": DiskStat(int(done), 0, int(done) * 8, int(done) // 10, *[0] * 7)},
            None,
            snap.mem,
            snap.tasks,
        )
    ctx = context()
    table = long_form.build_table(snaps, point=1, repeat=1, window=(0.5, 3.5), context=ctx)
    fake = fake_run([{"fio": {"read": 1000.0}}])
    long_form.write_table(fake.run.points / "0001-r1" / long_form.FILE_NAME, table, ctx)
    out = summary(fake)
    assert out["dev_iops"][0] == pytest.approx(1000.0)
    assert out["dev_bw_bytes"][0] == pytest.approx(1000.0 * 4096)
    assert out["dev_await_ms"][0] == pytest.approx(0.1, rel=0.02)
    assert out["dev_fio_ratio"][0] == pytest.approx(1.0)
    assert ctx["window_s"] == 3.0 and [i[0] for i in ctx["intervals"]] == [0.5, 1.5, 2.5, 3.0]


def test_each_verdict_with_its_reason(fake_run: Callable[..., FakeRun]) -> None:
    busy_kernel = {c: idle_cpu(user=0.30, system=0.60, softirq=0.08) for c in (0, 1)}
    busy_user = {c: idle_cpu(user=0.90, system=0.08) for c in (0, 1)}
    irq_cpu = {0: idle_cpu(user=0.1), 1: idle_cpu(irq=0.25, softirq=0.45)}
    spread = {"46": {0: 100.0}, "47": {1: 9000.0}}
    links = {
        "nvme0n1": {
            "link": {"current_speed": 8.0, "current_width": 1, "bw_bytes": 0.985e9},
            "pcie": {"link_bw_bytes": 0.985e9},
        }
    }
    fake = fake_run(
        [
            {"load": Load(busy_kernel, nvme(1000), {}, FIO)},
            {"load": Load(busy_user, nvme(1000), {}, FIO)},
            {"load": Load(QUIET, nvme(1000, util=0.99, await_ms=2.0, queue=2.0), {}, FIO)},
            {
                "load": Load(irq_cpu, nvme(9100), spread, FIO),
                "context": {"irqs": watched("46", "47")},
            },
            {
                "load": Load(
                    {0: idle_cpu(user=0.1), 1: idle_cpu(user=0.1, irq=0.05)},
                    nvme(5000),
                    {"47": {1: 5000.0}},
                    FIO,
                ),
                "context": {
                    "cpu_nodes": TWO_NODES,
                    "irqs": watched("47"),
                },
            },
            {
                "load": Load(
                    QUIET, {"nvme0n1": {"reads": 230_000, "sectors_read": 230_000 * 8, "io_ms": 500}}, {}, FIO
                ),
                "fio": {"read": 230_000.0},
            },
            {"load": Load(QUIET, nvme(1000), {}, FIO)},
            {"load": Load(QUIET, nvme(1000), {}, {(7, 7, "kworker/u8:1-flush", True): (0.0, 0.97, 1)})},
        ],
        links=links,
    )
    out = summary(fake).set_index("point")
    verdicts = out["bottleneck"].to_dict()
    assert verdicts == {
        1: "cpu:sys",
        2: "cpu:user",
        3: "device",
        4: "interrupts",
        5: "remote-irq",
        6: "link",
        7: "none-found",
        8: "cpu:sys",
    }
    reasons = out["bottleneck_reason"]
    assert "were 98 % busy" in reasons[1] and "system 60 %" in reasons[1]
    assert "in flight 99 % of the time" in reasons[3]
    assert "CPU 1 served" in reasons[4] and "70 % of its time in irq and softirq" in reasons[4]
    assert "100 % of the target devices' interrupts" in reasons[5]
    assert "nvme0n1 moved 0.94 GB/s one way, 96 %" in reasons[6]
    assert reasons[7].startswith("no resource reached its threshold") and "nvme0n1 util 50 %" in reasons[7]
    assert "thread kworker/u8:1-flush used 97 % of a CPU" in reasons[8]
    assert out["cpu_busy_pct"][1] == pytest.approx(98.0)
    assert out["cpu_sys_pct"][1] == pytest.approx(60.0)
    assert out["cpu_busy_max_pct"][4] == pytest.approx(70.0)
    assert out["irq_remote_pct"][4] == pytest.approx(0.0) and out["irq_remote_pct"][5] == pytest.approx(100.0)
    assert pd.isna(out["irq_remote_pct"][1])  # no interrupt lines watched
    assert out["top_thread"][8] == "kworker/u8:1-flush" and out["top_thread_pct"][8] == pytest.approx(97.0)
    assert out["dev_util_pct"][3] == pytest.approx(99.0)


def test_await_rising_with_depth_and_flat_iops_is_the_devices_limit(fake_run: Callable[..., FakeRun]) -> None:
    fake = fake_run(
        [
            {"params": {"iodepth": 8}, "load": Load(QUIET, nvme(10_000, util=0.9, await_ms=0.8), {}, FIO)},
            {"params": {"iodepth": 32}, "load": Load(QUIET, nvme(10_300, util=0.9, await_ms=3.1), {}, FIO)},
            {"params": {"iodepth": 64}, "load": Load(QUIET, nvme(20_000, util=0.9, await_ms=3.2), {}, FIO)},
        ]
    )
    out = summary(fake).set_index("point")
    assert out["bottleneck"].to_dict() == {1: "none-found", 2: "device", 3: "none-found"}
    assert (
        "from iodepth 8 to 32 the device's await rose from 0.80 to 3.10 ms while its IOPS grew 3%"
        in out["bottleneck_reason"][2]
    )


def test_device_and_fio_counts_that_differ_are_explained(fake_run: Callable[..., FakeRun]) -> None:
    merged = {"nvme0n1": {"reads": 250, "sectors_read": 1000 * 8, "io_ms": 100}}
    cached = {"nvme0n1": {"reads": 20, "sectors_read": 20 * 8, "io_ms": 100}}
    readahead = {"nvme0n1": {"reads": 2000, "sectors_read": 2000 * 64, "io_ms": 100}}
    fake = fake_run([{"load": Load(QUIET, d, {}, FIO)} for d in (merged, cached, readahead)])
    out = summary(fake).set_index("point")
    assert out["dev_fio_ratio"].round(3).to_dict() == {1: 0.25, 2: 0.02, 3: 2.0}
    notes = out["telemetry_note"]
    assert "device reads were 0.25× fio's: the same bytes in fewer, larger requests" in notes[1]
    assert "page cache" in notes[2]
    assert "readahead" in notes[3]


def test_missing_counters_give_na_and_notes_never_a_crash(fake_run: Callable[..., FakeRun]) -> None:
    fake = fake_run(
        [
            {
                "load": Load(QUIET, nvme(1000), {}, FIO),
                "missing": True,
                "context": {"notes": ["/proc/interrupts cannot be read"]},
            },
            {"load": None},  # telemetry: false
        ]
    )
    out = summary(fake).set_index("point")
    for column in ("dev_iops", "dev_util_pct", "cpu_busy_pct", "irq_remote_pct", "top_thread"):
        assert out[column].isna().all(), column
    assert out["bottleneck"][1] == "none-found"
    assert (
        "no CPU counters" in out["telemetry_note"][1]
        and "/proc/interrupts cannot be read" in out["telemetry_note"][1]
    )
    assert pd.isna(out["bottleneck"][2]) and "no telemetry recorded" in out["bottleneck_reason"][2]
    assert list(out.columns[-len(TELEMETRY) :]) == list(TELEMETRY)


def test_the_long_form_and_what_aggregates_it(fake_run: Callable[..., FakeRun]) -> None:
    load = Load(
        {0: idle_cpu(user=0.5, system=0.2), 1: idle_cpu(softirq=0.1)},
        nvme(1000),
        {"47": {1: 500.0}},
        {**FIO, (7, 7, "kworker/1:1H", True): (0.0, 0.3, 1), (100, 101, "fio", False): (0.1, 0.0, 1)},
    )
    fake = fake_run(
        [
            {
                "params": {"iodepth": 1},
                "load": load,
                "context": {
                    "cpu_nodes": TWO_NODES,
                    "irqs": watched("47"),
                },
            },
            {"params": {"iodepth": 2}, "load": load, "fio": {"read": 800.0, "write": 200.0}},
        ]
    )
    samples = iobench.telemetry(fake.run.path)
    assert list(samples.columns) == TELEMETRY_COLUMNS
    assert set(samples["source"]) == {"cpu", "thread", "disk", "irq", "mem"}
    cpu0 = samples[
        (samples["source"] == "cpu") & (samples["entity"] == "0") & (samples["metric"] == "busy_pct")
    ]
    assert cpu0["value"].tolist() == pytest.approx([70.0] * 8) and set(cpu0["node"]) == {0}
    fio = samples[(samples["source"] == "thread") & (samples["entity"] == "fio")].pivot_table(
        index="t_s", columns="metric", values="value"
    )
    assert fio["cpu_pct"].tolist() == pytest.approx([40.0] * 4) and fio["threads"].tolist() == [2.0] * 4
    assert fio["max_thread_pct"].tolist() == pytest.approx([30.0] * 4)
    irq = samples[(samples["source"] == "irq") & (samples["point"] == 1)]
    assert set(irq["entity"]) == {"47 nvme0q47"} and set(irq["metric"]) == {"cpu1_per_s"}
    assert set(irq["node"]) == {1}
    growth = samples[(samples["metric"] == "cache_growth_bytes") & (samples["point"] == 1)]["value"]
    assert growth.tolist() == [1000.0, 2000.0, 3000.0, 4000.0]
    frame = summary(fake)
    # point_totals carries the summary per point × direction; summarize keeps means and verdicts.
    totals = point_totals(frame)
    assert totals.set_index(["point", "direction"])["dev_iops"].to_dict() == {
        (1, "read"): 1000.0,
        (2, "read"): 1000.0,
        (2, "write"): 0.0,
    }
    assert "dev_iops" not in parameter_columns(frame) and "bottleneck" not in parameter_columns(frame)
    over = summarize(frame)
    over = over[over["direction"] == "read"]
    assert over.set_index("point")["cpu_busy_pct_mean"].to_dict() == pytest.approx({1: 40.0, 2: 40.0})
    assert over.set_index("point")["bottleneck"].to_dict() == {1: "remote-irq", 2: "none-found"}
    assert set(over["top_thread"]) == {"fio"}
    by_node = tm.cpu_by_node(samples)
    assert by_node[by_node["point"] == 1].set_index("node")["user"].to_dict() == pytest.approx(
        {0: 0.5, 1: 0.0}
    )
    shares = tm.thread_shares(samples, top=1)
    assert set(shares["thread"]) == {"fio"} and shares["cpu_pct"].tolist() == pytest.approx([40.0, 40.0])


def test_other_processes_on_the_points_cpus_are_counted_per_cpu(fake_run: Callable[..., FakeRun]) -> None:
    """A process that is neither fio's, the kernel's nor iobench's own counts against the CPU it ran on."""
    load = Load(
        {0: idle_cpu(user=0.9), 1: idle_cpu(user=0.9)},
        nvme(1000),
        {},
        {
            **FIO,
            (300, 300, "burner", False): (0.5, 0.0, 0),
            (400, 400, "iobench", False): (0.2, 0.0, 1),  # the runner itself: not another process
            (400, 401, "iobench-sample", False): (0.1, 0.0, 1),
            (500, 500, "iobench", False): (0.1, 0.0, 1),  # another process of the same name: is one
            (9, 9, "kworker/0:1", True): (0.0, 0.3, 0),
        },
    )
    quiet = Load(QUIET, nvme(1000), {}, FIO)
    fake = fake_run(
        [
            {"load": load, "context": {"runner_pid": 400}},
            {"load": quiet, "context": {"runner_pid": 400}},
        ]
    )
    samples = iobench.telemetry(fake.run.path)
    other = samples[(samples["metric"] == "other_pct") & (samples["point"] == 1)]
    assert other.groupby("entity")["value"].mean().to_dict() == pytest.approx({"0": 50.0, "1": 10.0})
    # A busy process is named with its pid; iobench's own threads are told apart from a namesake.
    threads = samples[(samples["source"] == "thread") & (samples["point"] == 1)]
    assert {"burner [pid 300]", "iobench [pid 500]", "iobench [iobench, pid 400]"} <= set(threads["entity"])
    assert "iobench-sample [iobench, pid 400]" in set(threads["entity"])
    out = summary(fake).set_index("point")
    assert out["cpu_other_pct"][1] == pytest.approx(30.0)
    assert out["cpu_other_max_pct"][1] == pytest.approx(50.0)
    assert out["cpu_other_top"][1] == "burner [pid 300] (50 %)"
    assert out["cpu_other_pct"][2] == 0.0 and pd.isna(out["cpu_other_top"][2])
    assert "iobench" not in (out["telemetry_note"][1] or "")


def test_a_run_without_telemetry_reads_as_an_empty_long_form(fake_run: Callable[..., FakeRun]) -> None:
    fake = fake_run([{"load": None}])
    samples = iobench.telemetry(fake.run.path)
    assert samples.empty and list(samples.columns) == TELEMETRY_COLUMNS


def test_verdicts_are_documented_with_their_thresholds() -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "telemetry.md").read_text()
    for verdict in tm.VERDICTS:
        assert f"`{verdict}`" in docs
    for name in (
        "CPU_BUSY_PCT",
        "THREAD_BUSY_PCT",
        "DEVICE_UTIL_PCT",
        "IRQ_CPU_PCT",
        "REMOTE_IRQ_PCT",
        "LINK_PCT",
    ):
        assert f"{getattr(tm, name):g} %" in docs, name
    for column in TELEMETRY:
        assert f"`{column}`" in docs


# --- the matrix key ----------------------------------------------------------------------

BASE = "version: 1\nname: t\ntargets: [{path: /tmp/iobench-telemetry-test.dat, size: 1M}]\nfio: {ioengine: 'null', rw: read}\n"


@pytest.mark.fio
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 1.0),
        ("telemetry: true\n", 1.0),
        ("telemetry: false\n", None),
        ("telemetry: {interval: 250ms}\n", 0.25),
        ("telemetry: {interval: 2}\n", 2.0),
    ],
)
def test_the_telemetry_key(text: str, expected: float | None) -> None:
    assert parse_matrix(BASE + text).telemetry_s == expected


@pytest.mark.fio
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("telemetry: often\n", "telemetry: 'often' is not true, false or a mapping"),
        ("telemetry: {interval: 0.001}\n", "telemetry.interval: interval 0.001 s is outside 0.05–3600 s"),
        ("telemetry: {interval: soon}\n", "telemetry.interval: 'soon' is not a duration"),
        ("telemetry: {intervall: 1}\n", "telemetry.intervall: unknown key"),
    ],
)
def test_a_bad_telemetry_key_is_refused(text: str, message: str) -> None:
    with pytest.raises(MatrixError, match=message):
        parse_matrix(BASE + text)


@pytest.mark.fio
def test_a_runs_points_find_their_devices_in_sysfs_once(
    write_matrix: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per run and set of targets, not per point; each point gets its own copy to add notes to."""
    from iobench.planner.plans import plan
    from iobench.runner import recording
    from iobench.runner.sites import LocalSite

    matrix = iobench.load_matrix(
        write_matrix(
            f"version: 1\nname: w\ntargets: [{{path: {tmp_path / 't.dat'}, size: 1M}}]\n"
            "fio: {ioengine: 'null', rw: read}\nmatrix: {iodepth: [1, 2, 4]}\n"
        )
    )
    planned = plan(matrix)
    site = LocalSite(planned.site(None))
    looked: list[str] = []
    real = recording._watch_devices

    def counting(*args: Any) -> dict[str, dict[str, Any]]:
        looked.append("devices")
        return real(*args)

    monkeypatch.setattr(recording, "_watch_devices", counting)
    known: recording.Watched = {}
    contexts = []
    for point in planned.runs:
        sampling = recording.start(planned, point, site, known=known)
        assert sampling is not None
        sampling.stop()
        sampling.sampler.stop()
        contexts.append(sampling.context)
    assert looked == ["devices"]
    assert all(c["devices"] == contexts[0]["devices"] and c["irqs"] == contexts[0]["irqs"] for c in contexts)
    contexts[0]["notes"].append("only this point's")
    contexts[0]["devices"][next(iter(contexts[0]["devices"]))]["role"] = "changed"
    again = recording.start(planned, planned.runs[0], site, known=known)
    assert again is not None
    again.stop()
    again.sampler.stop()
    assert "only this point's" not in again.context["notes"]
    assert "changed" not in [f["role"] for f in again.context["devices"].values()]

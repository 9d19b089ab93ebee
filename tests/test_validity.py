"""Is this number real? The validity checks of every point, each trap set and each clean control.

Traps this machine cannot set for real (a governor, throttle counters, an NVMe
temperature, poll queues) are set on fake sysfs trees and read through the same
collector a run uses (:func:`iobench.system.pointfacts.collect`); the rest are
set on saved points whose fio output, telemetry and files say what a trap
leaves behind. The real traps (fio on loop devices and files) are in
``test_validity_traps.py``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from test_pointfacts import hot_nvme_machine, write
from test_telemetry import FIO, QUIET, Load, context, idle_cpu, make_snapshots, nvme

import iobench
from iobench.results import samples as long_form
from iobench.results import validity as vd
from iobench.results.loading import RunWarning
from iobench.results.points import parameter_columns
from iobench.store.records import MachineFacts, Manifest, PointMeta, ProcessRecord
from iobench.store.rundir import RunDir
from iobench.system.hostfs import SystemRoot
from iobench.system.pointfacts import collect
from iobench.system.stability import show
from iobench.system.topology import TargetLocation

DATA = Path(__file__).parent / "data" / "fio" / "fio-3.33"
TARGET = "/dev/nvme0n1"
MiB = 1 << 20


def fio_output(direction: str, bw: float) -> str:
    """fio-3.33's JSON of one job named ``t0`` that moved ``bw`` bytes/s in ``direction`` for 4 s."""
    doc = json.loads((DATA / ("write.json" if direction == "write" else "read.json")).read_text())
    job = doc["jobs"][0]
    job["jobname"] = "t0"
    side = job[direction]
    side.update(
        bw_bytes=int(bw), io_bytes=int(bw * 4), runtime=4000, iops=bw / 4096, total_ios=int(bw * 4 / 4096)
    )
    side["bw"] = int(bw / 1024)
    job["job_runtime"] = 4000
    return json.dumps(doc)


def facts_of(
    before: SystemRoot, after: SystemRoot | None = None, **targets: dict[str, Any]
) -> dict[str, Any]:
    location = TargetLocation(TARGET, "block", "nvme0n1", ("nvme0n1",), 0)
    facts = {
        "before": collect(before, [location], [0, 1], phase="before"),
        "after": collect(after or before, [location], [0, 1], phase="after"),
    }
    facts["before"]["targets"][TARGET].update(targets.get("target", {}))
    return facts


def quiet_machine(root: Path) -> SystemRoot:
    """A machine a benchmark is happy with: performance governor, steady clock, cool disk, poll queues."""
    system = hot_nvme_machine(root)
    for cpu in (0, 1):
        write(root, f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", "performance")
        write(root, f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq", "3000000")
    write(root, "sys/class/hwmon/hwmon1/temp1_input", "40850")
    write(root, "sys/module/nvme/parameters/poll_queues", "4")
    write(root, "sys/block/nvme0n1/queue/io_poll", "1")
    return system


def saved_run(
    tmp_path: Path, points: Sequence[Mapping[str, Any]], hosts: Sequence[dict[str, Any]] = ()
) -> RunDir:
    """A run directory of points as the runner leaves them: job file, fio's output, stderr, meta, telemetry.

    A point with ``host`` ran on that host (``hosts``: the manifest's facts of each host).
    """
    run = RunDir.create(tmp_path / "runs", "v", "version: 1\n")
    run.write_manifest(Manifest(name="v", machine=MachineFacts(host="h"), hosts=list(hosts)))
    for index, spec in enumerate(points, 1):
        point, repeat = spec.get("point", index), spec.get("repeat", 1)
        key = f"{point:04d}-r{repeat}"
        staging = run.staging(key)
        options = {"ioengine": "libaio", "rw": "randread", "direct": "1", **spec.get("options", {})}
        lines = ["[global]", *(k if v is None else f"{k}={v}" for k, v in options.items())]
        lines += ["", "[t0]", f"filename={TARGET}"]
        (staging / "job.fio").write_text("\n".join(lines) + "\n")
        direction = "write" if spec.get("writes") else "read"
        (staging / "fio.json").write_text(
            spec.get("head", "") + fio_output(direction, spec.get("fio_bw", 400 * MiB))
        )
        (staging / "stderr.txt").write_text(spec.get("stderr", ""))
        if spec.get("load") is not None:
            snaps = make_snapshots(spec["load"])
            ctx = context(**spec.get("context", {}))
            table = long_form.build_table(snaps, point=point, repeat=repeat, window=(0.0, 4.0), context=ctx)
            long_form.write_table(staging / long_form.FILE_NAME, table, ctx)
        process = ProcessRecord(
            argv=["fio", "job.fio"],
            jobfile_name="job.fio",
            output="fio.json",
            targets=[TARGET],
            sections=["t0"],
            cpus=spec.get("cpus", "0-1"),
            target_disks={TARGET: [f"{spec['host']}:nvme0n1" if spec.get("host") else "nvme0n1"]},
            returncode=0,
            host=spec.get("host"),
        )
        meta = PointMeta(
            key=key,
            point=point,
            repeat=repeat,
            params={"iodepth": spec.get("iodepth", 1)},
            writes=bool(spec.get("writes")),
            status=spec.get("status", "ok"),
            started=f"2026-01-01T00:00:{index:02d}",
            processes=[process],
            facts=spec.get("facts"),
        )
        run.commit(staging, key, meta)
    counts = Counter(str(spec.get("status", "ok")) for spec in points)
    finished = Manifest(
        name="v",
        machine=MachineFacts(host="h"),
        hosts=list(hosts),
        status="finished",
        finished="2026-01-01T00:01:00",
        counts=counts,
    )
    run.write_manifest(finished)  # a run that ended, as the runner leaves it
    return run


def verdicts(run: RunDir) -> pd.DataFrame:
    frame = iobench.load(run.path, rebuild=True)
    return frame.drop_duplicates(["point", "repeat"]).set_index(["point", "repeat"])


def codes(row: pd.Series) -> set[str]:
    return set(str(row["validity"]).split()) if not pd.isna(row["validity"]) else set()


@pytest.fixture
def quiet(tmp_path: Path) -> SystemRoot:
    return quiet_machine(tmp_path / "quiet")


def clean(quiet: SystemRoot, **extra: Any) -> dict[str, Any]:
    """A point that walks into no trap: direct reads of written data on a quiet machine, device saw them all."""
    ios = 400 * MiB / 4096
    seen = nvme(ios)
    if extra.get("writes"):  # the device saw fio's writes
        seen["nvme0n1"] = {"writes": ios, "sectors_written": ios * 8, "write_ms": ios * 0.1, "io_ms": 500.0}
    spec: dict[str, Any] = {
        "facts": facts_of(quiet, target={"region_bytes": 256 * MiB, "data_bytes": 256 * MiB}),
        "load": Load(QUIET, seen, {}, FIO),
    }
    spec.update(extra)
    return spec


# --- each trap, and the same point without it ---------------------------------------------


def test_a_clean_point_has_no_finding_and_nothing_left_unchecked(quiet: SystemRoot, tmp_path: Path) -> None:
    row = verdicts(saved_run(tmp_path, [clean(quiet)])).iloc[0]
    assert row["validity"] == "" and row["validity_detail"] == ""
    # what cannot be judged here: steady state without fio's logs, an interval from one repeat
    assert row["validity_na"] == (
        "not-steady: no fio logs in the point directory (a run made before iobench wrote them). "
        "noisy: one repeat: the spread of repeats needs 2 or more."
    )


def test_buffered_reads_the_device_did_not_see_are_the_page_cache(quiet: SystemRoot, tmp_path: Path) -> None:
    trap = clean(quiet, options={"direct": "0"}, fio_bw=2000 * MiB, load=Load(QUIET, nvme(256.0), {}, FIO))
    control = clean(quiet, options={"direct": "0"})
    out = verdicts(saved_run(tmp_path, [trap, control]))
    assert codes(out.loc[(1, 1)]) == {"page-cache"}
    assert out.loc[(1, 1), "validity_detail"] == (
        "page-cache: fio read 2000.0 MiB/s but the device saw 1.0 MiB/s of them (0.05 %): "
        "buffered I/O served from the page cache."
    )
    assert codes(out.loc[(2, 1)]) == set()


def test_without_device_counters_a_buffered_target_smaller_than_free_memory_is_the_page_cache(
    quiet: SystemRoot, tmp_path: Path
) -> None:
    small = clean(quiet, options={"direct": "0", "invalidate": "0"}, load=None)
    small["facts"]["before"]["mem_available"] = 8 << 30
    invalidated = clean(quiet, options={"direct": "0"}, load=None)  # fio drops the cache at each pass
    invalidated["facts"]["before"]["mem_available"] = 8 << 30
    direct = clean(quiet, load=None)
    unknown = clean(quiet, options={"direct": "0", "invalidate": "0"}, load=None, facts=None)
    out = verdicts(saved_run(tmp_path, [small, invalidated, direct, unknown]))
    assert codes(out.loc[(1, 1)]) == {"page-cache"}
    assert "256.0 MiB target with 8.0 GiB of memory available" in out.loc[(1, 1), "validity_detail"]
    assert codes(out.loc[(2, 1)]) == set()
    assert "fio drops the cached pages at each pass (invalidate=1)" in out.loc[(2, 1), "validity_na"]
    assert codes(out.loc[(3, 1)]) == set() and "page-cache" not in out.loc[(3, 1), "validity_na"]
    assert codes(out.loc[(4, 1)]) == set()
    assert (
        "page-cache: buffered reads (invalidate=0), but no device counters" in out.loc[(4, 1), "validity_na"]
    )


def test_reads_of_holes_are_sparse_reads(quiet: SystemRoot, tmp_path: Path) -> None:
    sparse = clean(quiet)
    sparse["facts"]["before"]["targets"][TARGET].update(data_bytes=16 * MiB, backing="/var/tmp/img")
    out = verdicts(saved_run(tmp_path, [sparse, clean(quiet)]))
    assert codes(out.loc[(1, 1)]) == {"sparse-read"}
    assert out.loc[(1, 1), "validity_detail"] == (
        "sparse-read: 93.8 % of the 256.0 MiB region read (240.0 MiB) holds no data (holes or unwritten "
        "extents of /var/tmp/img): those reads return zeros without touching the device."
    )
    assert codes(out.loc[(2, 1)]) == set()


def test_a_block_device_read_far_faster_than_the_run_wrote_it(quiet: SystemRoot, tmp_path: Path) -> None:
    hidden = {
        "region_bytes": None,
        "data_bytes": None,
        "note": "the written regions of a block device are not visible",
    }
    read = clean(quiet, facts=facts_of(quiet, target=hidden), fio_bw=3000 * MiB)
    read["load"] = Load(QUIET, nvme(3000 * MiB / 4096), {}, FIO)
    wrote = clean(
        quiet,
        facts=facts_of(quiet, target=hidden),
        writes=True,
        options={"rw": "randwrite"},
        fio_bw=300 * MiB,
    )
    wrote["load"] = None
    reread = dict(read)
    out = verdicts(saved_run(tmp_path, [read, wrote, reread]))
    assert codes(out.loc[(1, 1)]) == {"sparse-read"}
    assert "10.0× the fastest writes to it in this run (300.0 MiB/s)" in out.loc[(1, 1), "validity_detail"]
    assert codes(out.loc[(3, 1)]) == set()  # after the run wrote it, its reads are of data
    lone = verdicts(saved_run(tmp_path / "lone", [clean(quiet, facts=facts_of(quiet, target=hidden))])).iloc[
        0
    ]
    assert (
        codes(lone) == set() and "sparse-read: the written regions of a block device" in lone["validity_na"]
    )


def test_hipri_without_poll_queues(tmp_path: Path, quiet: SystemRoot) -> None:
    no_poll = hot_nvme_machine(tmp_path / "nopoll")
    trap = clean(quiet, options={"ioengine": "pvsync2", "hipri": "1"}, facts=facts_of(no_poll))
    polled = clean(quiet, options={"ioengine": "pvsync2", "hipri": "1"})
    out = verdicts(saved_run(tmp_path, [trap, polled, clean(quiet)]))
    assert "hipri-no-poll" in codes(out.loc[(1, 1)])
    assert (
        "hipri-no-poll: hipri asks for polled completions, but nvme0n1 has no polling (io_poll 0, "
        "NVMe poll_queues 0): the kernel completed them by interrupt." in out.loc[(1, 1), "validity_detail"]
    )
    assert "hipri-no-poll" not in codes(out.loc[(2, 1)]) | codes(out.loc[(3, 1)])


def test_a_process_on_the_points_cpus_is_contention(quiet: SystemRoot, tmp_path: Path) -> None:
    burner = Load(
        {0: idle_cpu(user=0.9), 1: idle_cpu(user=0.3)},
        nvme(400 * MiB / 4096),
        {},
        {**FIO, (300, 300, "burner", False): (0.6, 0.0, 0)},
    )
    light = Load(QUIET, nvme(400 * MiB / 4096), {}, {**FIO, (301, 301, "sshd", False): (0.01, 0.0, 1)})
    out = verdicts(saved_run(tmp_path, [clean(quiet, load=burner), clean(quiet, load=light)]))
    assert codes(out.loc[(1, 1)]) == {"cpu-contention"}
    assert out.loc[(1, 1), "validity_detail"] == (
        "cpu-contention: other processes took 30 % of the point's CPUs on average and 60 % of the busiest "
        "one; the busiest of them: burner [pid 300] (60 %)."
    )
    assert codes(out.loc[(2, 1)]) == set()


def test_a_ramping_governor_and_a_moving_clock_are_freq_scaling(tmp_path: Path, quiet: SystemRoot) -> None:
    ramping = hot_nvme_machine(tmp_path / "ramp")  # CPU 0 on schedutil at 1.2 GHz
    later = hot_nvme_machine(tmp_path / "later")
    write(tmp_path / "later", "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", "2800000")
    out = verdicts(saved_run(tmp_path, [clean(quiet, facts=facts_of(ramping, later))]))
    row = out.iloc[0]
    assert "freq-scaling" in codes(row)
    assert (
        "freq-scaling: CPU 0 ran the schedutil governor (not performance): the clock follows the load; "
        "CPU 0's clock moved from 1.20 to 2.80 GHz during the point." in row["validity_detail"]
    )


def test_rising_throttle_counts_and_a_hot_nvme_are_throttled(tmp_path: Path, quiet: SystemRoot) -> None:
    before = quiet_machine(tmp_path / "b")
    after = quiet_machine(tmp_path / "a")
    write(tmp_path / "a", "sys/devices/system/cpu/cpu1/thermal_throttle/core_throttle_count", "16")
    write(tmp_path / "a", "sys/class/hwmon/hwmon1/temp1_input", "71850")
    out = verdicts(saved_run(tmp_path, [clean(quiet, facts=facts_of(before, after)), clean(quiet)]))
    assert codes(out.loc[(1, 1)]) == {"throttled"}
    assert out.loc[(1, 1), "validity_detail"] == (
        "throttled: CPU 1's thermal throttle count (core) rose by 5 during the point; "
        "nvme0n1 reached 71.8 °C, past its warning mark of 70.8 °C."
    )
    assert codes(out.loc[(2, 1)]) == set()


def test_default_buffers_written_to_a_compressing_stack(quiet: SystemRoot, tmp_path: Path) -> None:
    btrfs = {"fstype": "btrfs", "fs_options": "rw,relatime,compress=zstd:3,space_cache=v2"}
    vdo = {
        "stack": [{"name": "dm-3", "dm_name": "vg-vpool0-vpool", "dm_uuid": "LVM-xyz-vpool", "model": None}]
    }
    spec = {"writes": True, "options": {"rw": "randwrite"}}
    points = [
        clean(quiet, facts=facts_of(quiet, target=btrfs), **spec),
        clean(quiet, facts=facts_of(quiet, target=vdo), **spec),
        clean(
            quiet,
            facts=facts_of(quiet, target=btrfs),
            writes=True,
            options={"rw": "randwrite", "refill_buffers": None},
        ),
        clean(quiet, facts=facts_of(quiet, target={"fstype": "ext4", "fs_options": "rw"}), **spec),
        clean(quiet, facts=facts_of(quiet, target=btrfs)),  # reads
    ]
    out = verdicts(saved_run(tmp_path, points))
    assert codes(out.loc[(1, 1)]) == {"compressible-writes"}
    assert out.loc[(1, 1), "validity_detail"] == (
        "compressible-writes: fio's default buffer contents are written to btrfs mounted with compress=zstd:3, "
        "which compresses them; set refill_buffers or buffer_compress_percentage."
    )
    assert (
        "dm-vdo (dm-3: vg-vpool0-vpool), which deduplicates and compresses"
        in out.loc[(2, 1), "validity_detail"]
    )
    assert [codes(out.loc[(p, 1)]) for p in (3, 4, 5)] == [set(), set(), set()]


def test_fio_warnings_on_stderr_are_kept_verbatim(quiet: SystemRoot, tmp_path: Path) -> None:
    warned = clean(quiet, stderr="fio: io_u error on file /dev/nvme0n1: Operation not supported\n\n")
    noted = clean(
        quiet,
        head="note: both iodepth >= 1 and synchronous I/O engine are selected, queue depth will be capped at 1\n",
    )
    out = verdicts(saved_run(tmp_path, [warned, noted, clean(quiet)]))
    assert out.loc[(1, 1), "validity_detail"] == (
        'fio-warning: fio said on stderr: "fio: io_u error on file /dev/nvme0n1: Operation not supported".'
    )
    assert out.loc[(2, 1), "validity_detail"].startswith(
        'fio-warning: fio said before its results: "note: both'
    )
    assert codes(out.loc[(3, 1)]) == set()


def test_what_the_fio_client_says_of_every_point_is_no_warning(quiet: SystemRoot, tmp_path: Path) -> None:
    """The client prints each server's job lines before the results: only what is more is a warning."""
    ordinary = "".join(
        f"<{h}> {h}.dat: (g=0): rw=randread, bs=(R) 4096B-4096B, (W) 4096B-4096B, (T) 4096B-4096B, "
        f"ioengine=null, iodepth=4\n<{h}> ...\n<{h}> Starting 2 processes\n<{h}> \n"
        for h in ("h0", "h1", "h10")
    )
    said = "<h1> fio: pid=4242, got signal=9\n"
    out = verdicts(saved_run(tmp_path, [clean(quiet, head=ordinary), clean(quiet, head=ordinary + said)]))
    assert codes(out.loc[(1, 1)]) == set()
    assert out.loc[(2, 1), "validity_detail"] == (
        'fio-warning: fio said before its results: "<h1> fio: pid=4242, got signal=9".'
    )


def test_repeats_far_apart_are_noisy_by_the_summary_s_rule(quiet: SystemRoot, tmp_path: Path) -> None:
    wide = [clean(quiet, point=1, repeat=r, fio_bw=bw * MiB) for r, bw in ((1, 400), (2, 520), (3, 280))]
    tight = [clean(quiet, point=2, repeat=r, fio_bw=bw * MiB) for r, bw in ((1, 400), (2, 401), (3, 399))]
    out = verdicts(saved_run(tmp_path, [*wide, *tight]))
    for repeat in (1, 2, 3):
        assert "noisy" in codes(out.loc[(1, repeat)])
        assert codes(out.loc[(2, repeat)]) == set()
    detail = out.loc[(1, 1), "validity_detail"]
    assert "IOPS over 3 repeats vary by a CV of 30.0 % (limit 5 %)" in detail
    assert "the 95 % CI of the mean is ±74.5 %" in detail


@pytest.mark.parametrize(
    ("bandwidths", "flagged"),
    [
        ((400.0, 407.2), False),  # two repeats 1.8 % apart: a CV of 1.3 %
        ((400.0, 425.0), False),  # 6 % apart: a CV of 4.3 %, a 95 % CI of ±38 % (two repeats say little)
        ((400.0, 440.0), True),  # 10 % apart: a CV of 6.7 %
        ((400.0, 412.0, 388.0, 430.0, 370.0), True),  # five repeats with a CV of 5.6 %: a CI of ±7 %
        ((400.0, 404.0, 396.0, 402.0, 398.0), False),
    ],
)
def test_the_validity_check_and_the_summary_agree_on_what_is_noisy(
    quiet: SystemRoot, tmp_path: Path, bandwidths: tuple[float, ...], flagged: bool
) -> None:
    saved = [clean(quiet, point=1, repeat=r, fio_bw=bw * MiB) for r, bw in enumerate(bandwidths, 1)]
    run = saved_run(tmp_path, saved)
    out = verdicts(run)
    summary = iobench.summarize(iobench.load(run.path))
    assert bool(summary["noisy"].iloc[0]) is flagged
    assert ("noisy" in codes(out.loc[(1, 1)])) is flagged, out.loc[(1, 1), "validity_detail"]


def test_a_point_that_was_not_steady(quiet: SystemRoot, tmp_path: Path) -> None:
    run = saved_run(tmp_path, [clean(quiet), clean(quiet)])
    frame = iobench.load(run.path)
    frame["steady"] = pd.array([False, True], dtype="boolean")
    frame["steady_reason"] = pd.array(
        ["IOPS fell 30 % across the last 5 windows", "level and trend within limits"], dtype="string"
    )
    out = vd.with_validity(frame, run).set_index("point")
    assert out.loc[1, "validity"] == "not-steady"
    assert out.loc[1, "validity_detail"] == "not-steady: IOPS fell 30 % across the last 5 windows."
    assert out.loc[2, "validity"] == ""


def test_points_on_a_host_are_judged_by_its_settings_as_the_run_started(tmp_path: Path) -> None:
    # Host a: CPU 0 on schedutil, CPU 1 on performance; nvme0n1 without polling (its manifest's system show).
    settings = [s.to_json() for s in show(hot_nvme_machine(tmp_path / "host-a"), ("nvme0n1",))]
    on_a = {"facts": None, "host": "a", "options": {"ioengine": "pvsync2", "hipri": "1"}}
    pinned = {**on_a, "cpus": "1"}
    on_b = {
        **on_a,
        "host": "b",
    }  # a host whose manifest entry has no settings (a run from before they were kept)
    hosts = [{"host": "a", "system": settings}, {"host": "b"}]
    out = verdicts(saved_run(tmp_path, [on_a, pinned, on_b], hosts))
    row = out.loc[(1, 1)]
    assert codes(row) == {"freq-scaling", "hipri-no-poll"}
    assert row["validity_detail"] == (
        "hipri-no-poll: hipri asks for polled completions, but a:nvme0n1 had no polling as the run started "
        "(io_poll 0, NVMe poll_queues 0): the kernel completed them by interrupt. "
        "freq-scaling: host a: CPU 0 ran the schedutil governor as the run started (not performance): the "
        "clock follows the load."
    )
    na = row["validity_na"]
    assert "freq-scaling: host a: the clock during the point is watched on this machine only." in na
    assert "throttled: facts are read around fio on this machine only, and the point ran on host a." in na
    assert codes(out.loc[(2, 1)]) == {"hipri-no-poll"}  # pinned to CPU 1, on performance
    unknown = out.loc[(3, 1)]
    assert codes(unknown) == set()
    assert (
        "freq-scaling: the run's manifest has no settings of host b (a run from before iobench kept them)."
        in unknown["validity_na"]
    )
    assert "hipri-no-poll: the run's manifest has no settings of host b" in unknown["validity_na"]


# --- what cannot be checked, and how it shows -------------------------------------------------


def test_a_point_without_facts_or_telemetry_is_na_with_notes_never_a_finding(tmp_path: Path) -> None:
    out = verdicts(saved_run(tmp_path, [{"facts": None}])).iloc[0]
    assert out["validity"] == ""
    notes = out["validity_na"]
    for code in ("sparse-read", "cpu-contention", "freq-scaling", "throttled"):
        assert f"{code}: " in notes, code
    assert "page-cache" not in notes  # direct I/O: the page cache is not in the way


def test_facts_the_collector_could_not_read_say_why(quiet: SystemRoot, tmp_path: Path) -> None:
    unread = {"phase": "before", "notes": ["the facts could not be read: [Errno 5] Input/output error"]}
    out = verdicts(
        saved_run(tmp_path, [clean(quiet, facts={"before": unread, "after": {**unread, "phase": "after"}})])
    )
    row = out.iloc[0]
    assert row["validity"] == ""
    assert "freq-scaling: the facts could not be read: [Errno 5] Input/output error." in row["validity_na"]
    assert "no cpufreq" not in row["validity_na"]


def test_failed_points_are_not_judged(quiet: SystemRoot, tmp_path: Path) -> None:
    out = verdicts(saved_run(tmp_path, [clean(quiet, status="failed", stderr="fio: pid=1, err=5")])).iloc[0]
    assert pd.isna(out["validity"]) and pd.isna(out["validity_detail"])


def test_a_damaged_saved_file_is_named_where_the_verdict_would_be(quiet: SystemRoot, tmp_path: Path) -> None:
    run = saved_run(tmp_path, [clean(quiet)])
    (run.points / "0001-r1" / "job.fio").unlink()
    out = verdicts(run).iloc[0]
    assert "job.fio" in out["validity_na"] and "cannot be read" in out["validity_na"]


def test_validity_columns_are_not_parameters_and_old_frames_are_rebuilt(
    quiet: SystemRoot, tmp_path: Path
) -> None:
    run = saved_run(tmp_path, [clean(quiet)])
    frame = iobench.load(run.path)
    assert {"validity", "validity_detail", "validity_na"} <= set(frame.columns)
    assert not {"validity", "validity_detail", "validity_na"} & set(parameter_columns(frame))
    assert str(frame["validity"].dtype) == "string"


def test_findings_lists_each_point_with_a_finding(quiet: SystemRoot, tmp_path: Path) -> None:
    trap = clean(quiet, stderr="fio: warning\n")
    frame = iobench.load(saved_run(tmp_path, [trap, clean(quiet)]).path)
    found = vd.findings(frame)
    assert found[["point", "repeat", "validity"]].to_dict("records") == [
        {"point": 1, "repeat": 1, "validity": "fio-warning"}
    ]
    assert vd.findings(frame.drop(columns=["validity", "validity_detail", "validity_na"])).empty


def test_every_check_is_documented_with_its_rule_threshold_and_source() -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "validity.md").read_text()
    assert [c.code for c in vd.CHECKS] == list(vd.CODES)
    for check in vd.CHECKS:
        assert f"`{check.code}`" in docs, check.code
        assert check.threshold in docs, check.code
        assert check.source in docs, check.code
    for name in vd.THRESHOLDS:
        assert f"`{name}`" in docs, name


def test_an_old_run_gets_verdicts_too(quiet: SystemRoot, tmp_path: Path) -> None:
    """A frame saved before the checks existed (schema 2) is rebuilt from the points, and judged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = saved_run(tmp_path, [clean(quiet, stderr="fio: something odd\n")])
    old = iobench.load(run.path).drop(columns=["validity", "validity_detail", "validity_na"])
    table = pa.Table.from_pandas(old, preserve_index=False)
    pq.write_table(table.replace_schema_metadata({b"iobench_schema_version": b"2"}), run.frame_path)
    with pytest.warns(RunWarning, match="older iobench"):
        again = iobench.load(run.path)
    assert again["validity"].tolist() == ["fio-warning"]


# --- where the verdicts show --------------------------------------------------------------------


def test_the_report_shows_findings_beside_the_numbers(quiet: SystemRoot, tmp_path: Path) -> None:
    from iobench.report.page import write_report

    run = saved_run(tmp_path, [clean(quiet, stderr="fio: odd\n", iodepth=1), clean(quiet, iodepth=2)])
    written = write_report(run.path, tmp_path / "report")
    page = written.html.read_text()
    assert "Is the number real? Validity findings" in page
    assert "fio-warning: fio said on stderr: &#34;fio: odd&#34;." in page
    flagged = [row.split("</tr>")[0] for row in page.split('<tr class="flag">')[1:]]
    assert [row[:10] for row in flagged if row.endswith("fio-warning</td>")] == ["<td>1</td>"]
    assert "not-steady" in page and "Checks that could not run on some points" in page


def test_a_report_of_clean_points_says_so(quiet: SystemRoot, tmp_path: Path) -> None:
    from iobench.report.page import write_report

    page = write_report(saved_run(tmp_path, [clean(quiet)]).path, tmp_path / "r").html.read_text()
    assert "No validity check found a trap in the 1 points × repeats judged." in page


def test_figure_captions_mark_the_points_with_findings(quiet: SystemRoot, tmp_path: Path) -> None:
    from iobench.plots import plotstyle, sweep

    frame = iobench.load(
        saved_run(tmp_path, [clean(quiet, iodepth=1), clean(quiet, iodepth=2, stderr="x\n")]).path
    )
    assert plotstyle.validity_note(frame) == "⚠ validity: point 2 fio-warning"
    figure = sweep(frame)
    texts = [t.get_text() for t in figure.findobj(match=lambda a: hasattr(a, "get_text"))]
    assert any("⚠ validity: point 2 fio-warning" in t.replace("\n", " ") for t in texts)
    assert plotstyle.validity_note(frame.assign(validity="")) == ""
    assert plotstyle.validity_note(frame.drop(columns=["validity"])) == ""


def test_the_end_of_a_run_lists_the_points_with_findings(quiet: SystemRoot, tmp_path: Path) -> None:
    from iobench.cli.console import validity_lines

    frame = iobench.load(saved_run(tmp_path, [clean(quiet), clean(quiet, stderr="fio: odd\n")]).path)
    lines = validity_lines(frame)
    assert lines[0].startswith("validity: 1 of 2 points with findings (fio-warning 1); details: --verbose, ")
    assert lines[1:] == ["  point 2: fio-warning"]
    assert validity_lines(frame, verbose=True)[1:] == [
        "  point 2: fio-warning",
        '      fio-warning: fio said on stderr: "fio: odd".',
    ]
    assert validity_lines(frame.assign(validity="")) == [
        "validity: no check found a trap in the 2 points judged"
    ]
    assert validity_lines(None) == []


def test_the_devices_rates_of_a_point_on_hosts_are_summed_over_its_hosts() -> None:
    """fio's totals of a point on two hosts are the cluster's: so are the devices' rates compared with them."""
    rows = pd.DataFrame(
        {
            "point": [1, 1, 1, 2],
            "repeat": [1, 1, 1, 1],
            "direction": ["read"] * 4,
            "host": pd.array(["a", "a", "b", None], dtype="string"),
            "dev_bw_bytes": [100.0, 100.0, 300.0, 50.0],
            "dev_iops": [1.0, 1.0, None, 5.0],
        }
    )
    bw, iops = vd.device_rates(rows, ["point", "repeat", "direction"])
    assert bw == {(1, 1, "read"): 400.0, (2, 1, "read"): 50.0}
    assert iops == {(2, 1, "read"): 5.0}  # host b's count is missing: no sum of point 1

"""Each validity trap set for real on this machine, and the same point without it.

fio runs on loop devices and on files of file systems on them: buffered reads
of a small file, O_DIRECT reads of a sparse file, ``hipri`` on a loop device
(no poll queues), a CPU burner pinned to the point's CPU, writes of fio's
default buffers to btrfs mounted with compression, a synchronous engine asked
for a queue depth, buffered writes written back in large requests, O_DIRECT on
tmpfs and on a loop device over a tmpfs file, a loop device over a cached file,
a job that ends inside its ramp. Traps this machine cannot set (a governor,
throttle counters, an NVMe temperature, poll queues) are in
``test_validity.py`` on fake sysfs trees.

Other engineers' processes share this machine: a control may see
``cpu-contention`` (or ``not-steady``) from them, which is no false alarm; the
controls assert the trap's own code is absent and nothing else appears.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from loopdev import Loop, LoopFactory

import iobench
from iobench.matrix.model import load_matrix
from iobench.results import validity as vd
from iobench.runner.sweep import NullProgress, run

pytestmark = [pytest.mark.fio, pytest.mark.loopdev, pytest.mark.root]

#: What other processes on this shared machine can cause in a clean point.
LOAD_DEPENDENT = {"cpu-contention", "not-steady"}


TIMED = "  bs: 4k\n  runtime: 2\n  time_based: 1\n"


def sweep(
    tmp_path: Path,
    name: str,
    target: str,
    fio: str,
    matrix: str = "",
    extra: str = "",
    base: str = TIMED,
    allow_write: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Run a one-target matrix (``fio``: option lines indented by two, ``extra``: the target's own lines).

    ``base``: the options every point has (4k I/Os for 2 s); ``allow_write``: as ``--allow-write``.
    """
    text = (
        f"version: 1\nname: {name}\ntargets:\n  - path: {target}\n{extra}\n"
        f"telemetry: {{interval: 0.25}}\nfio:\n{base}"
        f"{fio}\n"
    )
    if matrix:
        text += "matrix:\n" + textwrap.indent(matrix, "  ")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    result = run(
        load_matrix(path, allow_write=allow_write),
        out=tmp_path / "results",
        progress=NullProgress(),
        allow_write=allow_write,
    )
    assert result.exit_code == 0, result.counts
    frame = iobench.load(result.run_dir)
    out = frame.drop_duplicates(["point", "repeat"]).set_index("point")
    out.attrs["run_dir"] = result.run_dir
    for point, row in out.iterrows():  # shown with -s: what each check found on this machine
        print(
            f"{name} point {point}: [{row['validity']}] {row['validity_detail']} | n/a: {row['validity_na']}"
        )
    return out


def codes(row: pd.Series) -> set[str]:
    return set(str(row["validity"]).split())


def direct_io(loop: Loop) -> Loop:
    """``loop`` reading and writing its backing file with direct I/O: the file's page cache out of the way."""
    subprocess.run(["losetup", "--direct-io=on", loop.path], check=True, capture_output=True)
    return loop


@pytest.fixture
def ext4(loops: LoopFactory) -> Path:
    """ext4 on a loop device with direct I/O: what it reads and writes reaches the disk under its backing file."""
    loop = direct_io(loops.attach(128))
    loops.mkfs_ext4(loop)
    return loops.mount(loop)


def written(path: Path, size: int) -> Path:
    with path.open("wb") as handle:
        for _ in range(size >> 20):
            handle.write(os.urandom(1 << 20))
    return path


def test_buffered_reads_of_a_small_file_are_the_page_cache(ext4: Path, tmp_path: Path) -> None:
    """The file was just written, so its pages are cached; invalidate=0 keeps fio from dropping them.

    (With fio's default invalidate=1 the cache is dropped as each pass over the
    file begins, and one job's buffered reads do reach the device: no trap.)
    """
    target = written(ext4 / "small.dat", 32 << 20)
    out = sweep(
        tmp_path,
        "pagecache",
        str(target),
        "  ioengine: psync\n  rw: randread\n  invalidate: 0",
        "direct: [0, 1]\n",
    )
    buffered, direct = out.loc[1], out.loc[2]
    assert "page-cache" in codes(buffered), buffered["validity_detail"]
    assert "buffered I/O served from the page cache" in buffered["validity_detail"]
    assert "page-cache" not in codes(direct)
    assert codes(direct) <= LOAD_DEPENDENT, direct["validity_detail"]


def test_direct_reads_of_a_sparse_file_are_sparse_reads(ext4: Path, tmp_path: Path) -> None:
    sparse = ext4 / "sparse.dat"
    with sparse.open("wb") as handle:
        handle.truncate(64 << 20)
    out = sweep(tmp_path, "sparse", str(sparse), "  ioengine: psync\n  rw: randread\n  direct: 1")
    row = out.loc[1]
    assert "sparse-read" in codes(row), row["validity_detail"]
    assert "100.0 % of the 64.0 MiB region read (64.0 MiB) holds no data" in row["validity_detail"]
    assert "page-cache" not in codes(row)  # direct I/O: the device saw nothing, but not the page cache
    clean = sweep(
        tmp_path,
        "dense",
        str(written(ext4 / "dense.dat", 64 << 20)),
        "  ioengine: psync\n  rw: randread\n  direct: 1",
    ).loc[1]
    assert codes(clean) <= LOAD_DEPENDENT, clean["validity_detail"]


def test_hipri_on_a_loop_device_has_no_poll_queues(loops: LoopFactory, tmp_path: Path) -> None:
    loop = direct_io(loops.attach(64, content=os.urandom(4 << 20)))
    out = sweep(
        tmp_path,
        "hipri",
        loop.path,
        "  ioengine: pvsync2\n  rw: randread\n  direct: 1\n  size: 4M",
        "hipri: [1, 0]\n",
    )
    polled, plain = out.loc[1], out.loc[2]
    assert "hipri-no-poll" in codes(polled), polled["validity_detail"]
    assert f"{loop.name} has no polling (io_poll 0)" in polled["validity_detail"]
    assert codes(plain) <= LOAD_DEPENDENT, plain["validity_detail"]


BURNER = """
import ctypes, os
ctypes.CDLL(None).prctl(15, b"iobench-burner", 0, 0, 0)  # PR_SET_NAME: its thread name in /proc
os.sched_setaffinity(0, {1})
while True:
    pass
"""


def burner_share(frame: pd.DataFrame) -> float:
    """The burner's mean CPU share (% of one CPU) in the point's telemetry; 0 when it was not seen."""
    samples = iobench.telemetry(frame.attrs["run_dir"])
    named = samples["entity"].str.startswith("iobench-burner [pid ")  # another process: named with its pid
    mine = samples[named & (samples["metric"] == "cpu_pct")]
    return float(mine["value"].mean()) if len(mine) else 0.0


@pytest.fixture
def burner() -> Iterator[int]:
    """A process spinning on CPU 1 (the point's CPU below), killed by its pid at the end."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    child = subprocess.Popen(
        [sys.executable, "-c", BURNER],
        start_new_session=True,
    )
    try:
        yield child.pid
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


def test_a_cpu_burner_on_the_points_cpu_is_contention(ext4: Path, tmp_path: Path, burner: int) -> None:
    target = written(ext4 / "busy.dat", 16 << 20)
    fio = "  ioengine: psync\n  rw: randread\n  direct: 1\n  cpus_allowed: 1"
    busy = sweep(tmp_path, "contention", str(target), fio)
    row = busy.loc[1]
    assert burner_share(busy) >= 20.0
    assert "cpu-contention" in codes(row), row["validity_detail"]
    assert row["cpu_other_max_pct"] >= 20.0
    os.kill(burner, signal.SIGSTOP)  # the control: the same point, the burner stopped
    try:
        quiet = sweep(tmp_path, "quiet", str(target), fio)
    finally:
        os.kill(burner, signal.SIGCONT)
    assert burner_share(quiet) == 0.0
    assert codes(quiet.loc[1]) <= LOAD_DEPENDENT, quiet.loc[1]["validity_detail"]


def test_default_buffers_written_to_compressing_btrfs(loops: LoopFactory, tmp_path: Path) -> None:
    loop = loops.attach(256)
    loops.mkfs_btrfs(loop)
    mount = loops.mount(loop, "compress=zstd")
    fio = "  ioengine: psync\n  rw: randwrite\n  direct: 0\n  end_fsync: 1"
    out = sweep(
        tmp_path,
        "compress",
        str(mount / "w.dat"),
        fio,
        "refill_buffers: [0, 1]\n",
        extra="    size: 16M",
    )
    default, refilled = out.loc[1], out.loc[2]
    assert "compressible-writes" in codes(default), default["validity_detail"]
    assert "btrfs mounted with compress=zstd" in default["validity_detail"]
    assert "compressible-writes" not in codes(refilled)


def test_iobench_run_ends_with_the_points_with_findings(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from iobench.cli.commands import app

    sparse = tmp_path / "sparse.dat"
    with sparse.open("wb") as handle:
        handle.truncate(16 << 20)
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        f"version: 1\nname: cli\ntargets: [{{path: {sparse}}}]\n"
        "fio: {ioengine: psync, rw: randread, direct: 1, bs: 4k, runtime: 1, time_based: 1}\n"
    )
    done = CliRunner().invoke(app, ["run", str(matrix), "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("validity:"))
    assert lines[head].startswith("validity: 1 of 1 point with findings (") and "sparse-read 1" in lines[head]
    assert (
        lines[head + 1].startswith("  point 1: ") and "sparse-read" in lines[head + 1]
    )  # a busy box adds more
    verbose = CliRunner().invoke(app, ["run", str(matrix), "--out", str(tmp_path / "out"), "--verbose"])
    details = verbose.output.splitlines()
    assert any(line.startswith("      sparse-read: 100.0 % of the 16.0 MiB region read") for line in details)


def loop_with_data(loops: LoopFactory, size_mib: int = 32) -> Loop:
    """A loop device over a file written in full (no holes), just written: its pages are in the page cache."""
    return loops.attach(size_mib, content=os.urandom(size_mib << 20))


def test_a_sync_engine_asked_for_a_depth_runs_one_io_at_a_time(loops: LoopFactory, tmp_path: Path) -> None:
    loop = direct_io(loop_with_data(loops))
    fio = "  rw: randread\n  direct: 1\n  iodepth: 16"
    out = sweep(tmp_path, "depth", loop.path, fio, "ioengine: [psync, libaio]\n")
    sync, deep = out.loc[1], out.loc[2]
    assert "queue-depth" in codes(sync), sync["validity_detail"]
    assert "not the 16 asked (iodepth): psync is a synchronous engine" in sync["validity_detail"]
    assert "fio's own depth distribution: 100 % at 1)" in sync["validity_detail"]
    assert sync["inflight"] <= 1.0
    assert deep["inflight"] >= 8.0
    assert codes(deep) <= LOAD_DEPENDENT, deep["validity_detail"]  # no device-count: the exact counts agree


def test_buffered_writes_reach_the_device_few_and_large(loops: LoopFactory, tmp_path: Path) -> None:
    """fsync at the end: the device gets every byte, in a few large requests fio never timed."""
    loop = direct_io(loop_with_data(loops))
    fio = "  ioengine: psync\n  rw: write\n  size: 32M\n  end_fsync: 1"
    out = sweep(
        tmp_path, "writeback", loop.path, fio, "direct: [0, 1]\n", base="  bs: 4k\n", allow_write=(loop.path,)
    )
    buffered, direct = out.loc[1], out.loc[2]
    assert "device-count" in codes(buffered), buffered["validity_detail"]
    assert "fio wrote 8,192 I/Os (32.0 MiB)" in buffered["validity_detail"]
    assert "write-back from the page cache in large requests" in buffered["validity_detail"]
    assert "page-cache" not in codes(buffered)  # the bytes did reach the device
    assert codes(direct) <= LOAD_DEPENDENT, direct["validity_detail"]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[tuple[Path, LoopFactory]]:
    """A tmpfs mounted under tmp_path, and loop devices over files in it; all undone after the test."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    with contextlib.ExitStack() as stack:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(mount)], check=True)
        stack.callback(subprocess.run, ["umount", str(mount)], check=True)
        yield mount, LoopFactory(mount, stack)


def test_direct_io_on_memory_is_memory_backed(
    tmpfs: tuple[Path, LoopFactory], ext4: Path, tmp_path: Path
) -> None:
    mount, on_tmpfs = tmpfs
    fio = "  ioengine: psync\n  rw: randread\n  direct: 1"
    file = sweep(tmp_path, "tmpfs", str(written(mount / "m.dat", 16 << 20)), fio).loc[1]
    assert "memory-backed" in codes(file), file["validity_detail"]
    assert f"{mount}/m.dat is on tmpfs" in file["validity_detail"]
    loop = direct_io(on_tmpfs.attach(16, content=os.urandom(16 << 20)))
    device = sweep(tmp_path, "tmpfs-loop", loop.path, fio).loc[1]
    assert "memory-backed" in codes(device), device["validity_detail"]
    assert f"{loop.name}'s backing file {loop.backing} is on tmpfs" in device["validity_detail"]
    clean = sweep(tmp_path, "disk", str(written(ext4 / "d.dat", 16 << 20)), fio).loc[1]
    assert codes(clean) <= LOAD_DEPENDENT, clean["validity_detail"]


def test_a_loop_device_over_a_cached_file_is_judged_by_the_disk_below(
    loops: LoopFactory, tmp_path: Path
) -> None:
    """losetup's default: the loop device reads its backing file through the page cache, not the disk."""
    loop = loop_with_data(loops)
    fio = "  ioengine: psync\n  rw: randread\n  direct: 1"
    wide = "  bs: 64k\n  runtime: 2\n  time_based: 1\n"
    cached = sweep(tmp_path, "cached-loop", loop.path, fio, base=wide).loc[1]
    assert "data-elsewhere" in codes(cached), cached["validity_detail"]
    assert f"{loop.name} over {loop.backing} has no direct I/O (loop/dio 0" in cached["validity_detail"]
    assert "device-count" not in codes(cached)  # the loop device itself saw every read
    clean = sweep(tmp_path, "direct-loop", direct_io(loop).path, fio, base=wide).loc[1]
    assert codes(clean) <= LOAD_DEPENDENT, clean["validity_detail"]


def test_a_job_that_ends_inside_its_ramp(loops: LoopFactory, tmp_path: Path) -> None:
    """256 reads end long before a 10 s ramp does: fio ends the job there, with I/Os and no latency."""
    loop = direct_io(loop_with_data(loops, 4))
    fio = "  ioengine: psync\n  rw: randread\n  direct: 1\n  size: 1M"
    out = sweep(tmp_path, "ramp", loop.path, fio, "ramp_time: [10, 0]\n", base="  bs: 4k\n")
    ramped, plain = out.loc[1], out.loc[2]
    assert "ended-in-ramp" in codes(ramped), ramped["validity_detail"]
    assert "fio counted 256 I/Os but measured no latency" in ramped["validity_detail"]
    assert "(10 s)" in ramped["validity_detail"]
    assert "hold no sample" in ramped["steady_reason"]  # the logs are there, empty
    assert "ended-in-ramp" not in codes(plain)
    assert codes(plain) <= LOAD_DEPENDENT, plain["validity_detail"]


def test_what_fio_prints_routinely_is_no_warning(tmp_path: Path) -> None:
    """fio's own lines before its results, with a file to lay out: each one informational, and a warning is not."""
    output = tmp_path / "out.txt"
    argv = ["fio", "--name=lay", f"--filename={tmp_path / 'new.dat'}", "--size=1M", "--rw=randread"]
    argv += ["--output-format=json+,normal", f"--output={output}"]
    subprocess.run(argv, check=True, capture_output=True)
    head = output.read_text().split("{", 1)[0].splitlines()
    assert any("Laying out IO file" in line for line in head), head
    assert [line for line in head if not vd.informational(line)] == []
    assert vd.informational("<h1> lay: Laying out IO file (1 file / 8MiB)")
    assert not vd.informational("fio: io_u error on file /dev/nvme0n1: Operation not supported")
    assert not vd.informational(
        "note: both iodepth >= 1 and synchronous I/O engine are selected, queue depth will be capped at 1"
    )

"""Telemetry end to end: real fio on loop devices, a CPU burner, the report's bottleneck section."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from loopdev import LoopFactory

import iobench
from iobench.matrix.model import load_matrix
from iobench.report.page import write_report
from iobench.results.samples import FILE_NAME, read_point
from iobench.runner.sweep import run

BURNER = "iob-burner"
# The child names itself, then spins until it is killed.
BURN = f"open('/proc/self/comm', 'w').write('{BURNER}')\nwhile True:\n    pass\n"


@contextlib.contextmanager
def burner(cpu: int) -> Iterator[subprocess.Popen[bytes]]:
    """A process spinning on ``cpu`` for as long as the block runs; always killed and reaped."""
    proc = subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True)
    try:
        os.sched_setaffinity(proc.pid, {cpu})
        deadline = time.monotonic() + 10
        while Path(f"/proc/{proc.pid}/comm").read_text().strip() != BURNER:
            assert proc.poll() is None and time.monotonic() < deadline, "the burner did not start"
            time.sleep(0.01)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


RANDREAD = """
version: 1
name: telemetry
targets: [{{path: {device}}}]
fio: {{ioengine: libaio, direct: 1, rw: randread, bs: 4k, runtime: {runtime}, time_based: 1}}
telemetry: {{interval: 0.5}}
matrix:
  iodepth: [1, 8]
"""


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.fio
def test_direct_reads_on_a_loop_device_with_a_burner_on_cpu_1(
    loops: LoopFactory, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    if len(os.sched_getaffinity(0)) < 2 or 1 not in os.sched_getaffinity(0):
        pytest.fail("this test needs CPU 1 (the machine has 2 CPUs)")
    loop = loops.attach(64)
    matrix = load_matrix(write_matrix(RANDREAD.format(device=loop.path, runtime=4)))
    with burner(1) as proc:
        result = run(matrix, out=tmp_path / "out")
        assert proc.poll() is None, "the burner died during the run"
    assert result.counts == {"ok": 2}
    frame = result.frame
    assert frame is not None
    ok = frame[frame["status"] == "ok"]
    # The device's own count over fio's runtime: every direct random read is one request.
    ratio = ok["dev_iops"].astype(float) / ok["iops"].astype(float)
    assert ((ratio - 1).abs() < 0.10).all(), ok[["point", "iops", "dev_iops"]]
    assert ok["bottleneck"].notna().all() and ok["bottleneck_reason"].notna().all()
    assert set(ok["bottleneck"]) <= {
        "cpu:sys",
        "cpu:user",
        "device",
        "interrupts",
        "remote-irq",
        "link",
        "none-found",
    }
    assert ok["cpu_busy_max_pct"].astype(float).min() >= 70
    assert ok["telemetry_note"].str.contains(f"{loop.name} is a virtual device").all()

    samples = iobench.telemetry(result.run_dir)
    assert set(samples["point"]) == {1, 2} and set(samples["source"]) >= {"cpu", "thread", "disk", "mem"}
    busy = samples[(samples["source"] == "cpu") & (samples["metric"] == "busy_pct")]
    per_cpu = busy.groupby(["point", "entity"])["value"].mean()
    assert (per_cpu.xs("1", level="entity") >= 70).all(), per_cpu
    threads = samples[(samples["source"] == "thread") & (samples["metric"] == "cpu_pct")]
    for point, rows in threads.groupby("point"):
        top = rows.groupby("entity")["value"].sum().sort_values(ascending=False).index[:5]
        assert f"{BURNER} [pid {proc.pid}]" in top, (point, list(top))  # another process: named with its pid
    disk = samples[(samples["source"] == "disk") & (samples["entity"] == loop.name)]
    assert set(disk["metric"]) >= {"read_iops", "read_await_ms", "util_pct", "queue_depth"}
    assert disk[disk["metric"] == "write_iops"]["value"].max() == 0  # fio ran --readonly

    # The window is fio's: t_s never runs past the longest job's runtime (it ends there unless the
    # sampler's first sample came late), and the sampler recorded what it cost.
    table, context = read_point(result.run_dir / "points" / "0001-r1" / FILE_NAME)
    assert context["window"] == "fio" and context["point_cpus"] == sorted(os.sched_getaffinity(0))
    assert 0 < max(table.column("t_s").to_pylist()) <= ok["runtime_ms"].max() / 1000 + 1e-6
    assert 0 < context["sampler_cpu_s"] < 1.0 and context["samples"] >= 8

    report = write_report(result.run_dir, tmp_path / "report")
    html = report.html.read_text()
    section = html.split("<h2>Bottlenecks</h2>")[1].split("<h2>")[0]
    for verdict in set(ok["bottleneck"]):
        assert f'<td class="verdict">{verdict}</td>' in section
    assert {p.name for p in report.figures} >= {"cpu-where.png", "device-vs-fio.png", "busiest-threads.png"}


@pytest.mark.root
@pytest.mark.loopdev
@pytest.mark.fio
def test_buffered_reads_of_a_cached_file_are_told_apart_from_device_io(
    loops: LoopFactory, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    loop = loops.attach(64)
    loops.mkfs_ext4(loop)
    mount = loops.mount(loop)
    target = mount / "data.bin"
    target.write_bytes(os.urandom(8 << 20))  # in the page cache from here on
    matrix = write_matrix(
        f"""
        version: 1
        name: cached
        targets: [{{path: {target}, allow_write: true}}]
        fio: {{ioengine: psync, direct: 0, invalidate: 0, rw: randread, bs: 4k, runtime: 2, time_based: 1, size: 8M}}
        telemetry: {{interval: 0.25}}
        """
    )
    result = run(load_matrix(matrix), out=tmp_path / "out")
    frame = result.frame
    assert frame is not None and result.counts == {"ok": 1}
    row = frame[frame["direction"] == "read"].iloc[0]
    assert row["dev_fio_ratio"] < 0.1, row[["iops", "dev_iops"]]
    assert "page cache" in row["telemetry_note"]
    samples = iobench.telemetry(result.run_dir)
    devices = set(samples[samples["source"] == "disk"]["entity"])
    assert loop.name in devices  # the file system's device


@pytest.mark.fio
def test_telemetry_false_records_nothing_and_says_so(
    null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    matrix = load_matrix(null_matrix("telemetry: false\n"))
    result = run(matrix, out=tmp_path / "out")
    assert not list(result.run_dir.glob(f"points/*/{FILE_NAME}"))
    frame = result.frame
    assert frame is not None and frame["bottleneck"].isna().all() and frame["dev_iops"].isna().all()
    assert frame["bottleneck_reason"].str.startswith("no telemetry recorded").all()
    assert iobench.telemetry(result.run_dir).empty
    # A reloaded frame has the same columns.
    assert list(iobench.load(result.run_dir).columns) == list(frame.columns)


@pytest.mark.fio
def test_null_engine_points_get_a_verdict(null_matrix: Callable[..., Path], tmp_path: Path) -> None:
    matrix = load_matrix(null_matrix("telemetry: {interval: 0.2}\n"))
    result = run(matrix, out=tmp_path / "out")
    frame = result.frame
    assert frame is not None
    ok = frame[frame["status"] == "ok"]
    assert ok["bottleneck"].notna().all() and ok["top_thread"].notna().all()
    assert pd.api.types.is_float_dtype(ok["cpu_busy_pct"]) and ok["cpu_busy_pct"].notna().all()

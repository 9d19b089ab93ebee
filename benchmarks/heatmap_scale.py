"""How long the latency heatmap takes, and how large it is, for a day of 1-s histogram logs of many hosts.

Writes ``--hosts`` histogram logs as fio 3.33 writes them (``time, ddir, bs``
and one count per bin, ``log_hist_coarseness=--coarseness``), one line a
``--window-ms`` for ``--hours``: a lognormal latency whose median drifts over
the day, with a slow host and a burst of outliers, so every column and the
tail bins hold I/Os. Then times, with the files in the page cache, what
``iobench plot RUN lat-heatmap`` does with them — the logs added into at most
1,500 time columns per host (:func:`iobench.results.histlogs.point_map`) and
the figure drawn and written as PNG — and prints the time, the peak RSS, the
file's size and a line against the goal (≤ 10 s, ≤ 5 MB).

    .venv/bin/python benchmarks/heatmap_scale.py [--hours 24] [--hosts 32] [--coarseness 4]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from analysis_scale import machine_busy_s

from iobench.plots.figures import save_figure
from iobench.plots.latheatmap import draw_map
from iobench.results.histlogs import HistLog, point_map

#: fio 3.33's bins: 29 groups of 64.
FIO_BINS = 29 * 64
GOAL_S = 10.0
GOAL_MB = 5.0
#: Distinct histogram lines per host; the day's lines cycle through them.
POOL = 512


def fio_indices(values: np.ndarray) -> np.ndarray:
    """fio's ``plat_val_to_idx()`` for each latency (ns)."""
    values = np.maximum(values.astype(np.int64), 1)
    msb = np.floor(np.log2(values)).astype(np.int64)
    error_bits = np.maximum(msb - 6, 0)
    above = ((error_bits + 1) << 6) + ((values >> error_bits) & 63)
    return np.where(msb <= 6, values, above)


def write_logs(where: Path, hosts: int, lines: int, window_ms: int, coarseness: int) -> list[HistLog]:
    rng = np.random.default_rng(1)
    bins = FIO_BINS >> coarseness
    logs = []
    for host in range(hosts):
        slow = 1.6 if host == hosts - 1 else 1.0
        pool = []
        for k in range(POOL):
            median = 80_000 * slow * (1.0 + 0.5 * np.sin(2 * np.pi * k / POOL))
            sample = rng.lognormal(np.log(median), 0.5, 400)
            if k % 64 == 0:
                sample = np.concatenate([sample, rng.uniform(1e6, 2e7, 20)])  # a burst of outliers
            counts = np.bincount(fio_indices(sample) >> coarseness, minlength=bins)[:bins]
            pool.append(", ".join(map(str, counts.tolist())))
        start = 1_700_000_000_000 + host * 7
        text = "".join(
            f"{start + window_ms * (i + 1)}, 0, 4096, {pool[(i * POOL) // lines]}\n" for i in range(lines)
        )
        path = where / f"bench_clat_hist.1.log.host-{host}"
        path.write_text(text)
        logs.append(HistLog(path, f"h{host:02d}", "bench"))
    return logs


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--window-ms", type=int, default=1000)
    parser.add_argument(
        "--coarseness", type=int, default=4, help="fio's log_hist_coarseness (0: all 1,856 bins)"
    )
    parser.add_argument("--keep", type=Path, help="write the logs and the figure here and keep them")
    args = parser.parse_args()
    lines = int(args.hours * 3600_000 / args.window_ms)
    work = args.keep or Path(tempfile.mkdtemp(prefix="iobench-heatmap-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        made = time.perf_counter()
        logs = write_logs(work, args.hosts, lines, args.window_ms, args.coarseness)
        size = sum(log.path.stat().st_size for log in logs)
        print(
            f"logs: {args.hosts} hosts × {lines:,} lines ({args.hours:g} h at {args.window_ms} ms), "
            f"{FIO_BINS >> args.coarseness} bins a line: {size / 1e6:,.0f} MB, written in "
            f"{time.perf_counter() - made:.1f} s"
        )
        for log in logs:  # into the page cache, as after a run
            log.path.read_bytes()
        busy, ours = machine_busy_s(), time.process_time()
        start = time.perf_counter()
        latency = point_map(1, 1, logs, window_ms=args.window_ms, coarseness=args.coarseness)
        read_s, read_cpu = time.perf_counter() - start, time.process_time() - ours
        figure = save_figure(draw_map(latency), work / "lat-heatmap.png")
        wall, cpu = time.perf_counter() - start, time.process_time() - ours
        others = max(machine_busy_s() - busy - cpu, 0.0) / wall
        megabytes = figure.stat().st_size / 1e6
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"read {read_s:.2f} s ({size / 1e6 / read_s:,.0f} MB/s, {args.hosts * lines / read_s:,.0f} lines/s) "
            f"into {latency.counts[logs[0].host].shape[0]} columns; drawn and written in {wall - read_s:.2f} s"
        )
        print(
            f"CPU time: read {read_cpu:.2f} s, drawn and written {cpu - read_cpu:.2f} s, together {cpu:.2f} s"
        )
        print(f"peak RSS {rss:,.0f} MB; other processes kept {others:.2f} of {os.cpu_count()} CPUs busy")
        print(
            f"goal: <= {GOAL_S:g} s and <= {GOAL_MB:g} MB: {wall:.2f} s wall ({wall / GOAL_S:.2f} of the goal; "
            f"CPU {cpu:.2f} s, {cpu / GOAL_S:.2f}), "
            f"{megabytes:.2f} MB ({megabytes / GOAL_MB:.2f} of the goal)"
            + (": met" if wall <= GOAL_S and megabytes <= GOAL_MB else ": NOT met")
        )
        return 0 if wall <= GOAL_S and megabytes <= GOAL_MB else 1
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

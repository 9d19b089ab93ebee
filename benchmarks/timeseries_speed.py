"""How fast iobench reads fio's logs (``iobench.timeseries``) next to reading fio's JSON of the same points.

Runs the installed fio once for one realistic point (null engine, ``rw=randrw``,
4 jobs, 3 s, ``log_avg_msec=50``: 60 windows × 2 directions per log, the line
count a 60 s point with 1 s windows has), writes it as iobench does (one job
section, ``write_bw_log``/``write_iops_log``/``write_lat_log``,
``--output-format=json+``), copies that point ``--points`` times into a run
directory, then times, each the median of ``--repeat`` rounds with the files
in the page cache:

- ``iobench.timeseries(run)``: every log of every point into the long frame;
- ``read_run_logs``: the same without the parameter columns;
- ``verdicts(run)``: the logs read and every point × repeat judged steady or not;
- the JSON: ``parse_fio_text`` of each point's ``fio.json``, one by one, as
  ``iobench.load`` rebuilds a frame, and ``iobench.parse_fio`` of all of them.

    .venv/bin/python benchmarks/timeseries_speed.py [--points 200] [--repeat 5] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

JOB = """[global]
ioengine=null
size=64m
rw=randrw
bs=4k
time_based=1
runtime=3
numjobs=4
rate_iops=2000
log_avg_msec=50

[bench]
filename={target}
write_bw_log=bench
write_iops_log=bench
write_lat_log=bench
"""


def _point(where: Path) -> None:
    where.mkdir(parents=True)
    (where / "job.fio").write_text(JOB.format(target=where.parent / "target.dat"))
    subprocess.run(
        ["fio", "--output-format=json+", "--output=fio.json", "job.fio"], cwd=where, check=True, timeout=120
    )


def _run_dir(base: Path, template: Path, points: int) -> Path:
    run = base / "run"
    (run / "points").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"schema_version": 1, "name": "bench", "machine": {}}))
    for point in range(1, points + 1):
        where = run / "points" / f"{point:04d}-r1"
        shutil.copytree(template, where)
        meta = {
            "schema_version": 1,
            "key": where.name,
            "point": point,
            "repeat": 1,
            "status": "ok",
            "params": {"iodepth": point},
            "values": {"iodepth": point},
            "processes": [
                {
                    "argv": ["fio", "--output-format=json+", "--output=fio.json", "job.fio"],
                    "jobfile_name": "job.fio",
                    "output": "fio.json",
                    "sections": ["bench"],
                    "targets": ["/x"],
                }
            ],
        }
        (where / "meta.json").write_text(json.dumps(meta))
    return run


def _median_s(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    result = fn()  # warm-up: page cache, imports
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--markdown", action="store_true", help="print the table only")
    args = parser.parse_args()

    from iobench.results.fioout import parse_fio, parse_fio_text
    from iobench.results.steady import verdicts
    from iobench.results.timeseries import read_run_logs, timeseries
    from iobench.store.rundir import RunDir

    with tempfile.TemporaryDirectory(prefix="iobench-ts-bench-") as tmp:
        base = Path(tmp)
        _point(base / "template")
        run = _run_dir(base, base / "template", args.points)
        logs = sorted((base / "template").glob("*.log"))
        lines = sum(len(p.read_text().splitlines()) for p in logs)
        json_files = sorted(run.glob("points/*/fio.json"))
        log_bytes = sum(p.stat().st_size for p in logs) * args.points
        json_bytes = sum(p.stat().st_size for p in json_files)
        rundir = RunDir.open(run)
        rows = []
        for name, fn in (
            ("iobench.timeseries(run)", lambda: timeseries(run)),
            ("read_run_logs (no parameters)", lambda: read_run_logs(rundir)),
            ("verdicts(run): logs + steady", lambda: verdicts(run)),
            ("JSON: parse_fio_text per point", lambda: [parse_fio_text(p.read_text()) for p in json_files]),
            ("JSON: parse_fio(all files)", lambda: parse_fio(json_files)),
        ):
            seconds, result = _median_s(fn, args.repeat)
            rows.append((name, seconds, result))
        if not args.markdown:
            print(
                f"{args.points} points; per point {len(logs)} log files, {lines} lines "
                f"({log_bytes / args.points / 1024:.1f} KiB), fio.json {json_bytes / args.points / 1024:.1f} KiB",
                file=sys.stderr,
            )
        print("| reader | ms per point | points/s | frame rows |")
        print("|---|---|---|---|")
        for name, seconds, result in rows:
            count = len(result) if hasattr(result, "__len__") and not isinstance(result, list) else ""
            if isinstance(result, list):
                count = sum(len(r) for r in result)
            elif hasattr(result, "series"):
                count = len(result.series)
            print(
                f"| {name} | {seconds * 1000 / args.points:.2f} | {args.points / seconds:,.0f} | {count:,} |"
            )


if __name__ == "__main__":
    main()

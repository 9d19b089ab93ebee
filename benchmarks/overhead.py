"""iobench's overhead over plain fio on the same null-engine job files.

Runs a 16-point matrix (null engine, runtime 1 s) through ``iobench run`` (the
real CLI, as a user starts it) and then runs the job files iobench wrote through
plain fio, one after another, with the same arguments. Reports both wall times,
their ratio, and the overhead per point.

    .venv/bin/python benchmarks/overhead.py [--points 16] [--rounds 3] [--markdown]
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
from pathlib import Path

MATRIX = """\
version: 1
name: overhead
targets:
  - path: {target}
    size: 16M
fio:
  ioengine: "null"
  rw: randread
  runtime: 1
  time_based: 1
matrix:
  bs: [4k, 64k]
  iodepth: {iodepths}
  numjobs: [1, 2]
"""


def iobench_run(matrix: Path, out: Path) -> tuple[float, Path]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "iobench", "run", str(matrix), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"iobench run failed ({done.returncode}):\n{done.stderr}")
    return wall, Path(done.stdout.strip())


def plain_fio(run_dir: Path, scratch: Path) -> float:
    fio = shutil.which("fio") or "fio"
    total = 0.0
    for point in sorted((run_dir / "points").iterdir()):
        work = scratch / point.name
        work.mkdir()
        shutil.copy(point / "job.fio", work / "job.fio")
        started = time.perf_counter()
        subprocess.run(
            [fio, "--output-format=json", "--output=fio.json", "job.fio"],
            cwd=work,
            capture_output=True,
            check=True,
        )
        total += time.perf_counter() - started
    return total


def in_loop_overhead(run_dir: Path) -> float:
    """Mean per-point time iobench spends around fio inside the sweep loop (s)."""
    gaps = []
    for meta_path in sorted((run_dir / "points").glob("*/meta.json")):
        meta = json.loads(meta_path.read_text())
        fio_s = sum(p["duration_s"] for p in meta["processes"])
        gaps.append(meta["duration_s"] - fio_s)
    return statistics.mean(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=16, choices=(4, 8, 16, 32))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--markdown", action="store_true", help="print a table for docs/benchmarks.md")
    args = parser.parse_args()
    depths = {4: [1], 8: [1, 8], 16: [1, 4, 16, 32], 32: [1, 2, 4, 8, 16, 32, 64, 128]}[args.points]
    rows = []
    with tempfile.TemporaryDirectory(prefix="iobench-overhead-") as tmp:
        base = Path(tmp)
        matrix = base / "overhead.yaml"
        matrix.write_text(MATRIX.format(target=base / "null.dat", iodepths=depths))
        for n in range(args.rounds):
            iobench_s, run_dir = iobench_run(matrix, base / f"results-{n}")
            scratch = base / f"plain-{n}"
            scratch.mkdir()
            fio_s = plain_fio(run_dir, scratch)
            rows.append((iobench_s, fio_s, in_loop_overhead(run_dir)))
    iobench_s = statistics.median(r[0] for r in rows)
    fio_s = statistics.median(r[1] for r in rows)
    loop_ms = statistics.median(r[2] for r in rows) * 1000
    per_point_ms = (iobench_s - fio_s) / args.points * 1000
    ratio = iobench_s / fio_s
    if args.markdown:
        print(
            "| points | plain fio (s) | iobench run (s) | ratio | overhead/point, all costs (ms) | in-loop/point (ms) |"
        )
        print("|---|---|---|---|---|---|")
        print(
            f"| {args.points} | {fio_s:.2f} | {iobench_s:.2f} | {ratio:.3f} | {per_point_ms:.0f} | {loop_ms:.1f} |"
        )
    else:
        print(f"points: {args.points}, rounds: {args.rounds} (medians)")
        print(f"plain fio:    {fio_s:8.2f} s")
        print(f"iobench run:  {iobench_s:8.2f} s   (process start to exit: validation, plan, frame, figures)")
        print(f"ratio:        {ratio:8.3f}   (target < 1.10)")
        print(f"overhead:     {per_point_ms:8.1f} ms/point, fixed costs spread over the points")
        print(f"in the loop:  {loop_ms:8.1f} ms/point around fio (target < 30 ms)")


if __name__ == "__main__":
    main()

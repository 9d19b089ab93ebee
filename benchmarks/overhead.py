"""iobench's overhead over plain fio on the same null-engine job files, and what telemetry adds.

Runs a 16-point matrix (null engine, runtime 1 s) through ``iobench run`` (the
real CLI, as a user starts it) and then runs the job files iobench wrote through
plain fio, one after another, with the same arguments. Reports both wall times,
their ratio, and the overhead per point, for the best round and the median one,
twice: as a user starts it (``iobench run``: results and the frame) and with
``--figures`` (the default figures drawn at the end too).

``--telemetry`` compares instead ``iobench run`` with telemetry on (the
default, every 1 s) and off (``telemetry: false``), the two alternating round
by round so that a busy machine weighs on both alike; it reports both wall
times, their difference and the sampler's own CPU time.

    .venv/bin/python benchmarks/overhead.py [--points 16] [--rounds 3] [--markdown] [--telemetry]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def machine_busy_s() -> float:
    """CPU time every process on the machine has used since boot (s), from /proc/stat."""
    with open("/proc/stat") as stat:
        # user nice system idle iowait irq softirq steal, in clock ticks
        ticks = [int(x) for x in stat.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """CPU time of the processes this one started and reaped (iobench, fio and fio's workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class OthersBusy:
    """How many CPUs went to other processes (or to the hypervisor: steal), on average, between two calls."""

    def __init__(self) -> None:
        self.busy, self.started = machine_busy_s(), time.perf_counter()
        self.ours = children_cpu_s() + time.process_time()

    def cpus(self) -> float:
        others = (machine_busy_s() - self.busy) - (children_cpu_s() + time.process_time() - self.ours)
        return max(others, 0.0) / (time.perf_counter() - self.started)


def sampler_cpu(run_dir: Path) -> float:
    """CPU seconds the telemetry sampler spent over the whole run (from each point's telemetry context)."""
    import pyarrow.parquet as pq

    total = 0.0
    for path in (run_dir / "points").glob("*/telemetry.parquet"):
        context = json.loads((pq.read_schema(path).metadata or {}).get(b"iobench_telemetry", b"{}"))
        total += float(context.get("sampler_cpu_s") or 0.0)
    return total


def telemetry_main(args: argparse.Namespace, depths: list[int]) -> None:
    """Telemetry on vs off, alternating; medians."""
    on: list[float] = []
    off: list[float] = []
    cpu: list[float] = []
    loop: dict[str, list[float]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="iobench-overhead-") as tmp:
        base = Path(tmp)
        text = MATRIX.format(target=base / "null.dat", iodepths=depths)
        (base / "on.yaml").write_text(text)
        (base / "off.yaml").write_text(text + "telemetry: false\n")
        for n in range(args.rounds):
            order = ("on", "off") if n % 2 == 0 else ("off", "on")
            for mode in order:
                wall, run_dir = iobench_run(base / f"{mode}.yaml", base / f"results-{mode}-{n}")
                (on if mode == "on" else off).append(wall)
                loop[mode].append(in_loop_overhead(run_dir) * 1000)
                if mode == "on":
                    cpu.append(sampler_cpu(run_dir))
                shutil.rmtree(run_dir)
    on_s, off_s = statistics.median(on), statistics.median(off)
    diff = (on_s - off_s) / off_s * 100
    cpu_ms = statistics.median(cpu) / args.points * 1000
    loop_on, loop_off = statistics.median(loop["on"]), statistics.median(loop["off"])
    if args.markdown:
        print(
            "| points | rounds | telemetry off (s) | telemetry on (s) | difference "
            "| in-loop/point off → on (ms) | sampler CPU/point (ms) |"
        )
        print("|---|---|---|---|---|---|---|")
        print(
            f"| {args.points} | {args.rounds} | {off_s:.2f} | {on_s:.2f} | {diff:+.1f} % "
            f"| {loop_off:.1f} → {loop_on:.1f} | {cpu_ms:.1f} |"
        )
    else:
        print(f"points: {args.points}, rounds: {args.rounds} (medians; on/off alternating)")
        print(f"telemetry off: {off_s:8.2f} s   {sorted(round(v, 2) for v in off)}")
        print(f"telemetry on:  {on_s:8.2f} s   {sorted(round(v, 2) for v in on)}")
        print(f"difference:    {diff:+8.1f} %   (target ≤ 2 %)")
        print(f"in the loop:   {loop_off:8.1f} → {loop_on:.1f} ms/point around fio (off → on)")
        print(f"sampler CPU:   {cpu_ms:8.1f} ms/point")


def iobench_run(matrix: Path, out: Path, *extra: str) -> tuple[float, Path]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "iobench", "run", str(matrix), "--out", str(out), "--quiet", *extra],
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
    parser.add_argument("--telemetry", action="store_true", help="compare telemetry on and off instead")
    args = parser.parse_args()
    depths = {4: [1], 8: [1, 8], 16: [1, 4, 16, 32], 32: [1, 2, 4, 8, 16, 32, 64, 128]}[args.points]
    if args.telemetry:
        telemetry_main(args, depths)
        return
    variants = {
        "as a user starts it (the default)": (),
        "--figures (the default figures drawn at the end)": ("--figures",),
    }
    rows: dict[str, list[tuple[float, float, float]]] = {label: [] for label in variants}
    with tempfile.TemporaryDirectory(prefix="iobench-overhead-") as tmp:
        base = Path(tmp)
        matrix = base / "overhead.yaml"
        matrix.write_text(MATRIX.format(target=base / "null.dat", iodepths=depths))
        others: list[float] = []
        for n in range(args.rounds):
            watch = OthersBusy()
            plain_s: float | None = None
            for v, (label, extra) in enumerate(variants.items()):
                iobench_s, run_dir = iobench_run(matrix, base / f"results-{n}-{v}", *extra)
                if plain_s is None:
                    scratch = base / f"plain-{n}"
                    scratch.mkdir()
                    plain_s = plain_fio(run_dir, scratch)
                rows[label].append((iobench_s, plain_s, in_loop_overhead(run_dir)))
                shutil.rmtree(run_dir)
            others.append(watch.cpus())
    # The measured processes use the CPUs fully (the null engine spins): what others used comes on top.
    print(
        f"other processes and steal took {min(others):.2f}-{max(others):.2f} of {os.cpu_count()} CPUs "
        "(per round; above ~0.05 the figures are not of an idle machine)",
        file=sys.stderr,
    )
    if args.markdown:
        print(
            "| iobench run | points | of rounds | plain fio (s) | iobench run (s) | ratio "
            "| overhead/point, all costs (ms) | in-loop/point (ms) |"
        )
        print("|---|---|---|---|---|---|---|---|")
    for label, found in rows.items():
        report(label, found, args)


def report(label: str, rows: list[tuple[float, float, float]], args: argparse.Namespace) -> None:
    """The best and the median round of one way of running: ratio and overhead per point."""
    if not args.markdown:
        print(f"iobench run, {label}: {args.points} points, telemetry on (the default)")
    for pick_label, pick in (("best", min), ("median", statistics.median)):
        iobench_s = pick(r[0] for r in rows)
        fio_s = pick(r[1] for r in rows)
        loop_ms = pick(r[2] for r in rows) * 1000
        per_point_ms = (iobench_s - fio_s) / args.points * 1000
        ratio = iobench_s / fio_s
        if args.markdown:
            print(
                f"| {label} | {args.points} | {pick_label} of {args.rounds} | {fio_s:.2f} | {iobench_s:.2f} "
                f"| {ratio:.3f} | {per_point_ms:.0f} | {loop_ms:.1f} |"
            )
            continue
        print(f"  {pick_label} of {args.rounds} rounds:")
        print(f"    plain fio:    {fio_s:8.2f} s")
        print(
            f"    iobench run:  {iobench_s:8.2f} s   (process start to exit: validation, plan, frame, figures)"
        )
        print(f"    ratio:        {ratio:8.3f}   (goal <= 1.05)")
        print(
            f"    overhead:     {per_point_ms:8.1f} ms/point, every cost spread over the points (goal <= 50)"
        )
        print(f"    in the loop:  {loop_ms:8.1f} ms/point around fio")


if __name__ == "__main__":
    main()

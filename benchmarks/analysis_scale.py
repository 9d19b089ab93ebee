"""How analysis scales with a run's size: load, report and compare on 500, 5,000 and 50,000 point-runs.

A sweep of the seeds' kind (rw × block size × iodepth × jobs × ..., repeated)
is thousands of point-runs. This script makes such run directories from real
fio outputs and measures what a user waits for:

1. A template run: ``iobench run`` of a small null-engine matrix with the
   installed fio (real ``fio.json`` in json+, fio's logs, ``telemetry.parquet``,
   ``meta.json``), a few seconds.
2. For each size N, a synthetic run directory of N point-runs: the axes
   ``rw`` × ``bs`` × ``iodepth`` × ``numjobs`` × ``thinktime`` (as many
   ``thinktime`` values as the size needs), 3 repeats. Each point directory has
   its own ``meta.json`` (key, point, repeat, parameters) and the other files of
   one template point, hard-linked (round-robin over the template's points):
   the bytes read are those of real points; the disk holds one copy.
   The second run of a comparison takes the template points in another order,
   so its numbers differ point by point.
3. Each measurement in its own process, wall time and peak RSS (``wait4``'s
   ``ru_maxrss``), killed past ``--timeout`` or ``--max-rss``:

   - ``load``: ``iobench.load(run, rebuild=True)`` (the frame rebuilt from
     every point; the time of the call, and the process's peak RSS);
   - ``report``: ``iobench report RUN -o DIR`` as a user runs it, the frame
     cached; its page's size and the largest figure's side in pixels;
   - ``compare``: ``iobench compare A B -o DIR`` of two runs of that size,
     frames cached; its page's size.

On stderr, per measurement: how many CPUs other processes kept busy
(``/proc/stat`` minus this script's children): the machine may be shared.

    .venv/bin/python benchmarks/analysis_scale.py [--sizes 500 5000 50000] [--markdown]

``--keep`` leaves the generated directories in ``--work`` (default a folder in
``/var/tmp``; 50,000 point-runs take about 2 GB and 850,000 inodes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

REPEAT = 3
TEMPLATE = """\
version: 1
name: scale-template
targets:
  - path: {target}
    size: 8M
fio:
  ioengine: null
  runtime: 1
  time_based: 1
matrix:
  rw: [randread, randrw]
  bs: [4k, 64k]
  numjobs: [1, 2]
"""
AXES: dict[str, list[object]] = {
    "rw": ["randread", "randwrite", "read", "randrw"],
    "bs": [4096, 8192, 16384, 32768, 65536, 131072, 262144, 1048576],
    "iodepth": [1, 2, 4, 8, 16, 32, 64, 128],
    "numjobs": [1, 2, 4, 8],
}


def machine_busy_s() -> float:
    """CPU time every process on the machine has used since boot (s), from /proc/stat."""
    with open("/proc/stat") as stat:
        ticks = [int(x) for x in stat.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def iobench(*args: str) -> list[str]:
    """The argv of the iobench CLI of this interpreter (the checkout on ``PYTHONPATH`` when set)."""
    return [sys.executable, "-m", "iobench", *args]


def make_template(work: Path) -> Path:
    """A real run of the template matrix (null engine): its point directories are the material."""
    done = work / "template"
    runs = sorted(done.glob("scale-template-*")) if done.is_dir() else []
    if runs and (runs[-1] / "results.parquet").is_file():
        return runs[-1]
    shutil.rmtree(done, ignore_errors=True)
    done.mkdir(parents=True)
    matrix = done / "matrix.yaml"
    matrix.write_text(TEMPLATE.format(target=done / "target.dat"))
    # Its own state directory: the per-disk lock of another run on this machine's disk does not stop it.
    env = dict(os.environ, XDG_STATE_HOME=str(done / "state"))
    argv = iobench("run", str(matrix), "--out", str(done), "--quiet")
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    return sorted(done.glob("scale-template-*"))[-1]


def combos(count: int) -> list[dict[str, object]]:
    """``count`` points of the axes, ``thinktime`` growing as the size needs (a mixed-radix count)."""
    base = list(itertools.product(*AXES.values()))
    out = []
    for index in range(count):
        values = dict(zip(AXES, base[index % len(base)], strict=True))
        values["thinktime"] = index // len(base)
        out.append(values)
    return out


def make_run(template: Path, path: Path, points: int, *, shift: int = 0) -> Path:
    """A run directory of ``points`` × :data:`REPEAT` point-runs made of the template's point files."""
    if (path / "manifest.json").is_file():
        return path
    shutil.rmtree(path, ignore_errors=True)
    (path / "points").mkdir(parents=True)
    sources = sorted(p for p in (template / "points").iterdir() if not p.name.startswith("."))
    metas = [json.loads((p / "meta.json").read_text()) for p in sources]
    files = [[f for f in sorted(p.iterdir()) if f.name != "meta.json"] for p in sources]
    params = combos(points)
    number = 0
    for point, values in enumerate(params, 1):
        for repeat in range(1, REPEAT + 1):
            which = (number + shift) % len(sources)
            number += 1
            key = f"{point:04d}-r{repeat}"
            folder = path / "points" / key
            folder.mkdir()
            for file in files[which]:
                os.link(file, folder / file.name)
            meta = dict(metas[which], key=key, point=point, repeat=repeat, params=values)
            (folder / "meta.json").write_text(json.dumps(meta))
    manifest = json.loads((template / "manifest.json").read_text())
    manifest.update(
        name=path.name,
        points=points,
        repeat=REPEAT,
        counts={"ok": points * REPEAT},
        status="finished",
        matrix_fingerprint=None,
    )
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2))
    axes = "\n".join(f"  {name}: {values}" for name, values in AXES.items())
    thinktime = list(range(params[-1]["thinktime"] + 1))  # type: ignore[operator]
    (path / "matrix.yaml").write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: {path.name}
            targets:
              - path: /var/tmp/scale.dat
                size: 8M
            fio:
              ioengine: null
              runtime: 1
              time_based: 1
            matrix:
            """
        )
        + axes
        + f"\n  thinktime: {thinktime}\nrepeat: {REPEAT}\n"
    )
    return path


@dataclass
class Measured:
    """One measurement: wall seconds (or the call's own, for load), peak RSS, and what it wrote."""

    what: str
    size: int
    seconds: float | None = None
    rss_mb: float | None = None
    page_mb: float | None = None
    figure_px: int | None = None
    others: float = 0.0
    failed: str | None = None
    extra: dict[str, object] = field(default_factory=dict)


def watch(argv: list[str], *, timeout: float, max_rss_mb: float) -> tuple[float, float, str | None, str]:
    """Run ``argv``; its wall time, peak RSS (MB), why it was stopped (None: it ended) and its stdout."""
    started = time.perf_counter()
    out = tempfile.TemporaryFile()
    child = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, start_new_session=True)
    stopped = None
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        elapsed = time.perf_counter() - started
        rss = _rss_mb(child.pid)
        if elapsed > timeout or rss > max_rss_mb:
            stopped = f"stopped after {elapsed:.0f} s" if elapsed > timeout else f"stopped at {rss:.0f} MB"
            os.killpg(child.pid, signal.SIGKILL)
            pid, status, usage = os.wait4(child.pid, 0)
            break
        time.sleep(0.05)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    err = child.stderr.read().decode(errors="replace") if child.stderr else ""
    if stopped is None and child.returncode != 0:
        stopped = f"exit {child.returncode}: {err.strip().splitlines()[-1] if err.strip() else ''}"
    out.seek(0)
    return wall, usage.ru_maxrss / 1024, stopped, out.read().decode(errors="replace")


def _rss_mb(pid: int) -> float:
    total = 0.0
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    total = int(line.split()[1]) / 1024
    except OSError:
        pass
    return total


LOAD = """
import sys, time
import iobench
started = time.perf_counter()
frame = iobench.load(sys.argv[1], rebuild=True)
print(time.perf_counter() - started, len(frame))
"""


def png_side(path: Path) -> int:
    """The longer side of a PNG, from its header."""
    with path.open("rb") as handle:
        head = handle.read(24)
    width, height = struct.unpack(">II", head[16:24])
    return max(width, height)


def measure(what: str, size: int, argv: list[str], args: argparse.Namespace) -> tuple[Measured, str]:
    busy = machine_busy_s()
    before = os.times()
    wall, rss, stopped, out = watch(argv, timeout=args.timeout, max_rss_mb=args.max_rss)
    after = os.times()
    ours = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    others = max(machine_busy_s() - busy - ours, 0.0) / wall
    result = Measured(what, size, None if stopped else wall, rss, others=others, failed=stopped)
    print(
        f"{what} {size}: {f'{wall:.1f} s' if not stopped else stopped}, {rss:,.0f} MB; "
        f"other processes kept {others:.2f} of {os.cpu_count()} CPUs busy",
        file=sys.stderr,
    )
    return result, out


def run_size(template: Path, work: Path, size: int, args: argparse.Namespace) -> list[Measured]:
    points = size // REPEAT
    a = make_run(template, work / f"run-{size}-a", points)
    results = []
    load, out = measure("load", size, [sys.executable, "-c", LOAD, str(a)], args)
    if load.failed is None:
        load.seconds = float(out.split()[0])
    results.append(load)
    if "report" in args.steps:
        if not (
            a / "results.parquet"
        ).is_file():  # a report reads a run's saved frame, as after `iobench run`
            watch(
                iobench("report", str(a), "-o", str(work / "warm")),
                timeout=args.timeout,
                max_rss_mb=args.max_rss,
            )
        target = work / f"report-{size}"
        shutil.rmtree(target, ignore_errors=True)
        report, _ = measure("report", size, iobench("report", str(a), "-o", str(target)), args)
        page = target / "report.html"
        if page.is_file():
            report.page_mb = page.stat().st_size / 2**20
            pngs = list(target.glob("*.png"))
            report.figure_px = max((png_side(p) for p in pngs), default=0)
        results.append(report)
    if "compare" in args.steps:
        b = make_run(template, work / f"run-{size}-b", points, shift=1)
        for run in (a, b):
            if not (run / "results.parquet").is_file():
                subprocess.run(
                    [sys.executable, "-c", LOAD.replace("rebuild=True", "rebuild=False"), str(run)],
                    check=False,
                    stdout=subprocess.DEVNULL,
                )
        target = work / f"compare-{size}"
        shutil.rmtree(target, ignore_errors=True)
        compared, _ = measure("compare", size, iobench("compare", str(a), str(b), "-o", str(target)), args)
        page = target / "compare.html"
        if page.is_file():
            compared.page_mb = page.stat().st_size / 2**20
        results.append(compared)
    return results


def table(results: list[Measured], markdown: bool) -> str:
    header = [
        "step",
        "point-runs",
        "time (s)",
        "peak RSS (MB)",
        "page (MB)",
        "largest figure side (px)",
        "others' CPUs",
    ]
    rows = []
    for r in results:
        rows.append(
            [
                r.what,
                f"{r.size:,}",
                r.failed if r.failed else f"{r.seconds:.1f}",
                f"{r.rss_mb:,.0f}" if r.rss_mb else "–",
                f"{r.page_mb:.2f}" if r.page_mb is not None else "–",
                f"{r.figure_px:,}" if r.figure_px else "–",
                f"{r.others:.2f}",
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 5000, 50000])
    parser.add_argument("--steps", nargs="+", default=["load", "report", "compare"])
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/iobench-scale"))
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="stop a measurement after this many seconds"
    )
    parser.add_argument("--max-rss", type=float, default=8192.0, help="stop a measurement past this RSS (MB)")
    parser.add_argument("--keep", action="store_true", help="keep the generated run directories")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    template = make_template(args.work)
    results: list[Measured] = []
    try:
        for size in args.sizes:
            results += run_size(template, args.work, size, args)
    finally:
        if not args.keep:
            for path in args.work.glob("run-*"):
                shutil.rmtree(path, ignore_errors=True)
    print(table(results, args.markdown))


if __name__ == "__main__":
    main()

"""How fast iobench ingests fio JSON files, next to fio-plot's loader and plain ``json.load``.

Generates 300 real fio JSON outputs with the installed fio (null engine, 50 ms
time-based runs; rw × bs × iodepth × numjobs so every file differs, no
group_reporting so numjobs>1 gives one entry per job, as bench-fio writes them),
copies them 10 times (3,000 files) in bench-fio's layout
(``<output>/<target>/<bs>/<rw>-<iodepth>-<numjobs>.json``, one output tree per rw
and copy), then measures three loaders, each in its own subprocess:

- ``iobench.parse_fio(paths)``: all 3,000 files into one tidy frame;
- fio-plot's loader, ``fio_plot.fiolib.getdata.get_json_data(settings)`` (the
  function ``fio-plot`` calls for its bar graphs), installed from PyPI into a
  separate venv, once per (rw, bs) with the 10 copies' directories as input;
- a stdlib loop, ``[json.load(f) for f in files]``, the floor any loader pays.

Per loader: files/s (wall; the best of ``--repeat`` loads, default 3, after one
warm-up read of every file, and their median), the heap (tracemalloc's peak
during the load and what stays allocated while the result is held, plus
pyarrow's memory pool, which tracemalloc does not see: its peak and what it
holds; per file), and RSS growth (``ru_maxrss`` after the first load minus
``VmRSS`` before it, per file). On stderr, per loader: how many CPUs other
processes kept busy during its timed loads (``/proc/stat`` minus the loader's own
CPU time): a busy machine slows the parallel parse first.

    .venv/bin/python benchmarks/parse_speed.py [--repeat 3] [--markdown]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

RWS = ("read", "write", "randread", "randrw")
BSS = ("4k", "64k", "1m")
IODEPTHS = (1, 4, 8, 16, 32)
NUMJOBS = (1, 2, 3, 4, 8)
COPIES = 10
TARGET = "nullb"  # the "device" directory bench-fio names after the target
FIO_TIMEOUT_S = 60.0
WORKER_TIMEOUT_S = 600.0
DEFAULT_FIOPLOT_VENV = Path(tempfile.gettempdir()) / "iobench-fio-plot-venv"
LOADERS = ("json.load loop", "fio-plot", "iobench parse_fio")


# --- workers: run in a subprocess; stdlib only at module level, so the fio-plot venv can run them ----------


def _arrow_pool() -> tuple[int, int]:
    """pyarrow's memory pool, if the loader uses pyarrow: (bytes held now, peak bytes since start)."""
    if "pyarrow" not in sys.modules:
        return 0, 0
    pool = sys.modules["pyarrow"].default_memory_pool()
    return int(pool.bytes_allocated()), int(max(pool.max_memory() or 0, 0))


def _vmrss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _load_json_loop(manifest: dict[str, Any]) -> tuple[Any, int]:
    data = []
    for path in manifest["paths"]:
        with open(path, "rb") as handle:
            data.append(json.load(handle))
    return data, len(data)


def _load_fio_plot(manifest: dict[str, Any]) -> tuple[Any, int]:
    from fio_plot.fiolib import defaultsettings, getdata  # type: ignore[import-not-found]  # fio-plot venv only

    results = []
    files = 0
    for group in manifest["groups"]:
        settings = defaultsettings.get_default_settings()
        settings.update(
            input_directory=group["dirs"],
            rw=group["rw"],
            iodepth=list(IODEPTHS),
            numjobs=list(NUMJOBS),
            compare_graph=False,
        )
        dataset = getdata.get_json_data(settings)
        files += sum(len(directory["files"]) for directory in dataset)
        results.append(dataset)
    return results, files


def _load_iobench(manifest: dict[str, Any]) -> tuple[Any, int]:
    from iobench import parse_fio

    frame = parse_fio(manifest["paths"], processes=1 if manifest.get("serial") else None)
    return frame, len(manifest["paths"])


WORKERS: dict[str, Callable[[dict[str, Any]], tuple[Any, int]]] = {
    "json.load loop": _load_json_loop,
    "fio-plot": _load_fio_plot,
    "iobench parse_fio": _load_iobench,
}


def _machine_busy_s() -> float:
    """CPU time every process on the machine has used since boot (s), from /proc/stat."""
    with open("/proc/stat") as stat:
        # user nice system idle iowait irq softirq steal, in clock ticks
        ticks = [int(x) for x in stat.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    """CPU time of this process and its children, reaped or running (parse_fio's kept workers)."""
    usages = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    running = 0
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue  # ended meanwhile: reaped, it is in RUSAGE_CHILDREN
            running += int(fields[11]) + int(fields[12])
    return sum(usage.ru_utime + usage.ru_stime for usage in usages) + running / os.sysconf("SC_CLK_TCK")


def _timed_loads(
    load: Callable[[dict[str, Any]], tuple[Any, int]], manifest: dict[str, Any], repeat: int
) -> tuple[list[float], float]:
    """Each load's wall time, and how many CPUs other processes kept busy meanwhile."""
    walls = []
    busy, own, started = _machine_busy_s(), _own_cpu_s(), time.perf_counter()
    for _ in range(repeat):
        gc.collect()
        begun = time.perf_counter()
        result, _ = load(manifest)
        walls.append(time.perf_counter() - begun)
        del result
    others = (_machine_busy_s() - busy) - (_own_cpu_s() - own)
    return walls, max(others, 0.0) / (time.perf_counter() - started)


def run_worker(name: str, manifest_path: Path, repeat: int) -> dict[str, Any]:
    """Measure one loader in this process and return the figures (printed as JSON)."""
    manifest = json.loads(manifest_path.read_text())
    load = WORKERS[name]
    if name == "fio-plot":
        import fio_plot.fiolib.getdata  # type: ignore[import-not-found]  # noqa: F401 - not timed
    elif name == "iobench parse_fio":
        from iobench import parse_fio

        parse_fio(manifest["paths"][0])  # pandas and pyarrow load lazily; one-time, not per file
    for path in manifest["paths"]:  # warm the page cache: every loader reads from memory
        with open(path, "rb") as handle:
            handle.read()

    # Memory is measured on a load in this one process: parse_fio's default spreads a
    # long list over one process per CPU, whose heaps tracemalloc and ru_maxrss don't see.
    manifest["serial"] = True
    gc.collect()
    rss_before = _vmrss_kib()
    result, files = load(manifest)
    rss_growth = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before, 0)
    extra: dict[str, Any] = {}
    if name == "iobench parse_fio":
        extra["frame_rows"] = len(result)
        extra["frame_sources"] = int(result["source"].nunique())
        extra["frame_bytes"] = int(result.memory_usage(deep=True).sum())
    del result
    gc.collect()
    arrow_baseline, _ = _arrow_pool()
    tracemalloc.start()
    baseline, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    result, _ = load(manifest)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # pyarrow's pool keeps only its all-time peak: that of the loads so far, each the same load.
    arrow_held, arrow_peak = _arrow_pool()
    del result
    serial_walls, serial_others = _timed_loads(load, manifest, repeat)
    manifest["serial"] = False
    walls, others = _timed_loads(load, manifest, repeat)
    return {
        "loader": name,
        "files": files,
        "walls_s": walls,
        "serial_walls_s": serial_walls,
        "others_cpus": others,
        "serial_others_cpus": serial_others,
        # Peaks added: an upper bound, the two may not coincide.
        "heap_peak_bytes": peak - baseline + max(arrow_peak - arrow_baseline, 0),
        "heap_retained_bytes": current - baseline + arrow_held - arrow_baseline,
        "rss_growth_bytes": rss_growth * 1024,
        "python": sys.version.split()[0],
        **extra,
    }


# --- the driver: runs in iobench's venv ----------------------------------------------------------------


def _fio_argv(fio: str, rw: str, bs: str, iodepth: int, numjobs: int, output: Path) -> list[str]:
    return [
        fio,
        f"--name={rw}-{bs}",
        "--ioengine=null",
        f"--rw={rw}",
        f"--bs={bs}",
        f"--iodepth={iodepth}",
        f"--numjobs={numjobs}",
        "--size=1g",
        "--time_based",
        "--runtime=50ms",
        "--output-format=json",
        f"--output={output}",
    ]


def generate(root: Path, parallel: int) -> list[Path]:
    """Run the 300 fio jobs into copy 0 of bench-fio's layout; return their paths."""
    from iobench.system.process import run_process

    fio = shutil.which("fio")
    if fio is None:
        raise SystemExit("fio not found on PATH: install it (apt-get install fio) and re-run")
    jobs = []
    for rw, bs, iodepth, numjobs in itertools.product(RWS, BSS, IODEPTHS, NUMJOBS):
        out = root / "copy-00" / rw / TARGET / bs / f"{rw}-{iodepth}-{numjobs}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        jobs.append((_fio_argv(fio, rw, bs, iodepth, numjobs, out), out))

    def one(job: tuple[list[str], Path]) -> Path:
        argv, out = job
        done = run_process(argv, cwd=out.parent, timeout=FIO_TIMEOUT_S)
        if done.returncode != 0 or done.timed_out or not out.is_file():
            raise SystemExit(f"fio failed ({done.returncode}): {' '.join(argv)}\n{done.stderr}")
        return out

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        return list(pool.map(one, jobs))


def replicate(root: Path, originals: list[Path]) -> dict[str, Any]:
    """Copy the outputs to copies 1..9 and describe the 3,000 files for the workers."""
    paths = []
    for copy in range(COPIES):
        for original in originals:
            target = root / f"copy-{copy:02d}" / original.relative_to(root / "copy-00")
            if copy:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(original, target)
            paths.append(str(target))
    groups = [
        {"rw": rw, "bs": bs, "dirs": [str(root / f"copy-{c:02d}" / rw / TARGET / bs) for c in range(COPIES)]}
        for rw, bs in itertools.product(RWS, BSS)
    ]
    return {"paths": paths, "groups": groups}


def fio_plot_python(venv: Path) -> tuple[Path | None, str]:
    """Return the fio-plot venv's python (creating the venv if needed) and fio-plot's version."""
    from iobench.system.process import run_process

    python = venv / "bin" / "python"
    probe = [str(python), "-c", "from importlib.metadata import version; print(version('fio-plot'))"]
    if python.exists():
        done = run_process(probe, timeout=60)
        if done.returncode == 0:
            return python, done.stdout.strip()
    print(f"creating {venv} and installing fio-plot from PyPI ...", file=sys.stderr)
    # pip needs the caller's proxy and index settings, so it gets the full environment.
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "-q", "fio-plot"],
    ]
    for argv in steps:
        done = run_process(argv, timeout=600, env=dict(os.environ))
        if done.returncode != 0 or done.timed_out:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            print(
                f"fio-plot could not be installed ({' '.join(argv)} failed):\n{tail}\n"
                "Measuring iobench and the json.load loop only. With network access, re-run; "
                "or install it yourself and pass --fio-plot-venv PATH.",
                file=sys.stderr,
            )
            return None, ""
    done = run_process(probe, timeout=60)
    return python, done.stdout.strip()


def measure(python: Path, loader: str, manifest: Path, repeat: int, scratch: Path) -> dict[str, Any]:
    from iobench.system.process import minimal_env, run_process

    env = minimal_env({"MPLBACKEND": "Agg", "MPLCONFIGDIR": str(scratch / "mpl")})
    argv = [str(python), str(Path(__file__).resolve()), "--worker", loader, "--manifest", str(manifest)]
    done = run_process([*argv, "--repeat", str(repeat)], timeout=WORKER_TIMEOUT_S, env=env)
    if done.returncode != 0 or done.timed_out:
        raise SystemExit(f"{loader} worker failed ({done.returncode}):\n{done.stderr}")
    result = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    # Other work on the machine takes CPUs from the loaders (the parallel parse first): say how much.
    others = f"{result['others_cpus']:.2f}"
    if loader == "iobench parse_fio":
        others += f" (one process: {result['serial_others_cpus']:.2f})"
    print(f"{loader}: other processes kept {others} of {os.cpu_count()} CPUs busy", file=sys.stderr)
    return result


def table(results: dict[str, dict[str, Any]], markdown: bool) -> str:
    def rate(result: dict[str, Any], key: str = "walls_s") -> float:
        return float(result["files"] / min(result[key]))  # the best of the timed loads

    def median(result: dict[str, Any], key: str = "walls_s") -> str:
        return f"{result['files'] / statistics.median(result[key]):,.0f}"

    repeat = len(next(iter(results.values()))["walls_s"])
    base = rate(results["fio-plot"]) if "fio-plot" in results else None
    rows = [
        f"| loader | files/s (best of {repeat}) | × fio-plot | files/s (median) "
        "| heap peak/file (KiB) | heap kept/file (KiB) | RSS growth/file (KiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in LOADERS:
        if name not in results:
            continue
        result = results[name]
        files = result["files"]
        ratio = f"{rate(result) / base:.2f}" if base else "n/a"
        rows.append(
            f"| {name} | {rate(result):,.0f} | {ratio} | {median(result)} "
            f"| {result['heap_peak_bytes'] / files / 1024:.1f} "
            f"| {result['heap_retained_bytes'] / files / 1024:.1f} "
            f"| {result['rss_growth_bytes'] / files / 1024:.1f} |"
        )
        if name == "iobench parse_fio" and "serial_walls_s" in result:
            serial = rate(result, "serial_walls_s")
            serial_ratio = f"{serial / base:.2f}" if base else "n/a"
            rows.append(
                f"| iobench parse_fio, one process | {serial:,.0f} | {serial_ratio} "
                f"| {median(result, 'serial_walls_s')} | (same) | (same) | (same) |"
            )
    if markdown:
        return "\n".join(rows)
    return "\n".join(row.replace("|---", "").strip("|") for row in rows if set(row) != {"|", "-"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repeat", type=int, default=3, help="timed loads per loader (best and median reported)"
    )
    parser.add_argument("--parallel", type=int, default=2 * (os.cpu_count() or 1), help="fio runs at once")
    parser.add_argument(
        "--fio-plot-venv",
        type=Path,
        default=DEFAULT_FIOPLOT_VENV,
        help=f"venv holding fio-plot; created with pip when missing (default {DEFAULT_FIOPLOT_VENV})",
    )
    parser.add_argument("--markdown", action="store_true", help="print only the markdown table")
    parser.add_argument("--keep", action="store_true", help="keep the generated files and print where")
    parser.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--manifest", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.worker:
        print(json.dumps(run_worker(args.worker, args.manifest, args.repeat)))
        return

    root = Path(tempfile.mkdtemp(prefix="iobench-parse-speed-"))
    try:
        started = time.perf_counter()
        originals = generate(root / "data", args.parallel)
        manifest = replicate(root / "data", originals)
        manifest_path = root / "manifest.json"
        manifest_path.write_text(json.dumps(manifest))
        sizes = [Path(p).stat().st_size for p in manifest["paths"]]
        print(
            f"generated {len(originals)} fio outputs in {time.perf_counter() - started:.1f} s; "
            f"{len(sizes)} files, {sum(sizes) / len(sizes) / 1024:.1f} KiB mean",
            file=sys.stderr,
        )
        fio_plot, fio_plot_version = fio_plot_python(args.fio_plot_venv)
        pythons = {"json.load loop": Path(sys.executable), "iobench parse_fio": Path(sys.executable)}
        if fio_plot is not None:
            pythons["fio-plot"] = fio_plot
        results = {}
        for loader in LOADERS:
            if loader in pythons:
                print(f"measuring {loader} ...", file=sys.stderr)
                results[loader] = measure(pythons[loader], loader, manifest_path, args.repeat, root)
                if results[loader].get("frame_sources", results[loader]["files"]) != len(sizes):
                    raise SystemExit(f"{loader} loaded {results[loader]['files']} files, not {len(sizes)}")
        if not args.markdown:
            import pandas as pd

            from iobench.system.process import run_process

            fio_version = run_process(["fio", "--version"], timeout=30).stdout.strip()
            print(
                f"Python {results['iobench parse_fio']['python']}, pandas {pd.__version__}, {fio_version}, "
                f"fio-plot {fio_plot_version or 'not installed'}; {os.cpu_count()} CPUs; "
                f"best of {args.repeat} loads; iobench frame: {results['iobench parse_fio']['frame_rows']} rows"
            )
        print(table(results, markdown=args.markdown))
    finally:
        if args.keep:
            print(f"files kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

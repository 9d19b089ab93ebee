"""Where the time of a whole ``iobench run`` goes, phase by phase, next to plain fio on the same job files.

Runs the same null-engine matrix as ``benchmarks/overhead.py`` through the real
CLI in a child process. The child installs wall-clock timers on the functions
that make up each phase *as their modules are imported* (an import hook, so the
timers change neither what is imported nor when), then calls the CLI's
``main()``. Phases, on the main thread:

- start-up and imports: process start to the matrix being read (the
  interpreter, the CLI's imports);
- validation: ``load_matrix`` (YAML, schema, fio's option catalogue);
- planning: ``plan`` (topology, placement, job files, the write guard);
- run directory: creating it, the manifest with the machine's facts;
- per point — settings (scheduler/readahead applied and read back),
  telemetry start, fio (``_launch``: numactl + fio until it exits, split into
  fio's own process time and the launch around it), telemetry's last sample
  (taken once fio has ended), judging (parsing fio's output, placement
  check), telemetry save, point files (job file, argv, stderr, meta and the
  atomic commit);
- the frame: ``build_frame`` and writing ``results.parquet``;
- figures: ``run_figures``;
- exit: from the figures to the process's end (the interpreter's teardown).

What no timer covers is shown as "other". Then the job files the run wrote
are run through plain ``fio`` one after another, as in ``overhead.py``.
Medians over ``--rounds``.

    .venv/bin/python benchmarks/profile_run.py [--points 16] [--rounds 3] [--telemetry/--no-telemetry]
        [--figures/--no-figures]
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from overhead import MATRIX, plain_fio

#: phase -> (module, attribute path) of the functions whose wall time is the phase.
PHASES: dict[str, tuple[tuple[str, str], ...]] = {
    "validation": (("iobench.matrix.model", "load_matrix"),),
    "planning": (("iobench.runner.sweep", "plan"),),
    "run directory": (
        ("iobench.store.rundir", "RunDir.create"),
        ("iobench.runner.sweep", "start_manifest"),
    ),
    "settings": (
        ("iobench.runner.sweep", "_PointRunner._apply_settings"),
        ("iobench.runner.sweep", "_device_settings"),
    ),
    "telemetry start": (("iobench.runner.recording", "start"),),
    "fio (launch)": (("iobench.runner.sweep", "_PointRunner._launch"),),
    "telemetry last sample": (("iobench.runner.recording", "PointTelemetry.stop"),),
    "judging": (("iobench.runner.sweep", "_PointRunner._judge"),),
    "telemetry save": (("iobench.runner.recording", "PointTelemetry.save"),),
    "reaping": (("iobench.runner.sweep", "_reap"),),
    "point files": (
        ("iobench.runner.sweep", "write_text"),
        ("iobench.runner.sweep", "_PointRunner._process_meta"),
        ("iobench.store.rundir", "RunDir.commit"),
    ),
    "headline": (("iobench.results.points", "headline"),),
    "frame": (
        ("iobench.results.assemble", "build_frame"),
        ("iobench.store.rundir", "RunDir.write_frame"),
    ),
    "figures": (("iobench.cli.commands", "run_figures"), ("iobench.plots.files", "run_figures")),
}
PER_POINT = (
    "settings",
    "telemetry start",
    "fio (launch)",
    "telemetry last sample",
    "judging",
    "telemetry save",
    "reaping",
    "point files",
    "headline",
)


# --- the child: timers installed by an import hook, then the CLI -------------------------------------------


def _process_start() -> float:
    """This process's start on the ``time.time()`` clock (from /proc/self/stat)."""
    with open("/proc/self/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as handle:
        uptime = float(handle.read().split()[0])
    return time.time() - uptime + int(fields[19]) / ticks


class _Timers:
    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.first: dict[str, float] = {}
        self.last_end = 0.0
        self.depth: dict[str, int] = defaultdict(int)
        self.wanted: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for phase, targets in PHASES.items():
            for module, attr in targets:
                self.wanted[module].append((attr, phase))

    def wrap(self, func: Callable[..., Any], phase: str) -> Callable[..., Any]:
        import threading

        main = threading.main_thread()

        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not main or self.depth[phase]:
                return func(*args, **kwargs)
            self.depth[phase] += 1
            started = time.time()
            self.first.setdefault(phase, started)
            try:
                return func(*args, **kwargs)
            finally:
                ended = time.time()
                self.spent[phase] += ended - started
                self.last_end = max(self.last_end, ended)
                self.depth[phase] -= 1

        timed.__wrapped__ = func  # type: ignore[attr-defined]
        return timed

    def patch(self, module: ModuleType) -> None:
        for attr, phase in self.wanted.get(module.__name__, ()):
            owner: Any = module
            *path, name = attr.split(".")
            for part in path:
                owner = getattr(owner, part)
            current = getattr(owner, name, None)
            if current is not None and not hasattr(current, "__wrapped__"):
                setattr(owner, name, self.wrap(current, phase))


class _Hook(importlib.abc.MetaPathFinder):
    """Patches a module right after it executed: later ``from m import f`` get the timed ``f``."""

    def __init__(self, timers: _Timers) -> None:
        self.timers = timers

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if name not in self.timers.wanted:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        timers = self.timers

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)  # type: ignore[attr-defined]
                timers.patch(module)

        spec.loader = Loader()
        return spec


def child(matrix: str, out: str, report: str, figures: str) -> None:
    start = _process_start()
    timers = _Timers()
    sys.meta_path.insert(0, _Hook(timers))
    sys.argv = ["iobench", "run", matrix, "--out", out, "--quiet", f"--{figures}"]
    from iobench.cli.commands import main

    try:
        main()
    finally:  # the interpreter's teardown comes after: the parent counts it in "exit"
        summary = {"start": start, "spent": timers.spent, "first": timers.first, "last_end": timers.last_end}
        Path(report).write_text(json.dumps(summary))


# --- the parent -----------------------------------------------------------------------------------------------


def one_round(base: Path, matrix: Path, n: int, figures: bool) -> dict[str, float]:
    report = base / f"phases-{n}.json"
    out = base / f"results-{n}"
    switch = "figures" if figures else "no-figures"  # the child's option, without its dashes
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(matrix), str(out), str(report), switch],
        capture_output=True,
        text=True,
        check=False,
    )
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"iobench run failed ({done.returncode}):\n{done.stderr}")
    data = json.loads(report.read_text())
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    phases: dict[str, float] = dict(data["spent"])
    phases["start-up and imports"] = data["first"]["validation"] - data["start"]
    phases["exit"] = ended - data["last_end"]
    fio_own = 0.0
    for meta_path in (run_dir / "points").glob("*/meta.json"):
        meta = json.loads(meta_path.read_text())
        fio_own += sum(p["duration_s"] for p in meta["processes"])
    phases["fio (launch)"] -= fio_own
    phases["fio itself"] = fio_own
    phases["total"] = ended - data["start"]
    phases["other"] = phases["total"] - sum(v for k, v in phases.items() if k != "total")
    scratch = base / f"plain-{n}"
    scratch.mkdir()
    phases["plain fio"] = plain_fio(run_dir, scratch)
    shutil.rmtree(run_dir)
    shutil.rmtree(scratch)
    return phases


ORDER = (
    "start-up and imports",
    "validation",
    "planning",
    "run directory",
    *PER_POINT[:2],
    "fio itself",
    *PER_POINT[2:],
    "frame",
    "figures",
    "exit",
    "other",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=16, choices=(4, 8, 16, 32))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--telemetry", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--figures", action=argparse.BooleanOptionalAction, default=False, help="as `iobench run --figures`"
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    depths = {4: [1], 8: [1, 8], 16: [1, 4, 16, 32], 32: [1, 2, 4, 8, 16, 32, 64, 128]}[args.points]
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="iobench-profile-") as tmp:
        base = Path(tmp)
        matrix = base / "overhead.yaml"
        text = MATRIX.format(target=base / "null.dat", iodepths=depths)
        matrix.write_text(text if args.telemetry else text + "telemetry: false\n")
        for n in range(args.rounds):
            rounds.append(one_round(base, matrix, n, args.figures))
    med = {k: statistics.median(r.get(k, 0.0) for r in rounds) for k in rounds[0]}
    overhead = med["total"] - med["plain fio"]
    points = args.points
    print(
        f"{points} points, telemetry {'on' if args.telemetry else 'off'}, "
        f"{'--figures' if args.figures else 'no figures'}, medians of {args.rounds} rounds; "
        f"iobench run {med['total']:.2f} s, plain fio {med['plain fio']:.2f} s, "
        f"ratio {med['total'] / med['plain fio']:.3f}, overhead {overhead / points * 1000:.0f} ms/point\n"
    )
    print("| phase | total (ms) | per point (ms) |")
    print("|---|---|---|")
    for phase in ORDER:
        value = med.get(phase, 0.0)
        print(f"| {phase} | {value * 1000:.0f} | {value * 1000 / points:.1f} |")
    print(f"| **iobench run** | {med['total'] * 1000:.0f} | {med['total'] * 1000 / points:.1f} |")
    print(
        f"| plain fio, same job files | {med['plain fio'] * 1000:.0f} | {med['plain fio'] * 1000 / points:.1f} |"
    )


if __name__ == "__main__":
    main()

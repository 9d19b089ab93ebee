"""What `iobench run` loads before its first fio starts, and what it imports while that fio runs.

pandas and pyarrow take a third of a second to import, matplotlib as much
again: never between the command and the first I/O. The runner imports what
the rest of the run needs while the first point's fio runs
(:data:`iobench.runner.point.LATER_MODULES`), keeping off the point's CPUs; matplotlib
loads only for figures.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from iobench.system.hostfs import SystemRoot
from iobench.system.sampler import keep_thread_off

HEAVY = ("pandas", "pyarrow", "matplotlib", "numpy", "scipy")


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return set(done.stdout.split())


def test_the_run_command_path_loads_no_data_or_figure_library() -> None:
    """Everything the CLI imports up to launching fio: the command, progress, matrix, plan, runner, telemetry."""
    loaded = _loaded_after(
        "from iobench.cli.commands import app\n"
        "from iobench.cli.console import PlainProgress\n"
        "from iobench.matrix.model import load_matrix\n"
        "from iobench.planner.plans import plan\n"
        "from iobench.runner.sweep import run\n"
        "from iobench.runner import recording\n"
        "from iobench.system.metadata import collect_metadata\n"
        "from iobench.store.rundir import RunDir\n"
    )
    assert loaded == set(), f"loaded before the first fio starts: {sorted(loaded)}"


def test_a_quiet_or_plain_run_loads_no_rich() -> None:
    """rich is for the terminal's live display and error messages: a quiet or piped run does without it."""
    probe = (
        "import sys\n"
        "from iobench.cli.commands import app\n"
        "from iobench.cli.console import PlainProgress\n"
        "from iobench.runner.sweep import run\n"
        "print(sorted(m for m in sys.modules if m == 'rich' or m.startswith('rich.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to move a thread between")
def test_a_thread_keeps_off_the_point_cpus_and_the_rest_of_the_process_does_not_move() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    seen: dict[str, object] = {}

    def work() -> None:
        seen["placed"] = keep_thread_off([cpus[0]], SystemRoot())
        seen["affinity"] = sorted(os.sched_getaffinity(0))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(10)
    assert seen["affinity"] == cpus[1:] and list(seen["placed"] or ()) == cpus[1:]  # type: ignore[call-overload]
    assert sorted(os.sched_getaffinity(0)) == cpus  # the main thread stays where it was
    assert keep_thread_off([], SystemRoot()) is None  # nothing to avoid: stays put
    assert keep_thread_off(cpus, SystemRoot()) is None  # nowhere else to go: stays put


@pytest.mark.fio
@pytest.mark.parametrize("figures", [False, True])
def test_a_run_imports_pandas_while_its_first_fio_runs(tmp_path: object, figures: bool) -> None:
    """A real run: pandas is not in sys.modules when the first point's fio starts, and is when the
    second's does; matplotlib only when figures were asked for."""
    from pathlib import Path

    base = Path(str(tmp_path))
    (base / "m.yaml").write_text(
        "version: 1\nname: t\ntargets: [{path: " + str(base / "f.dat") + ", size: 1M}]\n"
        "fio: {ioengine: 'null', rw: read, bs: 4k, runtime: 1, time_based: 1}\ntelemetry: false\n"
        "matrix: {iodepth: [1, 2]}\n"
    )
    code = (
        "import sys, time\n"
        "import iobench.system.process as p\n"
        "real = p.subprocess.Popen\n"
        "class Spy(real):\n"
        "    def __init__(self, *a, **k):\n"
        "        if any(str(x).endswith('.fio') for x in a[0]):  # fio on job files (validation, then the point)\n"
        "            print('pandas at fio start:', 'pandas' in sys.modules, flush=True)\n"
        "        super().__init__(*a, **k)\n"
        "p.subprocess.Popen = Spy\n"
        "from iobench.cli.commands import main\n"
        f"sys.argv = ['iobench', 'run', {str(base / 'm.yaml')!r}, '--out', {str(base / 'out')!r}, '--quiet']\n"
        + ("sys.argv.append('--figures')\n" if figures else "")
        + "try:\n"
        "    main()\n"
        "finally:\n"
        "    print('matplotlib loaded:', 'matplotlib' in sys.modules, flush=True)\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    # fio starts: validating the job files (unless remembered from an earlier run), then each point's.
    starts = [
        line.split(": ")[1] for line in done.stdout.splitlines() if line.startswith("pandas at fio start")
    ]
    assert starts[-2:] == ["False", "True"] and set(starts[:-1]) == {"False"}, done.stdout
    assert time.monotonic() - started < 100
    assert f"matplotlib loaded: {figures}" in done.stdout
    run_dir = Path(next(line for line in done.stdout.splitlines() if line.startswith("/")))
    assert (run_dir / "results.parquet").is_file()
    assert bool(list((run_dir / "figures").glob("*.png"))) is figures


def test_the_run_imports_the_rest_once_every_fio_of_its_first_point_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An import holds the GIL for long stretches: the watchers first see the workers they must not miss.

    The import runs on the runner's own thread, kept off the point's CPUs (where another is online).
    """
    from types import SimpleNamespace
    from typing import Any

    from iobench.runner import point

    allowed = sorted(os.sched_getaffinity(0))
    calls: list[tuple[str, str, list[int]]] = []

    def imported(name: str) -> None:
        calls.append((name, threading.current_thread().name, sorted(os.sched_getaffinity(0))))

    first, second = (
        SimpleNamespace(output=name, cpus=(allowed[0],), host=None) for name in ("a.json", "b.json")
    )
    run: Any = SimpleNamespace(key="0001-r1", processes=[first, second])
    later: Any = SimpleNamespace(key="0002-r1", processes=[first, second])
    runner = point.PointRunner(run_dir=None, plan=None, sites={}, executor=None)  # type: ignore[arg-type]
    with monkeypatch.context() as patch:
        patch.setattr(point.importlib, "import_module", imported)
        runner.workers_seen(run, first)
        runner.workers_seen(run, first)
        assert calls == []
        runner.workers_seen(run, second)
        runner.workers_seen(later, first)  # the next point
        runner.workers_seen(later, second)
    off_the_point = allowed[1:] or allowed
    here = threading.current_thread().name
    assert calls == [(name, here, off_the_point) for name in point.LATER_MODULES]  # once a run
    assert sorted(os.sched_getaffinity(0)) == allowed  # put back


def test_the_later_modules_bring_pandas_and_pyarrow() -> None:
    """What the runner imports while the first fio runs is what pulls pandas in (else the list is stale)."""
    from iobench.runner.point import LATER_MODULES

    assert {"pandas", "pyarrow"} <= _loaded_after("\n".join(f"import {m}" for m in LATER_MODULES))

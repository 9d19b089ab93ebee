"""What `iobench run` loads before its first fio starts.

pandas, pyarrow and matplotlib take most of a second to import: they load
where they are first used, never between the command and the first I/O.
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
def test_a_run_starts_fio_before_loading_pandas(tmp_path: object, figures: bool) -> None:
    """A real run: pandas is not in sys.modules when a fio starts (it comes with the frame, at the
    end); matplotlib only when figures were asked for."""
    from pathlib import Path

    base = Path(str(tmp_path))
    (base / "m.yaml").write_text(
        "version: 1\nname: t\ntargets: [{path: " + str(base / "f.dat") + ", size: 1M}]\n"
        "fio: {ioengine: 'null', rw: read, bs: 4k, runtime: 1, time_based: 1}\ntelemetry: false\n"
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
    assert "pandas at fio start: False" in done.stdout and "pandas at fio start: True" not in done.stdout
    assert time.monotonic() - started < 100
    assert f"matplotlib loaded: {figures}" in done.stdout
    run_dir = Path(next(line for line in done.stdout.splitlines() if line.startswith("/")))
    assert (run_dir / "results.parquet").is_file()
    assert bool(list((run_dir / "figures").glob("*.png"))) is figures

"""fio options and values a hostile matrix may try: nothing of them reaches fio before it is judged.

Each matrix goes through the real command line (``iobench plan``), which
only reads and judges: it must exit 2 before anything runs and leave the
files it names untouched.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.fio


def iobench(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command line, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "iobench", *args], capture_output=True, text=True, timeout=300, check=False
    )


class OpenWatch:
    """Tells whether any process opened a FIFO for reading while the watch ran.

    fio loads an engine it does not know by ``dlopen(NAME)``, which opens the
    file NAME: a FIFO there shows the open (a writer can open a FIFO only
    while a reader holds it) without any code being built or run. The writer
    closes at once, so the reader sees an empty file and its ``dlopen`` fails.
    """

    def __init__(self, fifo: Path) -> None:
        self.fifo = fifo
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: nobody has it open for reading
                    raise
                time.sleep(0.005)
                continue
            self.opened += 1
            os.close(fd)

    def __enter__(self) -> OpenWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture
def library(tmp_path: Path) -> Iterator[OpenWatch]:
    """A FIFO standing where a hostile matrix says its I/O engine library is."""
    fifo = tmp_path / "engine.so"
    os.mkfifo(fifo)
    with OpenWatch(fifo) as watch:
        yield watch


ENGINE_MATRIX = """\
version: 1
name: hostile
targets:
  - path: {target}
    size: 1M
fio:
  rw: randread
  bs: 4k
{fio}
{matrix}
"""

# Where a matrix can name an engine, each with an option fio's core does not know (so that the
# engines' own options are looked up) next to it.
ENGINE_PLACES = {
    "fio-section": ("  ioengine: {lib}\n  userspace_reap: 1", ""),
    "axis": ("  userspace_reap: 1", "matrix:\n  ioengine: [psync, {lib}]"),
    "include": ("", "matrix:\n  iodepth: [1]\n  include:\n    - {{ioengine: {lib}, userspace_reap: 1}}"),
    "external-prefix": ("  ioengine: external:{lib}\n  hipri: 1", ""),
}


@pytest.mark.parametrize(("fio", "matrix"), ENGINE_PLACES.values(), ids=ENGINE_PLACES.keys())
def test_an_engine_named_by_path_is_never_loaded_while_the_matrix_is_judged(
    fio: str, matrix: str, library: OpenWatch, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    text = ENGINE_MATRIX.format(
        target=tmp_path / "t.dat",
        fio=fio.format(lib=library.fifo),
        matrix=matrix.format(lib=library.fifo),
    )
    done = iobench("plan", str(write_matrix(text)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "is refused" in done.stderr
    assert library.opened == 0, "fio opened the engine library the matrix named (it would have run its code)"


def test_an_allowed_engine_written_in_capitals_still_finds_its_options(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    text = ENGINE_MATRIX.format(
        target=tmp_path / "t.dat", fio="  ioengine: LIBAIO\n  userspace_reap: 1", matrix=""
    )
    done = iobench("plan", str(write_matrix(text)), "--jobfiles")
    assert done.returncode == 0, done.stderr
    assert "ioengine=libaio" in done.stdout and "userspace_reap=1" in done.stdout


@pytest.mark.parametrize("name", ["all", ""], ids=["all", "empty"])
def test_a_name_fio_s_help_reads_as_every_option_is_no_option(
    name: str, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    """``fio --cmdhelp=all`` (and an empty name) lists every option, the first being ``description``."""
    text = ENGINE_MATRIX.format(target=tmp_path / "t.dat", fio=f'  "{name}": hello', matrix="")
    done = iobench("plan", str(write_matrix(text)))
    assert done.returncode == 2, done.stdout
    assert f"unknown fio option `{name}`" in done.stderr
    assert "description=hello" not in done.stdout

"""Dispatch fio output to the right reader and build the frame."""

from __future__ import annotations

import os
import pickle
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from iobench.errors import ResultsError
from iobench.results.fioout import reading
from iobench.results.fioout.frame import FrameBuilder, to_frame
from iobench.results.fioout.joboptions import Options
from iobench.results.fioout.jobs import read_jobs
from iobench.results.fioout.rows import Row
from iobench.system.process import Helper

PARALLEL_MIN_FILES = 500
"""Below this many files per process, starting the processes costs more than they save."""

HEAD_START_FILES = 100
"""Files this process reads beyond an even share: it turns a worker's rows into the frame once the
worker has answered (on 3,000 files and 2 CPUs, 100 has both shares end together; 0 to 700 tried)."""

START_FILES = 400
"""And this many more while a worker starts (its interpreter and imports): the first parse that needs it."""


def parse_fio_text(text: str, *, origin: str = "<text>") -> pd.DataFrame:
    """Parse fio output held in a string into the tidy frame.

    Parameters
    ----------
    text : str
        Anything fio printed: JSON or json+ (fio 2.x or 3.x, local or
        client/server), terse v2–v5, normal output (2.x and 3.x layouts), or a
        mix such as ``--output-format=json,normal``. Text around the results
        (warnings, ``fio: terminating on signal 2``, ETA lines) is ignored.
    origin : str, default "<text>"
        Name used in error messages and in the ``source`` column.

    Returns
    -------
    pandas.DataFrame
        One row per job (or group, or client job) × direction that did I/O;
        see :data:`iobench.results.fioout.FRAME_COLUMNS` and :data:`FRAME_DTYPES`,
        and a column per job option the output states
        (:data:`~iobench.results.fioout.joboptions.OPTION_DTYPES`), after ``direction``.

    Raises
    ------
    ResultsError
        ``text`` holds no fio results, or results that cannot be read.
    """
    return to_frame(read_jobs(text, origin=origin), origin, options=True)


def parse_fio(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    text: str | None = None,
    processes: int | None = None,
) -> pd.DataFrame:
    """Parse fio output files into the tidy frame.

    Parameters
    ----------
    source : str, path-like, or sequence of them
        A path (``str`` or :class:`os.PathLike`) names a file to read; a string
        is always a path, never fio output. A sequence names several files,
        parsed in order and concatenated. With ``text``, ``source`` is only
        the name recorded for that text.
    text : str, optional
        fio output held in memory (same as :func:`parse_fio_text`).
    processes : int, optional
        Read the files in this many processes: this one and worker Python
        processes (:mod:`iobench.results.fioout.reading`; default: one per
        CPU this process may run on, once there are at least
        ``PARALLEL_MIN_FILES`` files for each; 1 reads them all here). This
        process never forks, and the workers never import the caller's
        ``__main__``: any caller may use it, a notebook's kernel with its
        threads or a script without an ``if __name__ == "__main__":`` guard.
        A worker, once started, is kept for the next parse and ends with
        this process.

    Returns
    -------
    pandas.DataFrame
        The tidy frame, with the job options' columns as :func:`parse_fio_text`
        gives them; its ``source`` column holds the path (or name) each row
        came from (:func:`relative_sources` makes them short). An empty
        sequence gives an empty frame with every column.

    Raises
    ------
    ResultsError
        A file is missing or unreadable, or holds no fio results.

    Examples
    --------
    >>> df = parse_fio("run/fio.json")                       # doctest: +SKIP
    >>> df = parse_fio(["r1/fio.json", "r2/fio.json"])       # doctest: +SKIP
    >>> df = parse_fio("point-3", text=captured_stdout)      # doctest: +SKIP
    """
    if text is not None:
        if not isinstance(source, str | os.PathLike):
            raise TypeError("with text=, source must be a single name, not a sequence")
        return parse_fio_text(text, origin=os.fspath(source))
    items = [source] if isinstance(source, str | os.PathLike) else source
    origins = [item_origin(item) for item in items]
    # One frame at the end: a DataFrame per file and a concat cost ~10x the parsing.
    builder = FrameBuilder(options=True)
    workers = _worker_count(len(origins), processes)
    if workers < 2:
        for origin in origins:
            builder.add_jobs(reading.jobs_in_file(origin), origin)
        return builder.frame()
    # This process reads the first share (an even one and HEAD_START_FILES more) while each
    # worker process reads one of the others (threads only wait for them). The shares' rows
    # join the frame in order.
    starting = any(_helper(i).pid is None for i in range(workers - 1))
    extra = HEAD_START_FILES + (START_FILES if starting else 0)
    head = min(len(origins) // workers + extra, len(origins) - (workers - 1))
    rest, others = len(origins) - head, workers - 1
    shares = [origins[head + rest * i // others : head + rest * (i + 1) // others] for i in range(others)]
    with ThreadPoolExecutor(workers - 1) as pool:
        theirs = [pool.submit(_rows_elsewhere, i, share) for i, share in enumerate(shares)]
        for origin in origins[:head]:
            builder.add_jobs(reading.jobs_in_file(origin), origin)
        for share, future in zip(shares, theirs, strict=True):
            rows = future.result()
            if isinstance(rows, ResultsError):
                raise rows
            builder.add(*(reading.file_rows(share) if rows is None else rows))
    return builder.frame()


_HELPERS: list[Helper] = []
"""The worker processes, kept once started: the first parse of a long list pays their start."""
_HELPERS_LOCK = threading.Lock()


def _helper(index: int) -> Helper:
    with _HELPERS_LOCK:
        while len(_HELPERS) <= index:
            # The worker imports what this process imported: the same iobench, wherever it came from.
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            _HELPERS.append(Helper([sys.executable, "-m", reading.__name__], env=env))
        return _HELPERS[index]


def _rows_elsewhere(
    index: int, origins: list[str]
) -> tuple[list[Row], list[Options | None]] | ResultsError | None:
    """The rows of ``origins`` read by worker ``index``, or the error it met; None when it did not answer."""
    answer = _helper(index).ask(pickle.dumps(origins, protocol=pickle.HIGHEST_PROTOCOL))
    if not answer:
        return None  # killed, out of memory, busy with another thread's parse: its share is read here
    try:
        rows: tuple[list[Row], list[Options | None]] | ResultsError = pickle.loads(answer)  # noqa: S301 - our own worker's answer
    except (pickle.UnpicklingError, EOFError):
        return None  # something else wrote its answer file: its share is read here
    return rows


def _worker_count(files: int, processes: int | None) -> int:
    """``processes`` (at most one per file), or one per usable CPU with ``PARALLEL_MIN_FILES`` files each."""
    if not sys.executable:  # embedded: no interpreter to start workers with
        return 1
    if not processes:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        processes = min(cpus, files // PARALLEL_MIN_FILES)
    return max(1, min(processes, files))


def relative_sources(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """``frame`` with each ``source`` made relative to the folder common to all of them, and that folder.

    Files of one name in different folders stay apart (``a/fio.json``,
    ``b/fio.json``); one file keeps its own name.
    """
    paths = {s: os.path.abspath(s) for s in frame["source"].dropna().unique()}
    if not paths:
        return frame, ""
    root = os.path.commonpath([str(Path(p).parent) for p in paths.values()])
    names = {s: os.path.relpath(p, root) for s, p in paths.items()}
    out = frame.copy()
    out["source"] = out["source"].map(names).astype("string")
    return out, root


def item_origin(item: str | os.PathLike[str]) -> str:
    """The name the frame records for a file: ``str(Path(item))``.

    A string Path would not rewrite (no ``//``, no ``.`` component, no trailing
    slash) is used as it is, without the cost of building the Path.
    """
    if isinstance(item, str) and _is_normal(item):
        return item
    return str(Path(item))


def _is_normal(path: str) -> bool:
    return not (
        path in ("", ".")
        or "//" in path
        or "/./" in path
        or path.startswith("./")
        or path.endswith(("/", "/."))
    )

"""Dispatch fio output to the right reader and build the frame."""

from __future__ import annotations

import io
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from iobench.errors import ResultsError
from iobench.results.fioout import detect, split
from iobench.results.fioout.frame import FrameBuilder, Part, to_frame
from iobench.results.fioout.jobs import read_jobs
from iobench.results.fioout.jsondoc import decode_document
from iobench.results.fioout.jsonout import read_json
from iobench.results.fioout.model import JobStats

PARALLEL_MIN_FILES = 500
"""Below this many files per process, forking costs more than it saves."""

BLOCK_FILES = 64
"""Files per block shared out to the processes: small enough that they finish together."""

# Raw bytes on every platform (O_BINARY), never wait for a FIFO's writer, never adopt a terminal.
_OPEN_FLAGS = (
    os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
)


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
        see :data:`iobench.results.fioout.FRAME_COLUMNS` and :data:`FRAME_DTYPES`.

    Raises
    ------
    ResultsError
        ``text`` holds no fio results, or results that cannot be read.
    """
    return to_frame(read_jobs(text, origin=origin), origin)


def _read_file(path: Path) -> str:
    if not path.is_file():
        problem = "is not a file" if path.exists() else "no such file"
        raise ResultsError(
            f"{path}: {problem}. To parse fio output held in a string, use "
            "parse_fio_text(text) or parse_fio(name, text=text)."
        )
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror}") from exc


def _regular_file_bytes(path: str) -> bytes | None:
    """The bytes of ``path`` if it is a regular file that reads cleanly, else ``None``.

    One open, fstat and read: a third of the system calls and Python layers of
    ``is_file()`` plus ``read_text()``. On ``None``, :func:`_read_file` gives
    the precise error.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        data = os.read(fd, info.st_size + 1)
        if len(data) <= info.st_size:
            return data  # a regular file's read stops short only at its end
        chunks = [data]
        while chunk := os.read(fd, 1 << 16):  # to the end: it grew, or its size was wrong (procfs)
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _as_text(data: bytes) -> str:
    """``data`` decoded exactly as ``Path.read_text(errors="replace")`` decodes a file."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace").read()


def _jobs_in_file(origin: str) -> list[JobStats]:
    data = _regular_file_bytes(origin)
    if data is None:
        return read_jobs(_read_file(Path(origin)), origin=origin)
    doc = decode_document(data)  # fio's --output file: decoded straight from the bytes into records
    if doc is not None:
        return read_json(doc)
    obj = detect.whole_json(data)  # a value the records refuse (a string for a number, ...)
    if obj is not None:
        return read_json(obj)
    return read_jobs(_as_text(data), origin=origin)


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
        Parse in this many processes (default: one per CPU this process may
        run on, once there are at least ``PARALLEL_MIN_FILES`` files for each;
        1 parses in this process). Linux only; elsewhere always 1.

    Returns
    -------
    pandas.DataFrame
        The tidy frame; its ``source`` column holds the path (or name) each row
        came from. An empty sequence gives an empty frame with every column.

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
    origins = [_origin(item) for item in items]
    # One frame at the end: a DataFrame per file and a concat cost ~10x the parsing.
    workers = _worker_count(len(origins), processes)
    if workers < 2:
        return _frame_of(origins)
    # Blocks of up to BLOCK_FILES files, shared out as the processes get free (split.py);
    # forked, the processes inherit the imported parser instead of importing pandas again.
    # Each sends back its rows as arrow columns, and one frame is built here.
    size = max(min(BLOCK_FILES, -(-len(origins) // (4 * workers))), -(-len(origins) // split.MAX_BLOCKS), 1)
    blocks = [origins[i : i + size] for i in range(0, len(origins), size)]
    return split.run_blocks(len(blocks), lambda block: _parts_of(blocks[block]), workers, _frame_from_parts)


def _worker_count(files: int, processes: int | None) -> int:
    """``processes`` (at most one per file), or one per usable CPU with ``PARALLEL_MIN_FILES`` files each."""
    if sys.platform != "linux":  # workers are forked
        return 1
    if not processes:
        processes = min(len(os.sched_getaffinity(0)), files // PARALLEL_MIN_FILES)
    return max(1, min(processes, files))


def _origin(item: str | os.PathLike[str]) -> str:
    """The name the frame records for a file: ``str(Path(item))``.

    A string Path would not rewrite (no ``//``, no ``.`` component, no trailing
    slash) is used as it is: a tenth of the cost of building the Path.
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


def _builder_of(origins: Sequence[str]) -> FrameBuilder:
    builder = FrameBuilder()
    for origin in origins:
        builder.add_jobs(_jobs_in_file(origin), origin)
    return builder


def _parts_of(origins: Sequence[str]) -> list[Part]:
    return _builder_of(origins).parts()


def _frame_from_parts(parts: Sequence[list[Part]]) -> pd.DataFrame:
    builder = FrameBuilder()
    for block in parts:
        builder.add_parts(block)
    return builder.frame()


def _frame_of(origins: Sequence[str]) -> pd.DataFrame:
    return _builder_of(origins).frame()

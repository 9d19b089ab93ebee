"""fio output files into the frame's rows, without pandas or pyarrow: what a parsing worker runs.

:func:`~iobench.results.fioout.parse_fio` shares a long file list with worker
processes, each a ``python -m iobench.results.fioout.reading`` started once
and kept (never a fork, nor an import of the caller's ``__main__``): a worker
reads pickled lists of file names on its standard input and answers each with
the pickled rows, or the :class:`~iobench.errors.ResultsError` of the first
file it could not read.
A worker imports this module alone: pandas and pyarrow would cost it many
times more (docs/benchmarks.md).
"""

from __future__ import annotations

import io
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

from iobench.errors import ResultsError
from iobench.results.fioout import detect
from iobench.results.fioout.joboptions import Options
from iobench.results.fioout.jobs import read_jobs
from iobench.results.fioout.jobstats import JobStats
from iobench.results.fioout.jsondoc import decode_document
from iobench.results.fioout.jsonout import read_json
from iobench.results.fioout.rows import Row, add_job_rows
from iobench.store.untrusted import FIO_TEXT, UnreadableRunFile, read_bytes, read_text


def _read_file(path: Path) -> str:
    try:
        return read_text(path, FIO_TEXT, None)
    except FileNotFoundError:
        problem = "no such file"
    except UnreadableRunFile as exc:
        problem = "is not a file" if "not a regular file" in str(exc.strerror) else str(exc.strerror)
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror}") from exc
    raise ResultsError(
        f"{path}: {problem}. To parse fio output held in a string, use "
        "parse_fio_text(text) or parse_fio(name, text=text)."
    )


def regular_file_bytes(path: str) -> bytes | None:
    """The bytes of ``path`` if it is a regular file within fio output's size cap that reads cleanly, else ``None``.

    One open, fstat and read (:func:`iobench.store.untrusted.read_bytes`: a
    FIFO is never waited on, a device never read). On ``None``,
    :func:`_read_file` gives the precise error.
    """
    try:
        return read_bytes(path, FIO_TEXT, None)
    except OSError:
        return None


def _as_text(data: bytes) -> str:
    """``data`` decoded exactly as ``Path.read_text(errors="replace")`` decodes a file."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace").read()


def jobs_in_file(origin: str) -> list[JobStats]:
    """The job records of one fio output file (any format :func:`~iobench.results.fioout.read_jobs` reads).

    Raises
    ------
    ResultsError
        The file is missing or unreadable, or holds no fio results.
    """
    data = regular_file_bytes(origin)
    if data is None:
        return read_jobs(_read_file(Path(origin)), origin=origin)
    doc = decode_document(data)  # fio's --output file: decoded straight from the bytes into records
    if doc is not None:
        return read_json(doc)
    obj = detect.whole_json(data)  # a value the records refuse (a string for a number, ...)
    if obj is not None:
        return read_json(obj)
    return read_jobs(_as_text(data), origin=origin)


def file_rows(origins: Sequence[str]) -> tuple[list[Row], list[Options | None]]:
    """The frame's rows of the files ``origins``, in order (each row's ``source`` is its file's
    name), and each row's job's options (:mod:`iobench.results.fioout.joboptions`).

    Raises
    ------
    ResultsError
        A file is missing or unreadable, or holds no fio results.
    """
    rows: list[Row] = []
    options: list[Options | None] = []
    for origin in origins:
        for job in jobs_in_file(origin):
            before = len(rows)
            add_job_rows(job, origin, rows)
            options.extend([job.options] * (len(rows) - before))
    return rows, options


def serve(answer: str) -> None:
    """A worker's whole life: requests until its input ends.

    A request is a pickled list of file names on stdin; the answer, their
    rows or the first error, is pickled into the file ``answer``, then a
    newline on stdout says it is there (:class:`iobench.system.process.Helper`).
    """
    requests, done = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            origins = pickle.load(requests)
        except EOFError:
            return
        result: tuple[list[Row], list[Options | None]] | ResultsError
        try:
            result = file_rows(origins)
        except ResultsError as exc:
            result = exc
        with open(answer, "wb") as out:
            pickle.dump(result, out, protocol=pickle.HIGHEST_PROTOCOL)
        done.write(b"\n")
        done.flush()


if __name__ == "__main__":
    serve(sys.argv[1])

"""fio's latency histogram logs, read into time × latency-bin counts: :func:`latency_maps`.

A point whose options set ``log_hist_msec`` writes ``<section>_clat_hist.<job>.log``
per job section and job (:mod:`iobench.planner.timelogs`). fio 3.33 writes one
line per window and direction (``flush_hist_samples()`` in its ``iolog.c``)::

    time_ms, ddir, bs, count_0, count_1, ..., count_{B-1}

``time_ms`` ends the window (from the job's start, or Unix time with
``log_unix_epoch=1``, as on hosts); each count is how many completions of
that window fell into that bin (the difference of fio's running histogram
since its previous line). fio's bins (``stat.h``): ``FIO_IO_U_PLAT_BITS=6``,
so below 128 ns one bin per nanosecond, then groups of 64 equal bins per
power of two — each bin at most 1/64 of its value wide; 29 groups in fio 3.33
(1,856 bins). ``log_hist_coarseness=c`` adds every ``2^c`` neighbours into
one, so a line has ``1856 / 2^c`` counts.

Reading is bounded: a log is read in blocks of at most :data:`BLOCK_BYTES`
bytes (whole lines), each parsed by numpy in one call, and its lines are added
into at most ``columns`` time columns at once — memory holds one block and the
columns × bins sums, however long the run. A point's time is counted from its
first window's start (its earliest line less one window), so on several hosts,
whose logs are in Unix time, the hosts' windows line up.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iobench.errors import ResultsError
from iobench.planner.timelogs import HIST_LOG_FILE, HIST_WINDOW_OPTION
from iobench.results.hostspan import client_hosts
from iobench.results.timeseries import job_options, run_dir_of
from iobench.store.inventory import take_inventory
from iobench.store.records import PointMeta

#: fio's ``FIO_IO_U_PLAT_BITS``: 2^6 bins per power of two.
PLAT_BITS = 6
#: How many bytes of a log are parsed at once.
BLOCK_BYTES = 16 << 20
#: The longest line read: 1,856 counts of 20 digits and their separators, with room.
MAX_LINE = 1 << 16
#: The time columns a map has at most unless asked otherwise: finer than a figure's pixels.
COLUMNS = 1500
#: The percentiles drawn over a map.
PERCENTILES = (50.0, 99.0, 99.9)
#: fio's ddir numbers.
DIRECTIONS = {"read": 0, "write": 1, "trim": 2}
_FIELDS = 3  # time, ddir, bs before the counts


def fine_edges(index: np.ndarray) -> np.ndarray:
    """The lower edge (ns) of each of fio's bins ``index``; the bin count gives the top edge.

    The inverse of fio's ``plat_val_to_idx()``: bins below ``2^(PLAT_BITS+1)``
    hold one nanosecond each; above, bin ``i`` is the ``i mod 64``-th of 64 equal
    parts of ``[2^(e+6), 2^(e+7))`` with ``e = i // 64 - 1``.
    """
    index = np.asarray(index, dtype=np.int64)
    error_bits = np.maximum((index >> PLAT_BITS) - 1, 0)
    base = np.left_shift(np.int64(1), error_bits + PLAT_BITS)
    above = base + np.left_shift(index % (1 << PLAT_BITS), error_bits)
    return np.where(index < (2 << PLAT_BITS), index, above).astype(np.float64)


def bin_edges(bins: int, coarseness: int = 0) -> np.ndarray:
    """The ``bins + 1`` edges (ns) of a histogram log's bins, each ``2^coarseness`` of fio's added."""
    return fine_edges(np.arange(bins + 1, dtype=np.int64) << coarseness)


def bin_values(bins: int, coarseness: int = 0) -> np.ndarray:
    """The latency (ns) each bin stands for: fio's ``plat_idx_to_val()``, the middle of the bin.

    The bins below 128 ns are exact (a bin is one nanosecond: its lower edge).
    """
    edges = bin_edges(bins, coarseness)
    middle = (edges[:-1] + edges[1:]) / 2.0
    return np.where(edges[1:] - edges[:-1] <= 1.0, edges[:-1], middle)


def percentiles(
    counts: np.ndarray, values: np.ndarray, wanted: tuple[float, ...] = PERCENTILES
) -> np.ndarray:
    """Each row's percentiles by fio's rule: the value of the first bin whose running count reaches p %.

    The rule of fio's ``calc_clat_percentiles()`` (and of the frame's
    ``clat_p*_us``, :func:`iobench.results.points.merged_percentiles`).

    Parameters
    ----------
    counts
        ``rows × bins``.
    values
        What each bin stands for (:func:`bin_values`).
    wanted
        Percentiles, in percent.

    Returns
    -------
    numpy.ndarray
        ``rows × len(wanted)``; NaN for a row without counts.
    """
    running = np.cumsum(counts, axis=1, dtype=np.float64)
    total = running[:, -1:]
    out = np.full((counts.shape[0], len(wanted)), np.nan)
    for column, p in enumerate(wanted):
        reached = running >= total * (p / 100.0)
        first = np.argmax(reached, axis=1)
        out[:, column] = np.where(total[:, 0] > 0, values[first], np.nan)
    return out


@dataclass(frozen=True)
class HistLog:
    """One histogram log file: whose it is."""

    path: Path
    host: str
    section: str


@dataclass
class LatencyMap:
    """One point × repeat's completion latencies over time, per host.

    Attributes
    ----------
    counts
        Per host, ``columns × bins`` completions (all its jobs, the chosen directions).
    t_edges_s
        The columns' ``columns + 1`` edges, seconds from the point's start.
    edges_ns
        The bins' ``bins + 1`` edges (:func:`bin_edges`).
    values_ns
        What each bin stands for (:func:`bin_values`), for percentiles.
    window_s
        fio's window (``log_hist_msec``); a column holds one or more.
    """

    point: int
    repeat: int
    counts: dict[str, np.ndarray]
    t_edges_s: np.ndarray
    edges_ns: np.ndarray
    values_ns: np.ndarray
    window_s: float

    def merged(self) -> np.ndarray:
        """The hosts' counts added: ``columns × bins``."""
        counts = list(self.counts.values())
        out = np.zeros_like(counts[0])
        for each in counts:
            out += each
        return out


def hist_logs(point_dir: Path, meta: PointMeta, local: str) -> list[HistLog]:
    """The point's histogram logs that hold lines; one whose fio client names no host of the point is refused."""
    clients = client_hosts(meta)
    found = []
    for name in sorted(os.listdir(point_dir)):
        match = HIST_LOG_FILE.match(name)
        # fio creates the log when the job starts; a job shorter than one window leaves it empty.
        if match is None or os.stat(point_dir / name).st_size == 0:
            continue
        client = match["client"]
        host = local if client is None else clients.get(client)
        if host is None:
            raise ResultsError(
                f"{point_dir / name}: a histogram log of fio client {client!r}, which names no one host "
                "of the point; remove it, or re-run the point"
            )
        found.append(HistLog(point_dir / name, host, match["section"]))
    return found


def _blocks(path: Path, limit: int = BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """The file in blocks of whole lines of about ``limit`` bytes, one at a time, each with its first line number.

    A line longer than :data:`MAX_LINE` (fio's longest is some 40 KB) is refused: nothing in a
    log grows a read without bound.
    """
    line = 1
    rest = b""
    with open(path, "rb", buffering=0) as file:
        while chunk := file.read(limit):
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if len(rest) > MAX_LINE:
                at = line + data.count(b"\n", 0, cut)
                raise ResultsError(
                    f"{path}:{at}: a line of over {MAX_LINE:,} bytes is no line of "
                    "fio's histogram log; remove the file, or re-run the point"
                )
            if cut:
                yield line, data[:cut]
                line += data.count(b"\n", 0, cut)
    if rest.strip():
        yield line, rest + b"\n"


def _bad_line(path: Path, first: int, data: bytes, width: int) -> ResultsError:
    for number, text in enumerate(data.split(b"\n"), start=first):
        fields = text.split(b",")
        if not text.strip():
            continue
        if len(fields) != width or not all(f.strip().isdigit() for f in fields):
            return ResultsError(
                f"{path}:{number}: not a line of fio's histogram log (time, ddir, bs and {width - _FIELDS} "
                f"counts, whole numbers): {text[:60]!r}; remove the file, or re-run the point"
            )
    return ResultsError(f"{path}:{first}: cannot read the histogram log; remove it, or re-run the point")


def parse_block(path: Path, first: int, data: bytes, width: int | None = None) -> np.ndarray:
    """A block of whole lines as ``lines × fields`` integers; a malformed line is named (file and line)."""
    data = data.replace(b"\r", b"")
    lines = data.count(b"\n")
    if width is None:
        width = data[: data.find(b"\n")].count(b",") + 1
    try:
        with warnings.catch_warnings():  # older numpy warns and stops short: the count below catches it
            warnings.simplefilter("ignore")
            flat = np.fromstring(data.replace(b"\n", b","), dtype=np.int64, sep=",")  # C speed, one pass
    except ValueError:
        raise _bad_line(path, first, data, width) from None
    if width <= _FIELDS or flat.size != lines * width or (flat.size and flat.min() < 0):
        raise _bad_line(path, first, data, width)
    return flat.reshape(lines, width)


def _ends(path: Path) -> tuple[int, int, int]:
    """The first and last time stamps of a log and its line width, from its first and last lines alone."""
    with open(path, "rb") as file:
        head = file.readline(1 << 20)
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - (1 << 20)))
        tail = file.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        return int(head.split(b",", 1)[0]), int(tail.split(b",", 1)[0]), head.count(b",") + 1
    except ValueError:
        raise ResultsError(
            f"{path}: not fio's histogram log (its first and last lines start with a time stamp in ms); "
            "remove the file, or re-run the point"
        ) from None


def point_map(
    point: int,
    repeat: int,
    logs: list[HistLog],
    *,
    window_ms: int,
    coarseness: int = 0,
    columns: int = COLUMNS,
    direction: str | None = None,
) -> LatencyMap:
    """One point × repeat's logs added into at most ``columns`` time columns.

    Parameters
    ----------
    point, repeat
        Which point × repeat (for the map's caption).
    logs
        Its histogram logs (:func:`hist_logs`).
    window_ms
        fio's ``log_hist_msec``.
    coarseness
        fio's ``log_hist_coarseness``.
    columns
        At most this many time columns; each covers a whole number of windows.
    direction
        ``read``, ``write`` or ``trim``; None adds all.

    Raises
    ------
    ResultsError
        A log is not in fio's format, its width does not fit ``coarseness``,
        or the logs disagree on their width: naming the file (and line).
    """
    ends = [_ends(log.path) for log in logs]
    widths = {width for _, _, width in ends}
    if len(widths) != 1:
        raise ResultsError(
            f"{logs[0].path.parent}: the histogram logs have lines of {sorted(widths)} fields; "
            "they come from different fio versions or options — re-run the point"
        )
    bins = widths.pop() - _FIELDS
    fine = bins << coarseness
    if bins < 1 or fine % (1 << PLAT_BITS):
        raise ResultsError(
            f"{logs[0].path}: {bins} counts a line do not fit fio's bins with log_hist_coarseness={coarseness}"
        )
    origin = min(start for start, _, _ in ends) - window_ms
    span = max(end for _, end, _ in ends) - origin
    windows = max(1, math.ceil(span / window_ms))
    per_column = math.ceil(windows / max(1, columns))
    width_ms = per_column * window_ms
    count = math.ceil(span / width_ms)
    sums: dict[str, np.ndarray] = {}
    for log in logs:
        into = sums.setdefault(log.host, np.zeros((count, bins), dtype=np.int64))
        for first, data in _blocks(log.path):
            table = parse_block(log.path, first, data, bins + _FIELDS)
            if direction is not None:
                table = table[table[:, 1] == DIRECTIONS[direction]]
            column = np.clip((table[:, 0] - origin - 1) // width_ms, 0, count - 1)
            order = np.argsort(column, kind="stable")
            starts = np.flatnonzero(np.diff(column[order], prepend=-1))
            if len(starts):
                into[column[order][starts]] += np.add.reduceat(table[order, _FIELDS:], starts, axis=0)
    return LatencyMap(
        point,
        repeat,
        sums,
        np.arange(count + 1) * (width_ms / 1000.0),
        bin_edges(bins, coarseness),
        bin_values(bins, coarseness),
        window_ms / 1000.0,
    )


@dataclass(frozen=True)
class LoggedPoint:
    """A point × repeat with histogram logs, not yet read: its logs and how fio wrote them."""

    point: int
    repeat: int
    logs: list[HistLog]
    window_ms: int
    coarseness: int

    def read(self, *, columns: int = COLUMNS, direction: str | None = None) -> LatencyMap:
        """Its logs added into at most ``columns`` time columns (:func:`point_map`)."""
        if direction is not None and direction not in DIRECTIONS:
            raise ResultsError(f"direction {direction!r}: use one of {', '.join(DIRECTIONS)}")
        return point_map(
            self.point,
            self.repeat,
            self.logs,
            window_ms=self.window_ms,
            coarseness=self.coarseness,
            columns=columns,
            direction=direction,
        )


def logged_points(run: object) -> list[LoggedPoint]:
    """Every ``ok`` point × repeat of ``run`` that wrote histogram logs (a listing; nothing is parsed).

    ``run``: a run directory (or what :func:`iobench.results.timeseries.run_dir_of` takes).
    """
    rundir = run_dir_of(run)
    local = rundir.manifest().machine.host or "local"
    found = []
    for point_dir, meta in take_inventory(rundir).readable():
        if meta.status != "ok":
            continue
        logs = hist_logs(point_dir, meta, local)
        if not logs:
            continue
        options = job_options(point_dir, meta)
        window = options.get(HIST_WINDOW_OPTION, "")
        coarse = options.get("log_hist_coarseness", "0")
        found.append(
            LoggedPoint(
                meta.point,
                meta.repeat,
                logs,
                int(window) if window.isdigit() and int(window) > 0 else 1000,
                int(coarse) if coarse.isdigit() else 0,
            )
        )
    return found


def latency_maps(run: object, *, columns: int = COLUMNS, direction: str | None = None) -> list[LatencyMap]:
    """Every ``ok`` point × repeat of ``run`` that wrote histogram logs, read (:class:`LatencyMap`).

    Parameters
    ----------
    run
        A run directory (or what :func:`iobench.results.timeseries.run_dir_of` takes).
    columns
        At most this many time columns per map.
    direction
        ``read``, ``write`` or ``trim``; None adds all directions.
    """
    return [p.read(columns=columns, direction=direction) for p in logged_points(run)]

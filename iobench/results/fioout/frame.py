"""Turn job records into the tidy frame of SPEC §6 (one row per job × direction).

Derived columns:

``cpu_us_per_io``
    CPU time (user + system) the job spent per I/O it completed, in µs::

        (usr_cpu + sys_cpu) / 100 * accounting_ms * 1000 / ios

    ``accounting_ms`` is fio's ``job_runtime`` — the time fio divided the CPU
    time by, summed over the jobs of a reporting group — when fio reports it
    (JSON from 3.x). Otherwise it is the longest direction runtime of the entry
    times the number of jobs it stands for where fio prints that (normal
    output's ``jobs=N``), else times 1. ``ios`` is the entry's completed I/Os over
    all directions (``total_ios``; where fio omits it, iops × runtime). The
    value is the same on every direction row of a job.
``inflight``
    Little's law: ``iops * lat_mean_us / 1e6``, the mean number of I/Os in flight.
``total_ios``
    fio's ``total_ios``: the I/Os the job completed in the direction (NA where
    the format does not carry it: terse and normal output).
``job_runtime_ms``
    The ``accounting_ms`` above: the time ``usr_cpu`` and ``sys_cpu`` are
    percentages of. fio sums it over the jobs of a group.

The histogram columns (:data:`FRAME_HISTOGRAMS`: ``clat_bins``, ``lat_bins``,
``slat_bins``) hold fio's json+ latency histograms as text (see
:mod:`iobench.results.fioout.bins`); NA without json+. They are what a point's exact
percentiles are computed from (:mod:`iobench.results.points`).

``usr_cpu`` and ``sys_cpu`` are NA when the accounting time is 0: fio leaves them
at 0 without measuring anything then.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
import pyarrow as pa

from iobench.results.fioout.bins import HISTOGRAMS
from iobench.results.fioout.model import PERCENTILES, DirStats, JobStats

FRAME_IDENTITY: tuple[str, ...] = ("jobname", "job_index", "groupid", "host", "direction")

FRAME_METRICS: tuple[str, ...] = (
    "iops",
    "bw_bytes",
    "io_bytes",
    "runtime_ms",
    "lat_mean_us",
    "clat_mean_us",
    "slat_mean_us",
    "clat_p50_us",
    "clat_p90_us",
    "clat_p99_us",
    "clat_p99_9_us",
    "usr_cpu",
    "sys_cpu",
    "ctx",
    "error",
    "fio_version",
    "cpu_us_per_io",
    "inflight",
    "total_ios",
    "job_runtime_ms",
)

#: fio's json+ histograms, one text cell per job × direction (:mod:`iobench.results.fioout.bins`).
FRAME_HISTOGRAMS: tuple[str, ...] = tuple(HISTOGRAMS)

_INT_COLUMNS = frozenset(
    {"job_index", "groupid", "io_bytes", "runtime_ms", "ctx", "error", "total_ios", "job_runtime_ms"}
)
_STR_COLUMNS = frozenset({"source", "jobname", "host", "direction", "fio_version", *FRAME_HISTOGRAMS})

FRAME_COLUMNS: tuple[str, ...] = ("source", *FRAME_IDENTITY, *FRAME_METRICS, *FRAME_HISTOGRAMS)

FRAME_DTYPES: dict[str, str] = {
    column: "string" if column in _STR_COLUMNS else "Int64" if column in _INT_COLUMNS else "Float64"
    for column in FRAME_COLUMNS
}


def empty_frame() -> pd.DataFrame:
    """Return a frame with every column and dtype and no rows."""
    return pd.DataFrame({c: pd.Series([], dtype=d) for c, d in FRAME_DTYPES.items()})


def _job_ios(active: Iterable[DirStats]) -> float | None:
    total = 0.0
    for ddir in active:
        if ddir.total_ios is not None:
            total += ddir.total_ios
        elif ddir.iops is not None and ddir.runtime_ms is not None:
            total += ddir.iops * ddir.runtime_ms / 1000
        else:
            return None
    return total


def _accounting_ms(job: JobStats) -> int | None:
    if job.job_runtime_ms is not None:
        return job.job_runtime_ms
    runtimes = [d.runtime_ms for d in job.directions.values() if d.runtime_ms is not None]
    if not runtimes:
        return None
    return max(runtimes) * (job.jobs or 1)


Row = tuple[Any, ...]
"""One frame row: a value (or ``None``) per column, in :data:`FRAME_COLUMNS` order."""


def _rows(job: JobStats, source: str) -> list[Row]:
    active = {name: d for name, d in job.directions.items() if d.did_io()}
    acct_ms = _accounting_ms(job)
    usr, sys_ = job.usr_cpu, job.sys_cpu
    if not acct_ms:
        usr = sys_ = None
    ios = _job_ios(active.values())
    cpu_per_io = None
    if usr is not None and sys_ is not None and acct_ms and ios:
        cpu_per_io = (usr + sys_) / 100 * acct_ms * 1000 / ios
    head = (source, job.jobname, job.job_index, job.groupid, job.host)
    tail = (usr, sys_, job.ctx, job.error, job.fio_version, cpu_per_io)
    if not active:
        return [(*head, None, *_NO_IO, *tail, None, None, acct_ms, None, None, None)]
    rows = []
    for name, ddir in active.items():
        inflight = None
        if ddir.iops is not None and ddir.lat_mean_us is not None:
            inflight = ddir.iops * ddir.lat_mean_us / 1e6
        pct = ddir.clat_pct_us
        rows.append(
            (
                *head,
                name,
                ddir.iops,
                ddir.bw_bytes,
                ddir.io_bytes,
                ddir.runtime_ms,
                ddir.lat_mean_us,
                ddir.clat_mean_us,
                ddir.slat_mean_us,
                *map(pct.get, _PERCENTILE_KEYS),
                *tail,
                inflight,
                ddir.total_ios,
                acct_ms,
                ddir.clat_bins,
                ddir.lat_bins,
                ddir.slat_bins,
            )
        )
    return rows


_PERCENTILE_KEYS = tuple(PERCENTILES)  # in the order of their columns
# The direction's columns of a job that did no I/O: iops to clat_p99_9_us.
_NO_IO = (None,) * (FRAME_COLUMNS.index("usr_cpu") - FRAME_COLUMNS.index("iops"))


def job_rows(jobs: Iterable[JobStats], source: str) -> list[Row]:
    """Return the frame's rows for one fio output's job records.

    :class:`FrameBuilder` turns rows into the frame; :func:`~iobench.results.fioout.parse_fio`
    collects the rows of many files and builds one frame at the end.
    """
    return [row for job in jobs for row in _rows(job, source)]


class FrameBuilder:
    """Collect rows column by column and build the tidy frame from them.

    Rows wait in a short buffer and move into the columns in batches: cheaper
    than appending value by value, and a many-file parse holds columns (one
    pointer per value), not a tuple per row.
    """

    _BATCH = 4096

    def __init__(self) -> None:
        self._columns: list[list[Any]] = [[] for _ in FRAME_COLUMNS]
        self._rows: list[Row] = []

    def add(self, rows: Iterable[Row]) -> None:
        """Append rows made by :func:`job_rows`."""
        self._rows.extend(rows)
        if len(self._rows) >= self._BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            for column, values in zip(self._columns, zip(*self._rows, strict=True), strict=True):
                column.extend(values)
            self._rows.clear()

    def frame(self) -> pd.DataFrame:
        """The tidy frame of every row added."""
        self._flush()
        return columns_to_frame(self._columns)


# Float and string columns convert 3x faster (or more) through pyarrow than with
# pandas' own list conversion, to the same arrays; integers stay with pandas,
# which keeps every digit of a large value.
_ARROW_TYPES = {"Float64": pa.float64(), "string": pa.large_string()}


def _column(values: list[Any], dtype: str) -> pd.Series:
    arrow_type = _ARROW_TYPES.get(dtype)
    if arrow_type is not None:
        try:
            # from_pandas: NaN is NA, as in pandas' conversion.
            return pd.Series(pd.array(pa.array(values, type=arrow_type, from_pandas=True), dtype=dtype))
        except pa.ArrowException:
            pass  # a value pyarrow will not convert exactly: pandas decides (or raises)
    return pd.Series(values, dtype=dtype)


def columns_to_frame(columns: list[list[Any]]) -> pd.DataFrame:
    """Build the tidy frame from value lists in :data:`FRAME_COLUMNS` order."""
    if not columns[0]:
        return empty_frame()
    return pd.DataFrame(
        {
            column: _column(values, FRAME_DTYPES[column])
            for column, values in zip(FRAME_COLUMNS, columns, strict=True)
        }
    )


def to_frame(jobs: Iterable[JobStats], source: str) -> pd.DataFrame:
    """Build the tidy frame from job records.

    Parameters
    ----------
    jobs : iterable of JobStats
        Records from one fio output, in fio's order.
    source : str
        Where they came from; fills the ``source`` column.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`FRAME_COLUMNS` with dtypes :data:`FRAME_DTYPES`; NA where
        fio did not report a value.
    """
    builder = FrameBuilder()
    builder.add(job_rows(jobs, source))
    return builder.frame()

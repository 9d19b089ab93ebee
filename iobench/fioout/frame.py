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

``usr_cpu`` and ``sys_cpu`` are NA when the accounting time is 0: fio leaves them
at 0 without measuring anything then.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from iobench.fioout.model import PERCENTILES, DirStats, JobStats

FRAME_IDENTITY: tuple[str, ...] = ("jobname", "job_index", "host", "direction")

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
)

_INT_COLUMNS = frozenset({"job_index", "io_bytes", "runtime_ms", "ctx", "error"})
_STR_COLUMNS = frozenset({"source", "jobname", "host", "direction", "fio_version"})

FRAME_COLUMNS: tuple[str, ...] = ("source", *FRAME_IDENTITY, *FRAME_METRICS)

FRAME_DTYPES: dict[str, str] = {
    column: "string" if column in _STR_COLUMNS else "Int64" if column in _INT_COLUMNS else "Float64"
    for column in FRAME_COLUMNS
}


def empty_frame() -> pd.DataFrame:
    """Return a frame with every column and dtype and no rows."""
    return pd.DataFrame({c: pd.Series([], dtype=d) for c, d in FRAME_DTYPES.items()})


def _job_ios(job: JobStats, active: list[DirStats]) -> float | None:
    total = 0.0
    for ddir in active:
        if ddir.total_ios is not None:
            total += ddir.total_ios
        elif ddir.iops is not None and ddir.runtime_ms is not None:
            total += ddir.iops * ddir.runtime_ms / 1000
        else:
            return None
    return total


def _accounting_ms(job: JobStats, active: list[DirStats]) -> int | None:
    if job.job_runtime_ms is not None:
        return job.job_runtime_ms
    runtimes = [d.runtime_ms for d in job.directions.values() if d.runtime_ms is not None]
    if not runtimes:
        return None
    return max(runtimes) * (job.jobs or 1)


def _rows(job: JobStats, source: str) -> list[dict[str, Any]]:
    active = {name: d for name, d in job.directions.items() if d.did_io()}
    acct_ms = _accounting_ms(job, list(active.values()))
    usr, sys_ = job.usr_cpu, job.sys_cpu
    if not acct_ms:
        usr = sys_ = None
    ios = _job_ios(job, list(active.values()))
    cpu_per_io = None
    if usr is not None and sys_ is not None and acct_ms and ios:
        cpu_per_io = (usr + sys_) / 100 * acct_ms * 1000 / ios
    common: dict[str, Any] = {
        "source": source,
        "jobname": job.jobname,
        "job_index": job.job_index,
        "host": job.host,
        "usr_cpu": usr,
        "sys_cpu": sys_,
        "ctx": job.ctx,
        "error": job.error,
        "fio_version": job.fio_version,
        "cpu_us_per_io": cpu_per_io,
    }
    if not active:
        return [dict(common, direction=None)]
    rows = []
    for name, ddir in active.items():
        row = dict(
            common,
            direction=name,
            iops=ddir.iops,
            bw_bytes=ddir.bw_bytes,
            io_bytes=ddir.io_bytes,
            runtime_ms=ddir.runtime_ms,
            lat_mean_us=ddir.lat_mean_us,
            clat_mean_us=ddir.clat_mean_us,
            slat_mean_us=ddir.slat_mean_us,
        )
        for pct, column in PERCENTILES.items():
            row[column] = ddir.clat_pct_us.get(pct)
        if ddir.iops is not None and ddir.lat_mean_us is not None:
            row["inflight"] = ddir.iops * ddir.lat_mean_us / 1e6
        rows.append(row)
    return rows


def job_rows(jobs: Iterable[JobStats], source: str) -> list[dict[str, Any]]:
    """Return the frame's rows for one fio output's job records, as dicts.

    :func:`to_frame` turns them into the frame; :func:`~iobench.fioout.parse_fio`
    collects the rows of many files and builds one frame at the end.
    """
    return [row for job in jobs for row in _rows(job, source)]


def new_columns() -> dict[str, list[Any]]:
    """Return one empty list per frame column, for :func:`add_rows` and :func:`columns_to_frame`."""
    return {column: [] for column in FRAME_DTYPES}


def add_rows(columns: dict[str, list[Any]], rows: list[dict[str, Any]]) -> None:
    """Append rows made by :func:`job_rows` to ``columns`` (``None`` where a row lacks a column).

    Holding values by column rather than the row dicts keeps a many-file parse
    to a fraction of the memory.
    """
    for column, values in columns.items():
        values.extend([row.get(column) for row in rows])


def columns_to_frame(columns: dict[str, list[Any]]) -> pd.DataFrame:
    """Build the tidy frame from columns filled by :func:`add_rows` (any number of outputs)."""
    if not columns["source"]:
        return empty_frame()
    return pd.DataFrame(
        {column: pd.Series(columns[column], dtype=dtype) for column, dtype in FRAME_DTYPES.items()}
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
    columns = new_columns()
    add_rows(columns, job_rows(jobs, source))
    return columns_to_frame(columns)

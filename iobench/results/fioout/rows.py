"""Job records into the tidy frame's rows and columns (one row per job × direction); no pandas.

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

from iobench.results.fioout.bins import HISTOGRAMS
from iobench.results.fioout.jobstats import PERCENTILES, JobStats

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


def _accounting_ms(job: JobStats) -> int | None:
    if job.job_runtime_ms is not None:
        return job.job_runtime_ms
    runtimes = [d.runtime_ms for d in job.directions.values() if d.runtime_ms is not None]
    if not runtimes:
        return None
    return max(runtimes) * (job.jobs or 1)


Row = tuple[Any, ...]
"""One frame row: a value (or ``None``) per column, in :data:`FRAME_COLUMNS` order."""

# The percentile columns' keys in DirStats.clat_pct_us, in column order.
_P1, _P2, _P3, _P4 = PERCENTILES
# The direction's columns of a job that did no I/O: iops to clat_p99_9_us.
_NO_IO = (None,) * (FRAME_COLUMNS.index("usr_cpu") - FRAME_COLUMNS.index("iops"))


def add_job_rows(job: JobStats, source: str, out: list[Row]) -> None:
    """Append ``job``'s rows to ``out``: one per direction that did I/O, else one without a direction."""
    active = [
        (name, d) for name, d in job.directions.items() if d.io_bytes or d.total_ios
    ]  # moved data or completed I/O
    acct_ms = _accounting_ms(job)
    usr, sys_ = job.usr_cpu, job.sys_cpu
    if not acct_ms:
        usr = sys_ = None
    # The job's completed I/Os over all directions, where every one of them says.
    ios, known = 0.0, True
    for _, ddir in active:
        if ddir.total_ios is not None:
            ios += ddir.total_ios
        elif ddir.iops is not None and ddir.runtime_ms is not None:
            ios += ddir.iops * ddir.runtime_ms / 1000
        else:
            known = False
            break
    cpu_per_io = None
    if usr is not None and sys_ is not None and acct_ms and known and ios:
        cpu_per_io = (usr + sys_) / 100 * acct_ms * 1000 / ios
    if not active:
        head = (source, job.jobname, job.job_index, job.groupid, job.host, None)
        tail = (
            usr,
            sys_,
            job.ctx,
            job.error,
            job.fio_version,
            cpu_per_io,
            None,
            None,
            acct_ms,
            None,
            None,
            None,
        )
        out.append(head + _NO_IO + tail)
        return
    for name, ddir in active:
        iops = ddir.iops
        lat_mean = ddir.lat_mean_us
        pct = ddir.clat_pct_us
        # A tuple display, in FRAME_COLUMNS order: no intermediate tuples to unpack.
        out.append(
            (
                source,
                job.jobname,
                job.job_index,
                job.groupid,
                job.host,
                name,
                iops,
                ddir.bw_bytes,
                ddir.io_bytes,
                ddir.runtime_ms,
                lat_mean,
                ddir.clat_mean_us,
                ddir.slat_mean_us,
                pct.get(_P1),
                pct.get(_P2),
                pct.get(_P3),
                pct.get(_P4),
                usr,
                sys_,
                job.ctx,
                job.error,
                job.fio_version,
                cpu_per_io,
                None if iops is None or lat_mean is None else iops * lat_mean / 1e6,  # inflight
                ddir.total_ios,
                acct_ms,
                ddir.clat_bins,
                ddir.lat_bins,
                ddir.slat_bins,
            )
        )


def job_rows(jobs: Iterable[JobStats], source: str) -> list[Row]:
    """Return the frame's rows for one fio output's job records.

    :class:`FrameBuilder` turns rows into the frame; :func:`~iobench.results.fioout.parse_fio`
    collects the rows of many files and builds one frame at the end.
    """
    rows: list[Row] = []
    for job in jobs:
        add_job_rows(job, source, rows)
    return rows

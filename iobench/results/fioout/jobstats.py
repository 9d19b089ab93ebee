"""The format-neutral record every fio output reader produces.

Readers (JSON, terse, normal) convert fio's units into the ones used here —
microseconds, bytes, bytes per second, milliseconds — and leave a field ``None``
where fio did not measure it. :mod:`iobench.results.fioout.frame` turns the records into
the tidy frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DIRECTIONS: tuple[str, ...] = ("read", "write", "trim")

#: The clat percentiles the frame keeps, as fio keys them, and their column names.
PERCENTILES: dict[float, str] = {
    50.0: "clat_p50_us",
    90.0: "clat_p90_us",
    99.0: "clat_p99_us",
    99.9: "clat_p99_9_us",
}


@dataclass(slots=True)
class DirStats:
    """One I/O direction of one job, in the frame's units."""

    iops: float | None = None
    bw_bytes: float | None = None
    io_bytes: int | None = None
    runtime_ms: int | None = None
    total_ios: int | None = None
    lat_mean_us: float | None = None
    clat_mean_us: float | None = None
    slat_mean_us: float | None = None
    clat_pct_us: dict[float, float] = field(default_factory=dict)
    #: fio's json+ histograms (``clat_ns.bins``, ``lat_ns.bins``, ``slat_ns.bins``) in the
    #: frame's text form, ``"<ns>:<count>,..."`` (see :mod:`iobench.results.fioout.bins`); ``None``
    #: where fio wrote none (plain JSON, terse, normal output, percentiles switched off).
    clat_bins: str | None = None
    lat_bins: str | None = None
    slat_bins: str | None = None


@dataclass(slots=True)
class JobStats:
    """One entry of fio's job list (a job, a reporting group or a client's job)."""

    jobname: str
    job_index: int
    host: str | None = None
    error: int | None = None
    usr_cpu: float | None = None
    sys_cpu: float | None = None
    ctx: int | None = None
    #: CPU-accounting time: fio's ``job_runtime`` (summed over a group's jobs)
    #: when reported, else ``None`` and the frame falls back to the directions.
    job_runtime_ms: int | None = None
    #: How many jobs the entry stands for, when fio says (``jobs=N`` in normal output).
    jobs: int | None = None
    fio_version: str | None = None
    directions: dict[str, DirStats] = field(default_factory=dict)
    #: fio's reporting group (``groupid``): jobs of one group ran together; a
    #: job file with ``stonewall``/``new_group`` has several, one after another.
    groupid: int | None = None
    #: The job's options a parsed frame lifts into columns (:mod:`iobench.results.fioout.joboptions`);
    #: ``None`` where the output does not carry them.
    options: tuple[Any, ...] | None = None

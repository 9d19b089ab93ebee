"""Read fio's terse (``--minimal``, ``--output-format=terse``) output, versions 2 to 5.

Field layout (fio's HOWTO, "Terse output"): version; fio version (v3+);
jobname; groupid; error; then per direction — read, write, and trim except in
v3 — KiB, KiB/s, IOPS, runtime ms, slat min/max/mean/stdev, clat
min/max/mean/stdev, 20 clat percentiles (``99.900000%=123``), lat
min/max/mean/stdev, bw min/max/agg%/mean/stdev, plus in v5 bw samples and IOPS
min/max/mean/stdev/samples; then CPU usr%; sys%; context switches. Latencies are
in µs. Terse output carries no sample counts, so a latency whose min, max and
mean are all 0 counts as not measured.
"""

from __future__ import annotations

import re

from iobench.errors import ResultsError
from iobench.results.fioout.jobstats import DirStats, JobStats

_HOST_PREFIX = re.compile(r"^<([^>]*)>\s*")


def _float(field: str) -> float | None:
    try:
        return float(field.rstrip("%"))
    except ValueError:
        return None


def _latency(fields: list[str]) -> float | None:
    low, high, mean = (_float(f) for f in fields[:3])
    if not (low or high or mean):
        return None
    return mean


def _direction(fields: list[str]) -> DirStats:
    kib, bw_kib, iops, runtime = (_float(f) for f in fields[:4])
    clat = _latency(fields[8:12])
    percentiles: dict[float, float] = {}
    if clat is not None:
        for item in fields[12:32]:
            pct, _, value = item.partition("%=")
            p, v = _float(pct), _float(value)
            if p and v is not None:
                percentiles[round(p, 6)] = v
    return DirStats(
        iops=iops,
        bw_bytes=None if bw_kib is None else bw_kib * 1024,
        io_bytes=None if kib is None else int(kib * 1024),
        runtime_ms=None if runtime is None else int(runtime),
        slat_mean_us=_latency(fields[4:8]),
        clat_mean_us=clat,
        clat_pct_us=percentiles,
        lat_mean_us=_latency(fields[32:36]),
    )


def _read_line(line: str, index: int, origin: str) -> JobStats:
    host = None
    prefix = _HOST_PREFIX.match(line)
    if prefix:
        host, line = prefix.group(1), line[prefix.end() :]
    fields = line.split(";")
    version = int(fields[0])
    if version >= 3:
        fio_version: str | None = fields[1]
        head = fields[2:5]
        pos = 5
    else:
        fio_version, head, pos = None, fields[1:4], 4
    names = ("read", "write") if version == 3 else ("read", "write", "trim")
    width = 47 if version >= 5 else 41
    needed = pos + width * len(names) + 3
    if len(fields) < needed:
        raise ResultsError(
            f"{origin}: terse v{version} line {index + 1} has {len(fields)} fields, "
            f"expected at least {needed}"
        )
    directions = {}
    for name in names:
        directions[name] = _direction(fields[pos : pos + width])
        pos += width
    usr, sys_, ctx = _float(fields[pos]), _float(fields[pos + 1]), _float(fields[pos + 2])
    try:
        error: int | None = int(head[2])
    except ValueError:
        error = None
    groupid = int(head[1]) if head[1].isdigit() else None
    return JobStats(
        jobname=head[0],
        job_index=index,
        host=host,
        error=error,
        usr_cpu=usr,
        sys_cpu=sys_,
        ctx=None if ctx is None else int(ctx),
        fio_version=fio_version,
        directions=directions,
        groupid=groupid,
    )


def read_terse(lines: list[str], *, origin: str = "<text>") -> list[JobStats]:
    """Convert terse result lines into job records.

    Parameters
    ----------
    lines : list of str
        The result lines (see :func:`iobench.results.fioout.detect.terse_lines`), one per
        job or reporting group, optionally prefixed ``<host>`` in client mode.
    origin : str
        Name used in error messages.

    Returns
    -------
    list of JobStats
        One record per line; ``job_index`` is the line's position.

    Raises
    ------
    ResultsError
        A line is shorter than its terse version requires.
    """
    return [_read_line(line, index, origin) for index, line in enumerate(lines)]

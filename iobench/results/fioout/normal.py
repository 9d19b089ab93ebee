"""Read fio's human-readable ("normal") output, fio 2.x and 3.x layouts.

A job report starts ``<name>: (groupid=G, jobs=N): err= E: ...`` and has, per
direction, a summary line — 3.x ``read: IOPS=11.9k, BW=46.3MiB/s (48.6MB/s)(463MiB/10001msec)``,
2.x ``read : io=29854MB, bw=254727KB/s, iops=63647, runt=120014msec`` (KB = KiB) —
then ``slat``/``clat``/``lat (<unit>): min=, max=, avg=, stdev=`` lines with
their unit in brackets (values may carry a ``K`` suffix: thousands of that unit),
``clat percentiles (<unit>):`` blocks, and a ``cpu`` line. Completed I/O counts
come from the ``issued`` line (``total=r,w,t,x`` in 3.x, ``total=r=/w=/d=`` in
2.x). Figures are as rounded as fio printed them (IOPS and bandwidth to three
significant digits in 3.x).
"""

from __future__ import annotations

import re

from iobench.errors import ResultsError
from iobench.results.fioout import textnumbers
from iobench.results.fioout.jobstats import DirStats, JobStats

_HOST = r"(?:<(?P<host>[^>]*)>\s*)?"
_HEADER = re.compile(
    r"^" + _HOST + r"(?P<name>.*?): \(groupid=(?P<group>\d+), jobs=(?P<jobs>\d+)\): err=\s*(?P<err>-?\d+)",
    re.MULTILINE,
)
_DIRECTION = re.compile(r"^(?:<[^>]*>)?\s*(?P<ddir>read|write|trim)\s*:\s*(?P<rest>.*)$")
_LATENCY = re.compile(
    r"^(?:<[^>]*>)?\s*(?P<kind>[cs]?lat)\s*\((?P<unit>[a-z]+)\)\s*:\s*min=\s*(?P<min>\S+?),"
    r"\s*max=\s*(?P<max>\S+?),\s*avg=\s*(?P<avg>\S+?),"
)
_PCT_HEADER = re.compile(r"^(?:<[^>]*>)?\s*clat percentiles \((?P<unit>[a-z]+)\):")
_PCT_ITEM = re.compile(r"(\d+\.\d+)th=\[\s*([^\]]+?)\s*\]")
_CPU = re.compile(r"^(?:<[^>]*>)?\s*cpu\s*:\s*usr=([\d.]+)%,\s*sys=([\d.]+)%,\s*ctx=(\d+)")
_ISSUED = re.compile(r"^(?:<[^>]*>)?\s*issued[^:]*:\s*total=(?P<total>\S+)")
_VERSION = re.compile(r"^(?:<[^>]*>\s*)?(fio-\d+\.\d+\S*)\s*$", re.MULTILINE)
_END = re.compile(r"^(?:<[^>]*>)?\s*Run status group", re.MULTILINE)

_KEY_3X = {"IOPS": "iops", "BW": "bw"}
_DDIR_ORDER = ("read", "write", "trim")


def _summary(rest: str) -> DirStats:
    stats = DirStats()
    fields = dict(re.findall(r"(\w+)=\s*([^,\s(]+)", rest))
    if "IOPS" in fields:  # 3.x
        stats.iops = textnumbers.decimal(fields["IOPS"])
        stats.bw_bytes = textnumbers.binary_bytes(fields["BW"]) if "BW" in fields else None
        tail = re.search(r"\)\s*\(([^/()]+)/(\d+)msec\)", rest)
        if tail:
            io = textnumbers.binary_bytes(tail.group(1))
            stats.io_bytes = None if io is None else round(io)
            stats.runtime_ms = int(tail.group(2))
    else:  # 2.x
        stats.iops = textnumbers.decimal(fields["iops"]) if "iops" in fields else None
        stats.bw_bytes = textnumbers.binary_bytes(fields["bw"]) if "bw" in fields else None
        io = textnumbers.binary_bytes(fields["io"]) if "io" in fields else None
        stats.io_bytes = None if io is None else round(io)
        runt = re.search(r"runt=\s*(\d+)msec", rest)
        stats.runtime_ms = int(runt.group(1)) if runt else None
    return stats


def _issued(total: str) -> dict[str, int]:
    if "=" in total:  # 2.x: r=1/w=2/d=0 (d: discard, i.e. trim)
        pairs = dict(item.split("=", 1) for item in total.rstrip(",").split("/"))
        names = {"r": "read", "w": "write", "d": "trim", "t": "trim"}
        return {names[k]: int(v) for k, v in pairs.items() if k in names and v.isdigit()}
    counts = [int(v) for v in total.rstrip(",").split(",") if v.isdigit()]
    return dict(zip(_DDIR_ORDER, counts, strict=False))


def _read_block(block: str, stats: JobStats) -> None:
    current: DirStats | None = None
    pct_scale: float | None = None
    for line in block.splitlines()[1:]:
        if pct_scale is not None and current is not None and "|" in line:
            for pct, value in _PCT_ITEM.findall(line):
                number = textnumbers.decimal(value)
                if number is not None:
                    current.clat_pct_us[round(float(pct), 6)] = number * pct_scale
            continue
        pct_scale = None
        if m := _DIRECTION.match(line):
            current = _summary(m.group("rest"))
            stats.directions[m.group("ddir")] = current
        elif (m := _LATENCY.match(line)) and current is not None:
            scale = textnumbers.TIME_TO_US.get(m.group("unit"))
            low, high, avg = (textnumbers.decimal(m.group(k)) for k in ("min", "max", "avg"))
            if scale is None or avg is None or not (low or high or avg):
                continue
            setattr(current, f"{m.group('kind')}_mean_us", avg * scale)
        elif (m := _PCT_HEADER.match(line)) and current is not None:
            pct_scale = textnumbers.TIME_TO_US.get(m.group("unit"))
        elif m := _CPU.match(line):
            stats.usr_cpu, stats.sys_cpu = float(m.group(1)), float(m.group(2))
            stats.ctx = int(m.group(3))
            current = None
        elif m := _ISSUED.match(line):
            for name, count in _issued(m.group("total")).items():
                if name in stats.directions:
                    stats.directions[name].total_ios = count


def read_normal(text: str, *, origin: str = "<text>") -> list[JobStats]:
    """Convert normal-format job reports into job records.

    Parameters
    ----------
    text : str
        fio's normal output, with anything around it.
    origin : str
        Name used in error messages.

    Returns
    -------
    list of JobStats
        One record per job report, in order; ``job_index`` is its position and
        ``jobs`` the ``jobs=N`` fio printed (used for CPU time per I/O).

    Raises
    ------
    ResultsError
        No job report was found.
    """
    headers = list(_HEADER.finditer(text))
    if not headers:
        raise ResultsError(f"{origin}: no normal-format job report found")
    version = _VERSION.search(text)
    records = []
    for index, header in enumerate(headers):
        stop = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        end = _END.search(text, header.end(), stop)
        block = text[header.start() : end.start() if end else stop]
        stats = JobStats(
            jobname=header.group("name").strip(),
            job_index=index,
            host=header.group("host"),
            error=int(header.group("err")),
            jobs=int(header.group("jobs")),
            groupid=int(header.group("group")),
            fio_version=version.group(1) if version else None,
        )
        _read_block(block, stats)
        records.append(stats)
    return records

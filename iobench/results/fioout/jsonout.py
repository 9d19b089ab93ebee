"""Read fio's JSON and json+ output (fio 2.x and 3.x, local and client/server).

Unit rules, by fio version:

- latencies: ``lat_ns``/``clat_ns``/``slat_ns`` in ns (3.x), ``lat``/``clat``/``slat``
  in µs (2.x);
- bandwidth: ``bw_bytes`` in B/s where present (3.x), else ``bw`` in KiB/s;
- volume: ``io_bytes`` is bytes when ``io_kbytes`` sits beside it (3.x); without
  ``io_kbytes`` (2.x) fio wrote KiB under the name ``io_bytes``.

A latency whose sample count ``N`` is 0 — or, where fio omits ``N``, whose min,
max and mean are all 0 — was not measured (``gtod_reduce``, engines without
submission latency, directions without I/O) and becomes ``None``.

json+ adds each latency's histogram (``bins``), kept per job and direction in
the frame's ``clat_bins``/``lat_bins``/``slat_bins`` (:mod:`iobench.results.fioout.bins`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from msgspec import UNSET

from iobench.results.fioout.bins import encode
from iobench.results.fioout.joboptions import lift
from iobench.results.fioout.jobstats import PERCENTILES, DirStats, JobStats
from iobench.results.fioout.jsondoc import Direction, FioDoc, Job, Latency, to_document

ALL_CLIENTS = "All clients"


def _pct_key(key: object) -> float | None:
    """fio's percentile key (``"99.900000"``) as the frame's float, or ``None``."""
    if not isinstance(key, str):
        return None
    try:
        return round(float(key), 6)
    except ValueError:
        return None


@functools.lru_cache(maxsize=256)
def _pct_plan(keys: tuple[str, ...]) -> tuple[tuple[float, tuple[str, ...]], ...]:
    """For a ``percentile`` object's keys: each kept percentile and the keys naming it, last first.

    fio writes the same keys in every job (its ``percentile_list``), so the plan
    is worked out once per key list instead of converting 17 keys per direction.
    """
    named: dict[float, list[str]] = {}
    for key in keys:
        pct = _pct_key(key)
        if pct in PERCENTILES:  # the frame keeps p50, p90, p99 and p99.9
            named.setdefault(pct, []).append(key)
    return tuple((pct, tuple(reversed(names))) for pct, names in named.items())


def _measured(lat: Latency | None) -> Latency | None:
    """``lat`` if fio measured it: ``N`` above 0 or, without ``N`` (2.x), a min, max or mean."""
    if lat is None:
        return None
    if lat.N is not UNSET:
        return lat if lat.N else None
    return lat if (lat.min or lat.max or lat.mean) else None


def _bins(lat: Latency, scale: float) -> str | None:
    return None if lat.bins is None else encode(lat.bins, scale)


def _percentiles(percentiles: dict[str, float | None], scale: float) -> dict[float, float]:
    out: dict[float, float] = {}
    for pct, keys in _pct_plan(tuple(percentiles)):
        # Where two keys name one percentile, the last one with a number wins.
        for key in keys:
            number = percentiles[key]
            if number is not None:
                out[pct] = number * scale
                break
    return out


_IDLE = DirStats(io_bytes=0, total_ios=0)


def read_direction(section: Direction) -> DirStats:
    """Convert one ``read``/``write``/``trim``/``mixed`` object of a JSON job.

    Parameters
    ----------
    section : Direction
        The direction's record (:mod:`iobench.results.fioout.jsondoc`).

    Returns
    -------
    DirStats
        The direction in µs, bytes and bytes per second.
    """
    io_bytes = section.io_bytes
    if not (io_bytes or section.total_ios or section.io_kbytes):
        return _IDLE  # read_json skips the call for these
    bw_bytes = section.bw_bytes
    if bw_bytes is None and section.bw is not None:
        bw_bytes = section.bw * 1024
    if io_bytes is not None and section.io_kbytes is UNSET:
        io_bytes *= 1024  # fio 2.x: KiB under the name io_bytes
    # fio 3.x: *_ns in ns; without them fio 2.x's names, in µs.
    clat, scale = section.clat_ns, 1e-3
    if clat is None:
        clat, scale = section.clat, 1.0
    clat = _measured(clat)
    clat_mean = clat_pct = clat_bins = None
    if clat is not None:
        clat_mean = None if clat.mean is None else clat.mean * scale
        clat_pct = None if clat.percentile is None else _percentiles(clat.percentile, scale)
        clat_bins = _bins(clat, scale)
    lat, scale = section.lat_ns, 1e-3
    if lat is None:
        lat, scale = section.lat, 1.0
    lat = _measured(lat)
    lat_mean = lat_bins = None
    if lat is not None:
        lat_mean = None if lat.mean is None else lat.mean * scale
        lat_bins = _bins(lat, scale)
    slat, scale = section.slat_ns, 1e-3
    if slat is None:
        slat, scale = section.slat, 1.0
    slat = _measured(slat)
    slat_mean = slat_bins = None
    if slat is not None:
        slat_mean = None if slat.mean is None else slat.mean * scale
        slat_bins = _bins(slat, scale)
    # Positional, in field order: matching keywords would cost more than the conversions.
    return DirStats(
        section.iops,
        bw_bytes,
        io_bytes,
        section.runtime,
        section.total_ios,
        lat_mean,
        clat_mean,
        slat_mean,
        clat_pct or {},
        clat_bins,
        lat_bins,
        slat_bins,
    )


def _hosts(entries: list[Job]) -> list[str | None]:
    """Name each client entry's host; add ``:port`` only where a name is ambiguous."""
    ports: dict[str, set[Any]] = {}
    for entry in entries:
        if entry.hostname is not UNSET:
            ports.setdefault(str(entry.hostname), set()).add(entry.port)
    names: list[str | None] = []
    for entry in entries:
        if entry.hostname is UNSET:
            names.append(None)
            continue
        host = str(entry.hostname)
        if len(ports[host]) > 1 and entry.port is not None:
            host = f"{host}:{entry.port}"
        names.append(host)
    return names


def read_json(doc: FioDoc | Mapping[str, Any]) -> list[JobStats]:
    """Convert a fio JSON document into job records.

    Parameters
    ----------
    doc : FioDoc or mapping
        The document's records (:func:`~iobench.results.fioout.jsondoc.decode_document`),
        or the document as a JSON decoder returned it, with a ``jobs`` list or
        (client/server) ``client_stats``; converted by
        :func:`~iobench.results.fioout.jsondoc.to_document`.

    Returns
    -------
    list of JobStats
        One record per entry, in fio's order; ``job_index`` is the entry's
        position in fio's array. The client/server ``All clients`` aggregate is
        left out.
    """
    if not isinstance(doc, FioDoc):
        doc = to_document(doc)
    client = doc.client_stats is not None
    entries = doc.client_stats if doc.client_stats is not None else doc.jobs
    version = doc.fio_version
    hosts = _hosts(entries) if client else None
    records: list[JobStats] = []
    for index, entry in enumerate(entries):
        name = entry.jobname
        options = entry.job_options
        full = None if options is None else options.name
        # fio truncates long jobnames; "job options" keeps the name as given.
        if isinstance(full, str) and len(full) > len(name) and full.startswith(name):
            name = full
        if client and name == ALL_CLIENTS:
            continue
        directions = {}
        for ddir, section in (
            ("read", entry.read),
            ("write", entry.write),
            ("trim", entry.trim),
            ("mixed", entry.mixed),
        ):
            if section is not None:
                # fio writes every direction of every job; most did nothing and never reach the frame.
                idle = not (section.io_bytes or section.total_ios or section.io_kbytes)
                directions[ddir] = _IDLE if idle else read_direction(section)
        records.append(
            JobStats(  # positional, in field order (see read_direction)
                name,
                index,
                None if hosts is None else hosts[index],
                entry.error,
                entry.usr_cpu,
                entry.sys_cpu,
                entry.ctx,
                entry.job_runtime,
                None,  # jobs: JSON has one entry per job or per reporting group
                version,
                directions,
                entry.groupid,
                lift(doc.global_options, options),
            )
        )
    return records

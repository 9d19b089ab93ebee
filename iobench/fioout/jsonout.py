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
"""

from __future__ import annotations

import functools
from typing import Any

from iobench.fioout.model import PERCENTILES, DirStats, JobStats

ALL_CLIENTS = "All clients"
# Directions as fio names them in JSON; "mixed" appears with unified_rw_reporting.
_JSON_DIRECTIONS = ("read", "write", "trim", "mixed")


def _num(value: Any) -> float | None:
    # Exact types first: json only makes int and float, and this runs ~200 times a file.
    kind = type(value)
    if kind is float:
        return value  # type: ignore[no-any-return]
    if kind is int:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    number = _num(value)
    return None if number is None else int(number)


@functools.lru_cache(maxsize=1024)
def _pct_key(key: str) -> float | None:
    """fio's percentile key (``"99.900000"``) as the frame's float, or ``None``; cached, keys repeat."""
    try:
        return round(float(key), 6)
    except ValueError:
        return None


_NS_KEYS = {"lat": "lat_ns", "clat": "clat_ns", "slat": "slat_ns"}


def _latency(section: dict[str, Any], name: str) -> tuple[dict[str, Any] | None, float]:
    """Return fio's measured latency object for ``name`` (else ``None``) and the factor that makes it µs."""
    lat = section.get(_NS_KEYS[name])
    if isinstance(lat, dict):
        scale = 1e-3
    else:
        lat = section.get(name)
        scale = 1.0
        if not isinstance(lat, dict):
            return None, scale
    if "N" in lat:
        measured = bool(_int(lat["N"]))
    else:
        measured = any(_num(lat.get(key)) for key in ("min", "max", "mean"))
    return (lat, scale) if measured else (None, scale)


def _mean_us(lat: dict[str, Any] | None, scale: float) -> float | None:
    if lat is None:
        return None
    mean = _num(lat.get("mean"))
    return None if mean is None else mean * scale


def _percentiles_us(lat: dict[str, Any] | None, scale: float) -> dict[float, float]:
    if lat is None:
        return {}
    percentiles = lat.get("percentile")
    if not isinstance(percentiles, dict):
        return {}
    out: dict[float, float] = {}
    for key, value in percentiles.items():
        pct = _pct_key(key) if isinstance(key, str) else None
        if pct not in PERCENTILES:  # the frame keeps p50, p90, p99 and p99.9
            continue
        number = _num(value)
        if pct > 0 and number is not None:
            out[pct] = number * scale
    return out


_IDLE = DirStats(io_bytes=0, total_ios=0)


def read_direction(section: dict[str, Any]) -> DirStats:
    """Convert one ``read``/``write``/``trim`` object of a JSON job.

    Parameters
    ----------
    section : dict
        The direction's object from fio's JSON.

    Returns
    -------
    DirStats
        The direction in µs, bytes and bytes per second.
    """
    if not (section.get("io_bytes") or section.get("io_kbytes") or section.get("total_ios")):
        # fio writes every direction of every job; most did nothing and never reach the frame.
        return _IDLE
    bw_bytes = _num(section.get("bw_bytes"))
    if bw_bytes is None:
        bw_kib = _num(section.get("bw"))
        bw_bytes = None if bw_kib is None else bw_kib * 1024
    io_bytes = _int(section.get("io_bytes"))
    if io_bytes is not None and "io_kbytes" not in section:
        io_bytes *= 1024
    clat = _latency(section, "clat")
    return DirStats(
        iops=_num(section.get("iops")),
        bw_bytes=bw_bytes,
        io_bytes=io_bytes,
        runtime_ms=_int(section.get("runtime")),
        total_ios=_int(section.get("total_ios")),
        lat_mean_us=_mean_us(*_latency(section, "lat")),
        clat_mean_us=_mean_us(*clat),
        slat_mean_us=_mean_us(*_latency(section, "slat")),
        clat_pct_us=_percentiles_us(*clat),
    )


def _hosts(entries: list[dict[str, Any]]) -> list[str | None]:
    """Name each client entry's host; add ``:port`` only where a name is ambiguous."""
    ports: dict[str, set[Any]] = {}
    for entry in entries:
        if "hostname" in entry:
            ports.setdefault(str(entry["hostname"]), set()).add(entry.get("port"))
    names: list[str | None] = []
    for entry in entries:
        if "hostname" not in entry:
            names.append(None)
            continue
        host = str(entry["hostname"])
        if len(ports[host]) > 1 and entry.get("port") is not None:
            host = f"{host}:{entry['port']}"
        names.append(host)
    return names


def read_json(obj: dict[str, Any]) -> list[JobStats]:
    """Convert a decoded fio JSON document into job records.

    Parameters
    ----------
    obj : dict
        The document, with a ``jobs`` list or (client/server) ``client_stats``.

    Returns
    -------
    list of JobStats
        One record per entry, in fio's order; ``job_index`` is the entry's
        position in fio's array. The client/server ``All clients`` aggregate is
        left out.
    """
    client = isinstance(obj.get("client_stats"), list)
    entries = [e for e in (obj["client_stats"] if client else obj.get("jobs") or []) if isinstance(e, dict)]
    version = obj.get("fio version")
    hosts = _hosts(entries) if client else [None] * len(entries)
    records: list[JobStats] = []
    for index, (entry, host) in enumerate(zip(entries, hosts, strict=True)):
        name = str(entry.get("jobname", ""))
        options = entry.get("job options")
        full = options.get("name") if isinstance(options, dict) else None
        # fio truncates long jobnames; "job options" keeps the name as given.
        if isinstance(full, str) and len(full) > len(name) and full.startswith(name):
            name = full
        if client and name == ALL_CLIENTS:
            continue
        directions = {
            ddir: read_direction(entry[ddir])
            for ddir in _JSON_DIRECTIONS
            if isinstance(entry.get(ddir), dict)
        }
        records.append(
            JobStats(
                jobname=name,
                job_index=index,
                host=host,
                error=_int(entry.get("error")),
                usr_cpu=_num(entry.get("usr_cpu")),
                sys_cpu=_num(entry.get("sys_cpu")),
                ctx=_int(entry.get("ctx")),
                job_runtime_ms=_int(entry.get("job_runtime")),
                fio_version=str(version) if version is not None else None,
                directions=directions,
            )
        )
    return records

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
from typing import Any

from iobench.results.fioout.bins import encode
from iobench.results.fioout.model import PERCENTILES, DirStats, JobStats

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


_EXACT = 2**53  # ints up to this size survive the trip through float unchanged


def _int(value: Any) -> int | None:
    # Through float, as _num: a count beyond 2**53 is rounded the same way everywhere.
    if type(value) is int and -_EXACT <= value <= _EXACT:
        return value
    number = _num(value)
    return None if number is None else int(number)


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


def _latency(section: dict[str, Any], name: str) -> tuple[dict[str, Any] | None, float]:
    """Return fio's measured latency object ``name`` (else ``None``) and the factor that makes it µs.

    ``name`` is the 3.x key (``clat_ns``, in ns); without it, fio 2.x's key
    without ``_ns`` (in µs) is tried.
    """
    lat = section.get(name)
    if isinstance(lat, dict):
        scale = 1e-3
    else:
        lat = section.get(name[:-3])
        scale = 1.0
        if not isinstance(lat, dict):
            return None, scale
    if "N" in lat:
        measured = bool(_int(lat["N"]))
    else:
        measured = any(_num(lat.get(key)) for key in ("min", "max", "mean"))
    return (lat, scale) if measured else (None, scale)


def _mean_us(section: dict[str, Any], name: str) -> tuple[float | None, str | None]:
    """A latency's mean in µs and its json+ histogram (see :mod:`iobench.results.fioout.bins`)."""
    lat, scale = _latency(section, name)
    if lat is None:
        return None, None
    mean = _num(lat.get("mean"))
    bins = lat.get("bins")
    return (None if mean is None else mean * scale), (None if bins is None else encode(bins, scale))


def _clat_us(section: dict[str, Any]) -> tuple[float | None, dict[float, float], str | None]:
    """The completion latency's mean, kept percentiles (µs) and json+ histogram."""
    lat, scale = _latency(section, "clat_ns")
    if lat is None:
        return None, {}, None
    mean = _num(lat.get("mean"))
    bins = lat.get("bins")
    percentiles = lat.get("percentile")
    out: dict[float, float] = {}
    if isinstance(percentiles, dict):
        for pct, keys in _pct_plan(tuple(percentiles)):
            # Where two keys name one percentile, the last one with a number wins.
            for key in keys:
                number = _num(percentiles[key])
                if number is not None:
                    out[pct] = number * scale
                    break
    return (None if mean is None else mean * scale), out, (None if bins is None else encode(bins, scale))


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
    get = section.get
    if not (get("io_bytes") or get("io_kbytes") or get("total_ios")):
        # fio writes every direction of every job; most did nothing and never reach the frame.
        return _IDLE
    bw_bytes = _num(get("bw_bytes"))
    if bw_bytes is None:
        bw_kib = _num(get("bw"))
        bw_bytes = None if bw_kib is None else bw_kib * 1024
    io_bytes = _int(get("io_bytes"))
    if io_bytes is not None and "io_kbytes" not in section:
        io_bytes *= 1024
    clat_mean, clat_pct, clat_bins = _clat_us(section)
    lat_mean, lat_bins = _mean_us(section, "lat_ns")
    slat_mean, slat_bins = _mean_us(section, "slat_ns")
    # Positional, in field order: matching keywords would cost more than the conversions.
    return DirStats(
        _num(get("iops")),
        bw_bytes,
        io_bytes,
        _int(get("runtime")),
        _int(get("total_ios")),
        lat_mean,
        clat_mean,
        slat_mean,
        clat_pct,
        clat_bins,
        lat_bins,
        slat_bins,
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
    if version is not None:
        version = str(version)
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
        directions = {}
        for ddir in _JSON_DIRECTIONS:
            section = entry.get(ddir)
            if isinstance(section, dict):
                directions[ddir] = read_direction(section)
        records.append(
            JobStats(  # positional, in field order (see read_direction)
                name,
                index,
                host,
                _int(entry.get("error")),
                _num(entry.get("usr_cpu")),
                _num(entry.get("sys_cpu")),
                _int(entry.get("ctx")),
                _int(entry.get("job_runtime")),
                None,  # jobs: JSON has one entry per job or per reporting group
                version,
                directions,
                _int(entry.get("groupid")),
            )
        )
    return records

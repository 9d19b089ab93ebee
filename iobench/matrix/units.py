"""fio's size and time notation, parsed the way fio reads it (``kb_base=1024``)."""

from __future__ import annotations

import re
from decimal import Decimal

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtpe]?)(i?b)?\s*$", re.IGNORECASE)
_SIZE_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}
MAX_SIZE = (1 << 64) - 1  # fio holds sizes in unsigned 64 bits

_TIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|usec|ms|msec|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_TIME_SECONDS = {
    "us": 1e-6,
    "usec": 1e-6,
    "ms": 1e-3,
    "msec": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}


def parse_size(value: str | int) -> int:
    """Return the number of bytes fio reads from ``value``.

    Parameters
    ----------
    value
        An integer (bytes) or a string such as ``"4k"``, ``"1M"``, ``"64KiB"``,
        ``"2g"``. Like fio with its default ``kb_base=1024``, ``k``, ``K``,
        ``KB`` and ``KiB`` all mean 1024.

    Raises
    ------
    ValueError
        When ``value`` is not a size.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative")
        if value > MAX_SIZE:
            raise ValueError(f"{value} is larger than fio's largest size (16 EiB)")
        return value
    match = _SIZE_RE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size (examples: 4096, 4k, 1M, 64KiB, 2g)")
    number, unit, _ = match.groups()
    result = Decimal(number) * 1024 ** _SIZE_POWERS[unit.lower()]
    if result != int(result):
        raise ValueError(f"{value!r} is not a whole number of bytes")
    if result > MAX_SIZE:
        raise ValueError(f"{value!r} is larger than fio's largest size (16 EiB)")
    return int(result)


def parse_seconds(value: str | int | float) -> float:
    """Return the seconds fio reads from a time option such as ``runtime``.

    A bare number is seconds, as in fio; suffixes ``us``, ``ms``, ``s``, ``m``,
    ``h`` and ``d`` are understood.

    Raises
    ------
    ValueError
        When ``value`` is not a duration.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{value} is negative")
        return float(value)
    match = _TIME_RE.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a duration (examples: 60, 30s, 500ms, 2m)")
    number, unit = match.groups()
    return float(number) * _TIME_SECONDS[(unit or "s").lower()]


def format_size(size: int) -> str:
    """Return ``size`` bytes in fio's shortest exact notation (``4096`` → ``"4k"``)."""
    for unit in ("e", "p", "t", "g", "m", "k"):
        scale = 1024 ** _SIZE_POWERS[unit]
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)

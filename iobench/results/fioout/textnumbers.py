"""Numbers as fio prints them in text output: ``11.9k``, ``2029.2K``, ``46.3MiB``."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)")

#: Latency output units and the factor to µs.
TIME_TO_US: dict[str, float] = {"nsec": 1e-3, "usec": 1.0, "msec": 1e3, "sec": 1e6}

_DECIMAL = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def _split(text: str) -> tuple[float, str] | None:
    match = _NUMBER.match(text)
    if match is None:
        return None
    return float(match.group(1)), match.group(2)


def decimal(text: str) -> float | None:
    """``"11.9k"`` → 11900.0: counts and latencies use powers of 1000."""
    parts = _split(text)
    if parts is None:
        return None
    value, suffix = parts
    factor = _DECIMAL.get(suffix.lower())
    return None if factor is None else value * factor


def binary_bytes(text: str) -> float | None:
    """``"46.3MiB"`` or (fio 2.x, where KB meant KiB) ``"254727KB"`` → bytes.

    The unit may be followed by ``/s``. Every prefix is read as a power of 1024,
    which is right for the first figure fio prints on a ``read:`` line in every
    version (3.x puts the decimal figure second, in parentheses).
    """
    parts = _split(text)
    if parts is None:
        return None
    value, unit = parts
    unit = unit.lower().removesuffix("b").removesuffix("i")
    factor = _BINARY.get(unit)
    return None if factor is None else value * factor

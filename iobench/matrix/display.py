"""How an axis value reads to a person: one formatter for figures, the report's tables and compare's.

The frame keeps values as fio reads them (``bs`` in bytes, ``direct`` as 0/1);
a reader knows them as ``4k`` and ``O_DIRECT``. Every place that shows a
parameter value to a person calls :func:`format_value`, so a block size reads
the same on a figure's axis, in the report's summary and in a comparison.
"""

from __future__ import annotations

import math
import numbers
import re
from pathlib import PurePath

from iobench.matrix.units import format_size
from iobench.matrix.values import SIZE_OPTIONS

#: Columns whose values are sizes in bytes (fio's size options, and ``bs``).
SIZE_COLUMNS = frozenset({"bs", *SIZE_OPTIONS})
# A list or range of sizes as the matrix writes it out in bytes: ``4096,8192``, ``4096-16384``.
_SIZE_LIST = re.compile(r"\d+(?:[,:/-]\d+)*")


def _missing(value: object) -> bool:
    """None, NaN, pandas' NA or NaT (without importing pandas: each differs from itself, or cannot say)."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except (TypeError, ValueError):  # pandas' NA has no truth value
        return True


def _number(value: object) -> float | None:
    """``value`` as a finite float when it is a real number (bools included), else None."""
    if isinstance(value, numbers.Real) and math.isfinite(float(value)):
        return float(value)
    return None


def format_value(column: str, value: object, *, missing: str = "n/a") -> str:
    """``value`` of ``column`` as a reader knows it: ``bs`` 4096 → ``4k``, ``direct`` 1 → ``O_DIRECT``.

    Parameters
    ----------
    column
        The frame column the value comes from.
    value
        The value as the frame holds it.
    missing
        What a missing value (None, NA, NaN) reads as.

    Returns
    -------
    str
        Sizes in fio's shortest exact notation (``4k``, ``1m``; a list or range
        of them each so: ``4k,64k``), ``readahead_kb`` in KiB or MiB, ``direct``
        as ``O_DIRECT`` or ``buffered``, a ``source`` file by its name, whole
        numbers without a fraction, anything else as it is.
    """
    if _missing(value):
        return missing
    number = _number(value)
    if column in SIZE_COLUMNS:
        if number is not None and number.is_integer() and number >= 0:
            return format_size(int(number))
        if isinstance(value, str) and _SIZE_LIST.fullmatch(value.strip()):
            return re.sub(r"\d+", lambda m: format_size(int(m[0])), value.strip())
    if column == "direct" and number in (0, 1):
        return "O_DIRECT" if number == 1 else "buffered"
    if column == "readahead_kb" and number is not None:
        return f"{number / 1024:g} MiB" if number >= 1024 and number % 1024 == 0 else f"{number:g} KiB"
    if column == "source":
        return PurePath(str(value)).name
    if number is not None and not isinstance(value, bool):
        return str(int(number)) if number.is_integer() else f"{number:g}"
    return str(value)

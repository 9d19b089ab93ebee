"""fio's json+ latency histograms, one text cell per job × direction of the frame.

``--output-format=json+`` adds ``bins`` to each latency object (``clat_ns``, and
``lat_ns``/``slat_ns`` when ``lat_percentiles``/``slat_percentiles`` are on):
fio's histogram (``io_u_plat``), keyed by each non-empty bin's value and
holding how many samples fell in it. The frame keeps it as text,
``"<ns>:<count>,<ns>:<count>,..."`` in the order fio wrote it (ascending), so a
cell survives parquet and CSV unchanged and the frame stays one scalar per cell.

The key is fio's ``plat_idx_to_val()`` of the bin (stat.c): the value fio
prints for any percentile that falls in the bin. Three layouts are read:

- fio 3.x: keys in ns — kept as they are;
- fio 2.20 to 2.99: keys in µs — multiplied by 1000;
- fio 2.2.12 to 2.19: every bin keyed by its index, with ``FIO_IO_U_PLAT_BITS``
  and ``FIO_IO_U_PLAT_VAL`` beside them — converted to the value as
  ``plat_idx_to_val()`` does, in µs, then to ns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from iobench.errors import ResultsError

if TYPE_CHECKING:  # numpy and pandas only where histograms are decoded: reading fio's output needs neither
    import numpy as np
    import pandas as pd

#: The frame's histogram columns and the fio latency object each comes from.
HISTOGRAMS: dict[str, str] = {"clat_bins": "clat_ns", "lat_bins": "lat_ns", "slat_bins": "slat_ns"}

_JSON_NOISE = b'{}"'  # what orjson writes around '<key>:<count>,' pairs
_DIGITS = b"0123456789:,"


def _index_value(index: int, bits: int) -> int:
    """fio's ``plat_idx_to_val()``: the value a bin index stands for (its middle above the exact range)."""
    if index < (2 << bits):
        return index
    error_bits = (index >> bits) - 1
    base = 1 << (error_bits + bits)
    return base + int((index % (1 << bits) + 0.5) * (1 << error_bits))


def _old_layout(bins: dict[str, Any], bits: int) -> str:
    pairs = []
    for key, count in bins.items():
        if key.isdigit() and isinstance(count, int) and count > 0:
            pairs.append(f"{_index_value(int(key), bits) * 1000}:{count}")
    return ",".join(pairs)


def encode(bins: object, scale_to_us: float) -> str | None:
    """fio's ``bins`` object as the frame's text, or ``None`` when there is none to keep.

    Parameters
    ----------
    bins
        The ``bins`` value of a latency object.
    scale_to_us
        The factor that makes the latency object's values µs: ``1e-3`` for fio
        3.x's ``*_ns`` objects, ``1.0`` for fio 2.x's.

    Raises
    ------
    ResultsError
        A bin that is not a whole number of samples at a whole-number value.
    """
    if not isinstance(bins, dict) or not bins:
        return None
    bits = bins.get("FIO_IO_U_PLAT_BITS")
    if isinstance(bits, int):
        text = _old_layout(bins, bits)
    elif scale_to_us == 1.0:
        text = ",".join(f"{key}000:{count}" for key, count in bins.items())
    else:
        # The hot path (every job of every json+ file): orjson writes '{"1020":3,"1036":5}' in C.
        raw = orjson.dumps(bins).translate(None, _JSON_NOISE)
        if raw.translate(None, _DIGITS):
            raise ResultsError(f"json+ bins hold something other than whole numbers: {raw[:60]!r}")
        return raw.decode("ascii")
    if text.translate(str.maketrans("", "", _DIGITS.decode())):
        raise ResultsError(f"json+ bins hold something other than whole numbers: {text[:60]!r}")
    return text or None


@dataclass(frozen=True)
class Bins:
    """Histogram cells decoded: one entry per bin, with the position of the row it came from."""

    rows: np.ndarray
    values_ns: np.ndarray
    counts: np.ndarray


def decode(cells: pd.Series) -> Bins:
    """Decode a histogram column in one pass.

    Parameters
    ----------
    cells
        A ``*_bins`` column (``string``, or ``object`` as read back from CSV); NA
        cells give no bins.

    Returns
    -------
    Bins
        ``rows`` holds each bin's row position in ``cells`` (0-based).

    Raises
    ------
    ResultsError
        A cell is not ``"<ns>:<count>,..."``.
    """
    import numpy as np

    text = cells.astype("string").reset_index(drop=True)
    text = text[text.notna() & text.ne("")]
    if text.empty:
        empty = np.zeros(0, dtype=np.int64)
        return Bins(empty, empty, empty)
    pairs = text.str.count(",").to_numpy(dtype=np.int64) + 1
    flat = ",".join(text.tolist()).replace(":", ",")
    try:
        numbers = np.fromstring(flat, dtype=np.int64, sep=",")
    except (ValueError, DeprecationWarning):
        numbers = np.zeros(0, dtype=np.int64)
    if len(numbers) != 2 * int(pairs.sum()):
        raise ResultsError(
            f"a latency histogram cell is not '<ns>:<count>,...' (it begins {str(text.iloc[0])[:40]!r})"
        )
    rows = np.repeat(text.index.to_numpy(dtype=np.int64), pairs)
    return Bins(rows, numbers[0::2], numbers[1::2])

"""From the tidy frame to what a figure draws: point totals, means over repeats, the axes that vary.

A point's numbers come from :mod:`iobench.results.points`, as everywhere else; this
module only picks and orders what a figure shows.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from iobench.errors import ResultsError
from iobench.results import points
from iobench.results.fioout.frame import FRAME_METRICS
from iobench.results.points import CONTEXT as CONTEXT
from iobench.results.points import data_rows as data_rows
from iobench.results.points import parameter_columns as parameter_columns
from iobench.results.points import point_totals as point_totals
from iobench.results.points import shared_totals as shared_totals

#: Columns besides the matrix axes that tell points apart, in the order figures consider them.
CATEGORIES: tuple[str, ...] = (*CONTEXT, "direction", "run_id", "source", "groupid", "point")
#: Columns of a tidy frame's rows that a point's totals combine away (a point sums its jobs).
JOB_COLUMNS = frozenset({"jobname", "job_index", "cpus", "cpus_observed", "cpu_node", "target_node"})
#: Columns that are measured numbers, besides the latency percentiles.
METRICS = frozenset(
    {c for c in FRAME_METRICS if c not in ("error", "fio_version")}
    | {c for c in points.TELEMETRY if c not in points.TELEMETRY_TEXT}
)
_ANY_PERCENTILE = re.compile(r"(?:clat|lat|slat)_p\d+(?:_\d+)?_us")


def is_metric(column: str) -> bool:
    """Whether ``column`` holds a measured number (``iops``, ``lat_p99_us``, ``dev_iops`` ...)."""
    return column in METRICS or _ANY_PERCENTILE.fullmatch(column) is not None


def category_columns(totals: pd.DataFrame) -> list[str]:
    """The columns of ``totals`` that tell points apart: the matrix axes, then :data:`CATEGORIES`."""
    return list(dict.fromkeys(c for c in (*parameter_columns(totals), *CATEGORIES) if c in totals))


def metric_columns(totals: pd.DataFrame) -> list[str]:
    """The metrics of ``totals`` that hold a number at some point, in frame order."""
    return [
        str(c)
        for c in totals.columns
        if is_metric(str(c))
        and pd.api.types.is_numeric_dtype(totals[c])
        and not pd.api.types.is_bool_dtype(totals[c])
        and totals[c].notna().any()
    ]


_PERCENTILE = re.compile(r"clat_p(\d+)(?:_(\d+))?_us")


def percentile_of(column: str) -> float | None:
    """The percentile a ``clat_p*_us`` column holds (99.9 for ``clat_p99_9_us``); None for other columns."""
    match = _PERCENTILE.fullmatch(column)
    return float(f"{match[1]}.{match[2] or 0}") if match else None


def percentile_columns(df: pd.DataFrame) -> dict[float, str]:
    """The ``clat_p*_us`` columns of ``df`` that hold data, by ascending percentile."""
    found = {
        p: c for c in map(str, df.columns) if (p := percentile_of(c)) is not None and df[c].notna().any()
    }
    return dict(sorted(found.items()))


def require(df: pd.DataFrame, columns: Sequence[str], figure: str, hint: str = "") -> None:
    """Raise :class:`ResultsError` naming the columns of ``columns`` that ``df`` lacks."""
    missing = [c for c in columns if c not in df]
    if missing:
        names = ", ".join(f"`{c}`" for c in missing)
        params = ", ".join(parameter_columns(df)) or "none"
        raise ResultsError(
            f"{figure}: the points have no {names} column (their parameter columns: {params})"
            + (f"; {hint}" if hint else "")
        )


def one_panel(figure: str, others: Sequence[str]) -> None:
    """Refuse to draw into a given Axes while ``others`` vary: they would need panels of their own."""
    if others:
        raise ResultsError(
            f"{figure}: {', '.join(others)} also var{'y' if len(others) > 1 else 'ies'}; "
            "one Axes shows one panel — filter the frame to one value, or omit ax= to get a panel each"
        )


def _floats(values: pd.Series) -> pd.Series:
    return values.astype("Float64").astype(float)


def totals_for(df: pd.DataFrame, figure: str) -> pd.DataFrame:
    """The :func:`point_totals` a figure draws, once it is sure some point finished ``ok``.

    Raises
    ------
    ResultsError
        No row is ``ok`` (naming the statuses found instead).
    """
    if data_rows(df).empty:
        statuses = ""
        if "status" in df and len(df):
            counts = df["status"].value_counts(dropna=False)
            statuses = " (" + ", ".join(f"{n} {s}" for s, n in counts.items()) + ")"
        raise ResultsError(
            f"{figure}: no successful points to plot{statuses}; only rows with status 'ok' become "
            "data — check the run's points/*/meta.json for the reasons"
        )
    return point_totals(df)


def throughput_metric(totals: pd.DataFrame, large: float = 64 * 1024) -> str:
    """The throughput metric that suits the run: large sequential I/O reads in MiB/s, small random I/O in IOPS.

    Parameters
    ----------
    totals
        Point totals (:func:`point_totals`).
    large
        The I/O size, in bytes, from which bandwidth is the better measure.

    Returns
    -------
    str
        ``bw_bytes`` when the median I/O (bandwidth ÷ IOPS) is at least ``large`` bytes, else ``iops``.
    """
    if "bw_bytes" not in totals or "iops" not in totals:
        return "iops"
    iops = _floats(totals["iops"])
    size = (_floats(totals["bw_bytes"]) / iops.where(iops > 0)).dropna()
    return "bw_bytes" if len(size) and float(size.median()) >= large else "iops"


def distinct(df: pd.DataFrame, columns: Sequence[str]) -> int:
    """How many distinct combinations of ``columns`` ``df`` holds (NA counts as a value)."""
    if not columns:
        return 1 if len(df) else 0
    combined = np.zeros(len(df), dtype=np.int64)
    for column in columns:  # a combination's code, renumbered after each column so it stays below len(df)
        codes, uniques = pd.factorize(df[column], use_na_sentinel=False)
        combined = pd.factorize(combined * max(1, len(uniques)) + codes)[0]
    return len(np.unique(combined))


def varies(totals: pd.DataFrame, column: str) -> bool:
    """Whether ``column`` exists and holds more than one value (NA counting as one)."""
    return column in totals and distinct(totals, [column]) > 1


def splitting_axes(totals: pd.DataFrame, chosen: Sequence[str]) -> list[str]:
    """The columns beyond ``chosen`` that tell points apart, in frame order.

    Candidates are the parameter columns, the context columns, ``direction``,
    ``run_id``, ``source``, fio's ``groupid`` and, last, ``point`` itself (two points that nothing
    else tells apart are still not repeats). One is kept only if it splits the
    points further than those already kept: ``direction`` under an ``rw`` axis
    adds nothing.
    """
    kept: list[str] = []
    current = [c for c in chosen if c in totals]
    for column in (c for c in category_columns(totals) if c not in chosen):
        if distinct(totals, [*current, column]) > distinct(totals, current):
            kept.append(column)
            current.append(column)
    return kept


def over_repeats(totals: pd.DataFrame, by: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """:func:`iobench.results.points.over_repeats` as figures read it: ``<m>`` (the mean), ``<m>_ci95``, ``<m>_n``.

    Parameters
    ----------
    totals
        Point totals (:func:`point_totals`).
    by
        The columns that tell the points apart.
    metrics
        The columns to summarise.

    Returns
    -------
    pandas.DataFrame
        The ``by`` columns, then per metric its mean, 95 % confidence half-width
        (NaN below two repeats) and count; plain float columns.
    """
    stats = points.over_repeats(totals, by, metrics)
    keep = [*by] + [f"{m}{s}" for m in metrics for s in ("_mean", "_ci95", "_n")]
    return stats[keep].rename(columns={f"{m}_mean": m for m in metrics})


def is_missing(value: object) -> bool:
    """Whether ``value`` is NA/None/NaN."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float | np.floating) and math.isnan(value)


def as_number(value: object) -> float | None:
    """``value`` as a finite float when it is a real number (bools included), else None."""
    if isinstance(value, numbers.Real) and math.isfinite(float(value)):
        return float(value)
    return None


def key(value: object) -> object:
    """A hashable stand-in for ``value`` that equal values share (``np.int64(4)``, ``4`` and ``4.0`` alike)."""
    if is_missing(value):
        return ("<NA>",)
    number = as_number(value)
    return number if number is not None else str(value)


def _order(column: str, value: object) -> tuple[int, float, str]:
    if is_missing(value):
        return (9, 0.0, "")
    text = str(value)
    if column == "binding":
        node = re.fullmatch(r"node:(\d+)", text)
        fixed = {"local": (0, 0.0, ""), "remote": (1, 0.0, ""), "none": (2, 0.0, "")}
        return fixed.get(text) or ((3, float(node[1]), "") if node else (4, 0.0, text))
    if column == "placement":
        return ({"same-core": 0, "diff-cores": 1, "node": 2}.get(text, 3), 0.0, text)
    if column == "scheduler" and text == "none":
        return (0, 0.0, "")
    number = as_number(value)
    return (1, number, "") if number is not None else (1, 0.0, text)


def ordered(column: str, values: pd.Series) -> list[object]:
    """The distinct ``values`` of ``column`` in reading order (local, remote, none, node:N; numbers ascending; NA last)."""
    return sorted(values.drop_duplicates(), key=lambda v: _order(column, v))


def combos(frame: pd.DataFrame, columns: Sequence[str]) -> list[tuple[object, ...]]:
    """The distinct value combinations of ``columns`` in reading order; ``[()]`` for no columns."""
    rows = frame[list(columns)].drop_duplicates().itertuples(index=False, name=None)
    return (
        sorted(rows, key=lambda r: [_order(c, v) for c, v in zip(columns, r, strict=True)])
        if columns
        else [()]
    )


def select(frame: pd.DataFrame, columns: Sequence[str], values: Sequence[object]) -> pd.DataFrame:
    """The rows of ``frame`` whose ``columns`` hold ``values`` (NA matching NA)."""
    mask = pd.Series(True, index=frame.index)
    for column, value in zip(columns, values, strict=True):
        mask &= frame[column].isna() if is_missing(value) else (frame[column] == value).fillna(False)
    return frame[mask]


def positions(frame: pd.DataFrame, columns: Sequence[str]) -> dict[tuple[object, ...], list[int]]:
    """The row positions of ``frame`` per combination of ``columns``, keyed by :func:`key` of each value.

    One pass over the rows, for drawing many combinations of one small frame
    (:func:`select` filters the whole frame once per combination).
    """
    cells = [[key(v) for v in frame[c].tolist()] for c in columns]
    found: dict[tuple[object, ...], list[int]] = {}
    for at, combo in enumerate(zip(*cells, strict=True) if columns else [()] * len(frame)):
        found.setdefault(combo, []).append(at)
    return found

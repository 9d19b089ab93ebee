"""From the tidy frame to what a figure draws: point totals, means over repeats, the axes that vary."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from iobench.errors import ResultsError
from iobench.fioout.frame import FRAME_METRICS
from iobench.results import EXTRA, IDENTITY, PLACEMENT
from iobench.stats import t975

#: Placement columns that can differ from point to point: kept by :func:`point_totals`.
CONTEXT = ("target", "scheduler", "readahead_kb")
#: How :func:`point_totals` combines a metric over a point's jobs; ``clat_p*_us`` are weighted too.
SUMMED = ("iops", "bw_bytes", "io_bytes", "ctx", "inflight")
WEIGHTED = ("lat_mean_us", "clat_mean_us", "slat_mean_us", "cpu_us_per_io")
AVERAGED = ("usr_cpu", "sys_cpu")
LONGEST = ("runtime_ms",)

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


def parameter_columns(df: pd.DataFrame) -> list[str]:
    """The matrix axes present in ``df``.

    Parameters
    ----------
    df
        A tidy frame, or point totals.

    Returns
    -------
    list of str
        Every column that is not identity, placement, metric or ``source``, in frame order.
    """
    fixed = {*IDENTITY, *PLACEMENT, *FRAME_METRICS, *EXTRA, "source"}
    return [c for c in df.columns if c not in fixed]


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


def require_metrics(totals: pd.DataFrame, metrics: Sequence[str], figure: str, hint: str = "") -> None:
    """Raise :class:`ResultsError` naming a metric of ``metrics`` that the point totals lack."""
    missing = [m for m in metrics if m not in totals]
    if missing:
        known = [c for c in totals.columns if c in FRAME_METRICS or percentile_of(str(c)) is not None]
        raise ResultsError(
            f"{figure}: no `{missing[0]}` metric (metrics: {', '.join(known)})"
            + (f"; {hint}" if hint else "")
        )


def one_panel(figure: str, others: Sequence[str]) -> None:
    """Refuse to draw into a given Axes while ``others`` vary: they would need panels of their own."""
    if others:
        raise ResultsError(
            f"{figure}: {', '.join(others)} also var{'y' if len(others) > 1 else 'ies'}; "
            "one Axes shows one panel — filter the frame to one value, or omit ax= to get a panel each"
        )


def data_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows that are data: status ``ok`` and a direction that did I/O."""
    if "status" in df:
        df = df[df["status"].eq("ok").fillna(False)]
    return df[df["direction"].notna()] if "direction" in df else df


def _floats(values: pd.Series) -> pd.Series:
    return values.astype("Float64").astype(float)


def _one_or_joined(values: pd.Series) -> object:
    distinct = values.dropna().unique()
    if len(distinct) == 1:
        return distinct[0]
    return "+".join(sorted(map(str, distinct))) if len(distinct) else pd.NA


def point_totals(df: pd.DataFrame) -> pd.DataFrame:
    """One row per point × repeat × direction: its jobs combined.

    Only rows with status ``ok`` and a direction count. ``iops``, ``bw_bytes``,
    ``io_bytes``, ``ctx`` and ``inflight`` are summed over the jobs; latencies,
    ``clat_p*_us`` percentiles and ``cpu_us_per_io`` are weighted by each job's
    IOPS (a percentile so combined approximates that of the merged
    distribution); ``usr_cpu`` and ``sys_cpu`` are the mean over jobs and
    ``runtime_ms`` the longest. A metric that any job lacks is NA for the point:
    a total over some of its jobs is not the point's. A frame from
    :func:`iobench.parse_fio` has no ``point``: each fio output (``source``) is
    one. :data:`CONTEXT` columns keep their value within the point, or the
    distinct values joined with ``+`` when the point spans several.

    Parameters
    ----------
    df
        A tidy frame (SPEC §6).

    Returns
    -------
    pandas.DataFrame
        ``run_id``, ``point`` (else ``source``), ``repeat``, ``direction`` (those
        present), the parameter columns, the metrics above that ``df`` has (as
        ``Float64``), then the context columns.

    Raises
    ------
    ResultsError
        ``df`` has no ``iops`` column.
    """
    require(df, ["iops"], "point_totals")
    ok = data_rows(df)
    point = "point" if "point" in ok or "source" not in ok else "source"
    params = [c for c in parameter_columns(ok) if ok[c].notna().any()]
    by = [c for c in ("run_id", point, "repeat", "direction") if c in ok] + params
    if not by:
        ok, by = ok.assign(_all=0), ["_all"]
    weighted = [c for c in (*WEIGHTED, *percentile_columns(ok).values()) if c in ok]
    values = pd.DataFrame({c: _floats(ok[c]) for c in (*SUMMED, *AVERAGED, *LONGEST, *weighted) if c in ok})
    values[weighted] = values[weighted].mul(values["iops"], axis=0)
    keys = [ok[c] for c in by]
    groups = values.groupby(keys, dropna=False, sort=True)
    totals = groups.sum()
    longest = [c for c in LONGEST if c in values]
    totals[longest] = groups[longest].max()
    averaged = [c for c in AVERAGED if c in values]
    totals[averaged] = totals[averaged].div(groups.size(), axis=0)
    totals[weighted] = totals[weighted].div(totals["iops"].where(totals["iops"] > 0), axis=0)
    totals = totals.mask(values.isna().groupby(keys, dropna=False, sort=True).any()).astype("Float64")
    context = [c for c in CONTEXT if c in ok and c not in params]
    if context:
        totals = totals.join(ok[context].groupby(keys, dropna=False, sort=True).agg(_one_or_joined))
    return totals.reset_index().drop(columns="_all", errors="ignore")


def totals_for(df: pd.DataFrame, figure: str, columns: Sequence[str] = (), hint: str = "") -> pd.DataFrame:
    """The :func:`point_totals` a figure draws, once it is sure they hold ``columns``.

    Raises
    ------
    ResultsError
        No row is ``ok`` (naming the statuses found instead), or the points lack a column of ``columns``.
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
    totals = point_totals(df)
    require(totals, columns, figure, hint)
    return totals


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
    return len(df[list(columns)].astype("string").drop_duplicates())


def varies(totals: pd.DataFrame, column: str) -> bool:
    """Whether ``column`` exists and holds more than one value (NA counting as one)."""
    return column in totals and distinct(totals, [column]) > 1


def splitting_axes(totals: pd.DataFrame, chosen: Sequence[str]) -> list[str]:
    """The columns beyond ``chosen`` that tell points apart, in frame order.

    Candidates are the parameter columns, the context columns, ``direction``,
    ``run_id``, ``source`` and, last, ``point`` itself (two points that nothing
    else tells apart are still not repeats). One is kept only if it splits the
    points further than those already kept: ``direction`` under an ``rw`` axis
    adds nothing.
    """
    candidates = (*parameter_columns(totals), *CONTEXT, "direction", "run_id", "source", "point")
    kept: list[str] = []
    current = [c for c in chosen if c in totals]
    for column in dict.fromkeys(c for c in candidates if c in totals and c not in chosen):
        if distinct(totals, [*current, column]) > distinct(totals, current):
            kept.append(column)
            current.append(column)
    return kept


def over_repeats(totals: pd.DataFrame, by: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """Mean and 95 % confidence half-width of ``metrics`` per ``by`` group (the repeats of a point).

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
        The ``by`` columns, then per metric ``<m>`` (mean), ``<m>_ci95``
        (``t(0.975, n-1) · s / √n``, NaN below two repeats) and ``<m>_n``; plain
        float columns with NaN for missing values.
    """
    keys = list(by) or ["_all"]
    data = totals.assign(_all=0, **{m: _floats(totals[m]) for m in metrics})
    stats = data.groupby(keys, dropna=False, sort=False)[list(metrics)].agg(["mean", "std", "count"])
    out = stats.index.to_frame(index=False)
    for metric in metrics:
        n = stats[(metric, "count")].to_numpy(dtype=float)
        t = np.array([t975(int(k) - 1) if k >= 2 else math.nan for k in n])
        out[metric] = stats[(metric, "mean")].to_numpy(dtype=float)
        out[f"{metric}_ci95"] = t * stats[(metric, "std")].to_numpy(dtype=float) / np.sqrt(np.maximum(n, 1))
        out[f"{metric}_n"] = n
    return out.drop(columns="_all", errors="ignore")


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

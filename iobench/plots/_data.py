"""From the tidy frame to what a figure draws: point totals, means over repeats, the axes that vary."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from iobench.errors import ResultsError
from iobench.fioout.frame import FRAME_METRICS
from iobench.results import EXTRA, IDENTITY, PLACEMENT
from iobench.stats import t975

#: Columns of the placement group that can still differ from point to point:
#: kept in :func:`point_totals` so that no figure averages over them.
CONTEXT = ("target", "scheduler", "readahead_kb")

#: Metrics combined over a point's jobs weighted by each job's IOPS.
WEIGHTED = ("lat_mean_us", "clat_mean_us", "slat_mean_us", "cpu_us_per_io")
SUMMED = ("iops", "bw_bytes", "io_bytes")

_PERCENTILE = re.compile(r"^clat_p(\d+)(?:_(\d+))?_us$")


def parameter_columns(df: pd.DataFrame) -> list[str]:
    """The matrix axes present in ``df`` (every column that is not identity, placement or metric)."""
    fixed = {*IDENTITY, *PLACEMENT, *FRAME_METRICS, *EXTRA, "source"}
    return [c for c in df.columns if c not in fixed]


def percentile_columns(df: pd.DataFrame) -> dict[float, str]:
    """The ``clat_p*_us`` columns of ``df`` that hold data, keyed by percentile (99.9 for ``clat_p99_9_us``)."""
    found: dict[float, str] = {}
    for column in df.columns:
        match = _PERCENTILE.match(str(column))
        if match and df[column].notna().any():
            whole, fraction = match.groups()
            found[float(f"{whole}.{fraction or 0}")] = str(column)
    return dict(sorted(found.items()))


def ok_rows(df: pd.DataFrame, figure: str) -> pd.DataFrame:
    """The rows that are data: status ``ok`` and a direction that did I/O.

    Raises
    ------
    ResultsError
        When there are none, naming the statuses found instead.
    """
    ok = df[df["status"] == "ok"] if "status" in df else df
    if "direction" in ok:
        ok = ok[ok["direction"].notna()]
    if ok.empty:
        statuses = ""
        if "status" in df and len(df):
            counts = df["status"].value_counts(dropna=False)
            statuses = " (" + ", ".join(f"{n} {s}" for s, n in counts.items()) + ")"
        raise ResultsError(
            f"{figure}: no successful points to plot{statuses}; only rows with status 'ok' become "
            "data — check the run's points/*/meta.json for the reasons"
        )
    return ok


def require(df: pd.DataFrame, columns: Sequence[str], figure: str, hint: str = "") -> None:
    """Raise :class:`ResultsError` naming the columns of ``columns`` that ``df`` lacks."""
    missing = [c for c in columns if c not in df]
    if missing:
        names = ", ".join(f"`{c}`" for c in missing)
        params = ", ".join(parameter_columns(df)) or "none"
        raise ResultsError(
            f"{figure}: the frame has no {names} column (its parameter columns: {params})"
            + (f"; {hint}" if hint else "")
        )


def _one_or_joined(values: pd.Series) -> object:
    distinct = values.dropna().unique()
    if len(distinct) == 1:
        return distinct[0]
    if len(distinct) == 0:
        return pd.NA
    return "+".join(sorted(str(v) for v in distinct))


def point_totals(df: pd.DataFrame) -> pd.DataFrame:
    """One row per point × repeat × direction: IOPS and bandwidth summed over jobs, latency IOPS-weighted.

    Only rows with status ``ok`` and a direction count. A frame from
    :func:`iobench.parse_fio` has no ``point``: each fio output (``source``) is one. The metrics of
    :data:`WEIGHTED` and every ``clat_p*_us`` percentile are averaged over the
    point's jobs weighted by their IOPS (a percentile so combined approximates the
    percentile of the merged distribution). :data:`CONTEXT` columns (``target``,
    ``scheduler``, ``readahead_kb``) are kept: their single value within the
    point, or the distinct values joined with ``+`` when the point spans several.

    Parameters
    ----------
    df
        A tidy frame (SPEC §6).

    Returns
    -------
    pandas.DataFrame
        ``run_id``, ``point`` (else ``source``), ``repeat``, ``direction`` (those present), the
        parameter columns, the context columns, ``iops``, ``bw_bytes``,
        ``io_bytes`` and the weighted metrics that ``df`` has.
    """
    ok = df[df["status"] == "ok"] if "status" in df else df
    if "direction" in ok:
        ok = ok[ok["direction"].notna()]
    point = ["point"] if "point" in ok or "source" not in ok else ["source"]
    keys = [c for c in ("run_id", *point, "repeat", "direction") if c in ok]
    params = [c for c in parameter_columns(ok) if ok[c].notna().any()]
    context = [c for c in CONTEXT if c in ok and c not in params]
    iops = ok["iops"].astype("Float64")
    weighted = [c for c in (*WEIGHTED, *percentile_columns(ok).values()) if c in ok]
    parts: dict[str, pd.Series] = {c: ok[c].astype("Float64") for c in SUMMED if c in ok}
    for column in weighted:
        value = ok[column].astype("Float64")
        weight = iops.where(value.notna() & (iops > 0))
        parts[f"_{column}:vw"] = value * weight
        parts[f"_{column}:w"] = weight
    frame = pd.DataFrame(parts, index=ok.index)
    group_keys = keys + params
    if not group_keys:
        group_keys = ["_all"]
        ok = ok.assign(_all=0)
    by = [ok[c] for c in group_keys]
    totals = frame.groupby(by, dropna=False, sort=True).sum(min_count=1)
    for column in weighted:
        totals[column] = totals.pop(f"_{column}:vw") / totals.pop(f"_{column}:w")
    if context:
        kept = ok[context].groupby(by, dropna=False, sort=True).agg(_one_or_joined)
        totals = totals.join(kept)
    totals = totals.reset_index()
    return totals.drop(columns=["_all"], errors="ignore")


def throughput_metric(totals: pd.DataFrame, large: float = 64 * 1024) -> str:
    """``bw_bytes`` when the median I/O (bandwidth ÷ IOPS) is at least ``large`` bytes, else ``iops``.

    Large sequential I/O is read in MiB/s, small random I/O in IOPS.
    """
    if "bw_bytes" not in totals or "iops" not in totals:
        return "iops"
    iops = totals["iops"].astype("Float64")
    size = (totals["bw_bytes"].astype("Float64") / iops.where(iops > 0)).dropna()
    return "bw_bytes" if len(size) and float(size.median()) >= large else "iops"


def distinct(df: pd.DataFrame, columns: Sequence[str]) -> int:
    """How many distinct combinations of ``columns`` ``df`` holds (NA counts as a value)."""
    if not columns:
        return 1 if len(df) else 0
    return len(df[list(columns)].astype("string").drop_duplicates())


def splitting_axes(totals: pd.DataFrame, chosen: Sequence[str]) -> list[str]:
    """The axes beyond ``chosen`` that tell points apart, in frame order.

    Candidates are the parameter columns, the context columns, ``direction``,
    ``run_id`` and ``source``. One is kept only if it splits the points further than the
    columns already kept — ``direction`` under an ``rw`` axis adds nothing, so it
    does not get lines of its own.
    """
    params = parameter_columns(totals)
    candidates = [
        c
        for c in (*params, *CONTEXT, "direction", "run_id", "source")
        if c in totals and c not in chosen and c != "point"
    ]
    kept: list[str] = []
    current = [c for c in chosen if c in totals]
    for column in dict.fromkeys(candidates):
        if distinct(totals, [*current, column]) > distinct(totals, current):
            kept.append(column)
            current.append(column)
    return kept


def varies(totals: pd.DataFrame, column: str) -> bool:
    """Whether ``column`` exists and holds more than one value (NA counting as one)."""
    return column in totals and distinct(totals, [column]) > 1


def over_repeats(totals: pd.DataFrame, by: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """Mean and 95 % confidence half-width of ``metrics`` per ``by`` group (the repeats of a point).

    Returns
    -------
    pandas.DataFrame
        The ``by`` columns, then per metric ``<m>`` (mean), ``<m>_ci95``
        (``t(0.975, n-1) · s / √n``, NaN below two repeats) and ``<m>_n``; plain
        float columns with NaN for missing values.
    """
    keys = list(by) if by else ["_all"]
    data = totals.assign(_all=0, **{m: totals[m].astype("Float64").astype(float) for m in metrics})
    stats = data.groupby(keys, dropna=False, sort=False)[list(metrics)].agg(["mean", "std", "count"])
    out = stats.index.to_frame(index=False)
    for metric in metrics:
        n = stats[(metric, "count")].to_numpy(dtype=float)
        std = stats[(metric, "std")].to_numpy(dtype=float)
        quantile = np.array([t975(int(k) - 1) if k >= 2 else math.nan for k in n])
        with np.errstate(invalid="ignore", divide="ignore"):
            ci = quantile * std / np.sqrt(n)
        out[metric] = stats[(metric, "mean")].to_numpy(dtype=float)
        out[f"{metric}_ci95"] = ci
        out[f"{metric}_n"] = n
    return out.drop(columns=["_all"], errors="ignore")

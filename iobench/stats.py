"""Per-point statistics over repeats: mean, std, 95 % CI, CV, and warning flags.

:func:`summarize` works in two steps.

1. Per point × repeat × direction, the jobs are combined into one figure:
   ``iops``, ``bw_bytes``, ``io_bytes`` and ``ctx`` are summed; ``runtime_ms`` is
   the longest; latencies (means and percentiles) and ``cpu_us_per_io`` are
   averaged weighted by each job's I/Os (``iops × runtime``); ``usr_cpu`` and
   ``sys_cpu`` are the mean over jobs; ``inflight`` is recomputed from the sums
   (Little's law). Weighting percentiles is an approximation — exact merging
   needs fio's json+ histogram bins.
2. Per point × direction, over repeats: mean, sample std, 95 % confidence
   half-width ``t(0.975, n-1) · std / √n``, and CV ``std / mean``.

The t quantile comes from a table for 1–30 degrees of freedom and, above
that, the Cornish–Fisher expansion around the normal quantile (error < 1e-4),
so scipy is not needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from iobench.errors import ResultsError
from iobench.fioout import FRAME_METRICS

#: Metrics summarised over repeats; each gives ``<m>_mean``, ``_std``, ``_ci95``, ``_cv``.
SUMMARY_METRICS: tuple[str, ...] = (
    "iops",
    "bw_bytes",
    "lat_mean_us",
    "clat_mean_us",
    "clat_p50_us",
    "clat_p90_us",
    "clat_p99_us",
    "clat_p99_9_us",
    "usr_cpu",
    "sys_cpu",
    "cpu_us_per_io",
    "inflight",
)

#: Columns that identify a row or describe an observation, never a parameter.
IDENTITY_COLUMNS: frozenset[str] = frozenset(
    {
        "run_id",
        "repeat",
        "host",
        "jobname",
        "job_index",
        "direction",
        "status",
        "reason",
        "source",
        "cpus_observed",
        "runtime_requested_ms",
    }
)

_SUMMED = ("iops", "bw_bytes", "io_bytes", "ctx")
_WEIGHTED = (
    "lat_mean_us",
    "clat_mean_us",
    "slat_mean_us",
    "clat_p50_us",
    "clat_p90_us",
    "clat_p99_us",
    "clat_p99_9_us",
    "cpu_us_per_io",
)

# Student t quantile at 0.975 for 1..30 degrees of freedom.
_T975 = (
    12.706204736,
    4.302652730,
    3.182446305,
    2.776445105,
    2.570581836,
    2.446911851,
    2.364624252,
    2.306004135,
    2.262157163,
    2.228138852,
    2.200985160,
    2.178812830,
    2.160368656,
    2.144786688,
    2.131449546,
    2.119905299,
    2.109815578,
    2.100922040,
    2.093024054,
    2.085963447,
    2.079613845,
    2.073873068,
    2.068657610,
    2.063898562,
    2.059538553,
    2.055529439,
    2.051830516,
    2.048407142,
    2.045229642,
    2.042272456,
)
_Z975 = 1.959963984540054


def t975(dof: int) -> float:
    """Return the 0.975 quantile of Student's t with ``dof`` degrees of freedom.

    Parameters
    ----------
    dof : int
        Degrees of freedom, at least 1.

    Returns
    -------
    float
        Exact to 9 digits for ``dof <= 30``; within 1e-4 above.
    """
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    if dof <= len(_T975):
        return _T975[dof - 1]
    z, n = _Z975, float(dof)
    return (
        z
        + (z**3 + z) / (4 * n)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * n**3)
    )


def default_by(df: pd.DataFrame) -> list[str]:
    """The parameter columns: ``point`` plus every non-identity, non-metric column."""
    skip = IDENTITY_COLUMNS | set(FRAME_METRICS)
    cols = [c for c in df.columns if c not in skip]
    return (["point"] if "point" in cols else []) + [c for c in cols if c != "point"]


def _weighted(values: pd.Series, weights: pd.Series) -> float:
    mask = values.notna() & weights.notna() & (weights > 0)
    if not mask.any():
        return math.nan
    v = values[mask].to_numpy(dtype=float)
    w = weights[mask].to_numpy(dtype=float)
    return float(np.average(v, weights=w))


def _combine_jobs(group: pd.DataFrame) -> pd.Series:
    ios = group["iops"].astype("Float64") * group["runtime_ms"].astype("Float64") / 1000
    out: dict[str, float] = {}
    for column in _SUMMED:
        if column in group:
            out[column] = group[column].sum(min_count=1)
    if "runtime_ms" in group:
        out["runtime_ms"] = group["runtime_ms"].max()
    for column in _WEIGHTED:
        if column in group:
            out[column] = _weighted(group[column], ios)
    for column in ("usr_cpu", "sys_cpu"):
        if column in group:
            out[column] = group[column].mean()
    if "runtime_requested_ms" in group:
        out["runtime_requested_ms"] = group["runtime_requested_ms"].max()
    out["inflight"] = out.get("iops", math.nan) * out.get("lat_mean_us", math.nan) / 1e6
    out["jobs"] = float(len(group))
    return pd.Series(out, dtype="Float64")


def _over_repeats(group: pd.DataFrame, metrics: list[str], noisy_cv: float) -> pd.Series:
    out: dict[str, object] = {"n": len(group)}
    for metric in metrics:
        values = group[metric].dropna().to_numpy(dtype=float)
        n = len(values)
        mean = float(values.mean()) if n else math.nan
        std = float(values.std(ddof=1)) if n > 1 else math.nan
        ci = t975(n - 1) * std / math.sqrt(n) if n > 1 else math.nan
        cv = std / mean if n > 1 and mean != 0 else math.nan
        out.update({f"{metric}_mean": mean, f"{metric}_std": std, f"{metric}_ci95": ci, f"{metric}_cv": cv})
    key = "iops_cv" if "iops" in metrics else "bw_bytes_cv"
    out["noisy"] = bool(out.get(key, math.nan) > noisy_cv)  # type: ignore[operator]
    short = False
    if "runtime_requested_ms" in group:
        requested = group["runtime_requested_ms"]
        short = bool((group["runtime_ms"] < requested).fillna(False).any())
    out["short_runtime"] = short
    return pd.Series(out)


def _output_columns(keys: list[str], metrics: list[str]) -> list[str]:
    stats = [f"{m}_{s}" for m in metrics for s in ("mean", "std", "ci95", "cv")]
    return [*keys, "direction", "n", *stats, "noisy", "short_runtime"]


def summarize(df: pd.DataFrame, *, by: Sequence[str] | None = None, noisy_cv: float = 0.05) -> pd.DataFrame:
    """Summarise a tidy results frame per point over its repeats.

    Parameters
    ----------
    df : pandas.DataFrame
        The tidy frame (SPEC §6). Rows whose ``status`` is not ``ok`` are
        ignored; rows without a direction (jobs that did no I/O) too. Without a
        ``repeat`` column every row counts as repeat 0.
    by : sequence of str, optional
        Columns that define a point. Default: ``point`` plus every column that
        is neither an identity column nor a metric (the matrix parameters).
        ``direction`` is always added.
    noisy_cv : float, default 0.05
        A point is flagged ``noisy`` when the CV of its IOPS over repeats (of
        bandwidth where IOPS is absent) exceeds this.

    Returns
    -------
    pandas.DataFrame
        One row per point × direction: the ``by`` columns, ``direction``, ``n``
        (repeats), ``<metric>_mean``, ``_std``, ``_ci95`` and ``_cv`` for each of
        :data:`SUMMARY_METRICS` present (NA where fewer than 2 repeats),
        ``noisy``, and ``short_runtime`` (a repeat ran shorter than
        ``runtime_requested_ms``, when that column exists).

    Raises
    ------
    ResultsError
        ``by`` names a column the frame does not have.
    """
    keys = list(by) if by is not None else default_by(df)
    missing = [c for c in keys if c not in df.columns]
    if missing:
        raise ResultsError(f"summarize: no column {', '.join(map(repr, missing))} in the frame")
    data = df
    if "status" in data.columns:
        data = data[data["status"] == "ok"]
    data = data[data["direction"].notna()]
    if "repeat" not in data.columns:
        data = data.assign(repeat=0)
    keys = [k for k in keys if k not in ("direction", "repeat")]
    if data.empty:
        metrics = [m for m in SUMMARY_METRICS if m in data.columns]
        return pd.DataFrame(columns=_output_columns(keys, metrics))
    per_repeat = (
        data.groupby([*keys, "repeat", "direction"], dropna=False, sort=True)[
            [c for c in data.columns if c not in (*keys, "repeat", "direction")]
        ]
        .apply(_combine_jobs)
        .reset_index()
    )
    metrics = [m for m in SUMMARY_METRICS if m in per_repeat.columns]
    out_cols = _output_columns(keys, metrics)
    group_keys = [*keys, "direction"]
    records = []
    for key, group in per_repeat.groupby(group_keys, dropna=False, sort=True):
        values = key if isinstance(key, tuple) else (key,)
        stats = _over_repeats(group, metrics, noisy_cv).to_dict()
        records.append(dict(zip(group_keys, values, strict=True)) | stats)
    summary = pd.DataFrame(records)
    for column in summary.columns:
        if column.endswith(("_mean", "_std", "_ci95", "_cv")):
            summary[column] = summary[column].astype("Float64")
    summary["n"] = summary["n"].astype("Int64")
    summary["noisy"] = summary["noisy"].astype("boolean")
    summary["short_runtime"] = summary["short_runtime"].astype("boolean")
    return summary[out_cols]

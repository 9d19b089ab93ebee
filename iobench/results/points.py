"""What a point's numbers are: one module, used by the report, every figure, the CLI and notebooks.

A point is what fio calls a group (``group_reporting``): every job of every
target (and host) that ran it, taken together. Its numbers follow fio's own
summing (``sum_thread_stats()`` and ``sum_group_stats()`` in fio's stat.c;
docs/numbers.md has the derivation):

=================================  ==============================================================
column                             a point × repeat × direction
=================================  ==============================================================
``total_ios``, ``io_bytes``        summed over the jobs (a job without ``total_ios``: iops ×
                                   runtime; without ``io_bytes``: bw_bytes × runtime)
``runtime_ms``                     the longest job's
``iops``, ``bw_bytes``             ``total_ios`` and ``io_bytes`` over the longest runtime
``lat/clat/slat_mean_us``          the jobs' means weighted by their I/Os (fio: by samples)
``clat_p*_us``                     fio's percentile of the jobs' merged json+ histograms; else
                                   the one job's own; else (``pct_exact`` false) the jobs'
                                   percentiles weighted by their I/Os — an approximation
``lat_p*_us``, ``slat_p*_us``      from merged ``lat_bins``/``slat_bins``, where fio wrote them
``usr_cpu``, ``sys_cpu``           CPU time summed over time summed: the jobs' percentages
                                   weighted by ``job_runtime_ms``
``ctx``, ``job_runtime_ms``        summed
``cpu_us_per_io``                  the jobs' CPU time over their I/Os (every direction)
``inflight``                       Little's law on the point: ``iops × lat_mean_us / 1e6``
=================================  ==============================================================

**A point on several hosts** (a group whose rows name two hosts or more) is
the cluster: its ``iops`` and ``bw_bytes`` are all its hosts' I/Os and bytes
within the window all of them ran (``window_ios``, ``window_s``:
:mod:`iobench.results.hostspan`) over that window; ``total_ios``,
``io_bytes`` and ``runtime_ms`` stay fio's group rule over every host (all
I/Os, the longest runtime), the percentiles come from every host's merged
histograms, and ``hosts`` says how many hosts the total sums. Where a host's
window is unknown (a run from before iobench logged hosts in Unix time, a log
missing) the point falls back to fio's group rule over all hosts, and
``window_s`` is NA. ``by=["host"]`` gives each host its own row, by fio's rule.

A sum or mean over a point is NA when any of its jobs lacks the value: a total
over some of the jobs is not the point's. Without a ``runtime_ms`` column (a
hand-made frame) every job counts as running equally long.

:func:`point_totals` applies these rules; :func:`summarize` then takes a point's
repeats: mean, sample std, 95 % confidence half-width ``t(0.975, n-1) · std / √n``
and CV ``std / mean``, plus the ``noisy`` and ``short_runtime`` flags;
:func:`headline` is the one line the CLI prints per point.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from iobench.errors import ResultsError
from iobench.planner.placement import SAME_AS
from iobench.results import schema
from iobench.results.fioout.bins import decode
from iobench.results.fioout.frame import FRAME_HISTOGRAMS, FRAME_IDENTITY, FRAME_METRICS
from iobench.results.fioout.jobstats import PERCENTILES

#: Columns that identify a row (its run, point, repeat, job, direction, outcome): the schema's ``identity``.
IDENTITY: tuple[str, ...] = schema.group("identity")
#: Where and how a point ran, as recorded per row; not parameters.
PLACEMENT: tuple[str, ...] = schema.group("placement")
#: Columns that can differ from point to point: :func:`point_totals` keeps them (the distinct
#: values joined with ``+`` where a point spans several: ``a+b``, the hosts of a point on two).
CONTEXT: tuple[str, ...] = ("host", "target", "scheduler", "readahead_kb")
#: Columns :func:`point_totals` adds besides the metrics.
ADDED: tuple[str, ...] = ("jobs", "pct_exact")
#: When a point's hosts ran together, and the hosts far from the others (:mod:`iobench.results.hostspan`,
#: :mod:`iobench.results.hostoutliers`): the same on every row of a point × repeat (× direction),
#: but ``window_ios``, which is per job and direction.
HOSTS: tuple[str, ...] = schema.group("hosts")
#: The text columns among :data:`HOSTS`.
HOSTS_TEXT: frozenset[str] = frozenset(c for c in HOSTS if schema.dtype(c) == "string")
#: What :func:`summarize` keeps of them over repeats: the numbers' means, the outliers seen.
HOSTS_SUMMARY: tuple[str, ...] = ("window_s", "start_skew_ms", "overlap_pct", "host_outliers")
#: A point whose IOPS (bandwidth without IOPS) vary over its repeats by a CV above this is noisy:
#: the summary's ``noisy`` and the validity check of that name (docs/validity.md). Two repeats judge it.
NOISY_CV = 0.05
#: How ``steady_reason`` begins when fio's own steady-state detection (``steadystate=``) judged.
FIO_STEADY = "fio steadystate"
#: The telemetry summary of a point (:mod:`iobench.results.telemetry`, docs/telemetry.md), in frame
#: order: the ``dev_*`` numbers are the row's direction's, the rest the point × repeat's.
TELEMETRY: tuple[str, ...] = schema.group("telemetry")
#: The text columns among :data:`TELEMETRY`.
TELEMETRY_TEXT: frozenset[str] = frozenset(c for c in TELEMETRY if schema.dtype(c) == "string")
#: What :func:`summarize` keeps of them over repeats: the numbers' means, the verdicts and busiest threads seen.
TELEMETRY_SUMMARY: tuple[str, ...] = tuple(c for c in TELEMETRY if c not in TELEMETRY_TEXT) + (
    "top_thread",
    "bottleneck",
)

#: Is the number real? The validity checks' verdict per point × repeat (:mod:`iobench.results.validity`,
#: docs/validity.md): codes found, one sentence each, the checks that could not run.
VALIDITY: tuple[str, ...] = schema.group("validity")

#: The percentiles a point carries, by latency kind: ``clat_p99_us``, ``lat_p99_9_us``, ...
LATENCY_KINDS: tuple[str, ...] = ("clat", "lat", "slat")

#: Metrics :func:`summarize` takes over repeats (those present); each gives
#: ``<m>_mean``, ``_std``, ``_ci95`` and ``_cv``.
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

_MEANS = ("lat_mean_us", "clat_mean_us", "slat_mean_us")
_JOB_KEY = ("run_id", "source", "point", "repeat", "host", "target", "jobname", "job_index")

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

    A table for 1–30 degrees of freedom and, above, the Cornish–Fisher
    expansion around the normal quantile, so scipy is not needed.

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


def percentile_column(kind: str, percentile: float) -> str:
    """The column of a latency percentile: ``("clat", 99.9)`` → ``clat_p99_9_us``."""
    whole, _, fraction = f"{percentile:g}".partition(".")
    return f"{kind}_p{whole}{'_' + fraction if fraction else ''}_us"


def _percentile_columns() -> dict[str, dict[float, str]]:
    return {kind: {p: percentile_column(kind, p) for p in PERCENTILES} for kind in LATENCY_KINDS}


_PERCENTILES = _percentile_columns()


def _not_parameters() -> frozenset[str]:
    percentiles = {c for columns in _PERCENTILES.values() for c in columns.values()}
    # Every column the schema declares, fio's row columns, the percentiles point_totals adds.
    return frozenset(
        {*schema.BY_NAME, *FRAME_IDENTITY, *FRAME_METRICS, *FRAME_HISTOGRAMS, *percentiles, "source"}
    )


_NOT_PARAMETERS = _not_parameters()


def parameter_columns(df: pd.DataFrame) -> list[str]:
    """The matrix axes present in ``df``.

    Parameters
    ----------
    df : pandas.DataFrame
        A tidy frame, point totals or a summary.

    Returns
    -------
    list of str
        Every column that is not identity, placement, bookkeeping, a metric, a
        histogram or a column :func:`point_totals` adds, in frame order.
    """
    return [c for c in df.columns if c not in _NOT_PARAMETERS]


def data_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows that are data: status ``ok`` (when there is a status) and a direction that did I/O."""
    if "status" in df:
        df = df[df["status"].eq("ok").fillna(False)]
    return df[df["direction"].notna()] if "direction" in df else df


def outcomes(df: pd.DataFrame) -> dict[str, int]:
    """What became of a frame's point-runs, each counted once.

    Returns
    -------
    dict of str to int
        Runs (point × repeat) by status, ``ok``, ``failed``, ``timeout``, …;
        then points, not runs, for what was never run: ``skipped`` (could not
        be placed, with a reason) and ``same`` (skipped as the same placement
        as another point here, its reason ``same as point N: why``). Statuses
        with no run are left out; empty for a frame without ``status``.
    """
    if "status" not in df:
        return {}
    keys = [c for c in ("run_id", "point", "repeat") if c in df]
    runs = df.drop_duplicates(keys) if keys else df
    status = runs["status"].astype("string").fillna("unknown")
    skipped = status.eq("skipped")
    counts = {str(s): int(n) for s, n in status[~skipped].value_counts(sort=False).items()}
    never = runs[skipped.to_numpy()]
    same = (
        never["reason"].astype("string").str.startswith(SAME_AS).fillna(False).to_numpy(dtype=bool)
        if "reason" in never
        else np.zeros(len(never), dtype=bool)
    )
    points = [c for c in ("run_id", "point") if c in never]
    for name, part in (("skipped", never[~same]), ("same", never[same])):
        if len(part):
            counts[name] = len(part.drop_duplicates(points)) if points else len(part)
    return counts


def _point_keys(rows: pd.DataFrame) -> list[str]:
    """``run_id``, ``point`` (else ``source``: each fio output is a point), ``groupid``, ``repeat``, ``direction``.

    fio reports each group of a job file on its own (``stonewall``/``new_group``
    run them one after another), so one group is never added to another.
    """
    point = "point" if "point" in rows or "source" not in rows else "source"
    group = ["groupid"] if "groupid" in rows and rows["groupid"].notna().any() else []
    return [c for c in ("run_id", point, *group, "repeat", "direction") if c in rows]


def _keys(rows: pd.DataFrame, by: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """The grouping columns of a point × repeat × direction (then ``by``), and its context columns."""
    split = list(dict.fromkeys(by or ()))
    missing = [c for c in split if c not in rows.columns]
    if missing:
        raise ResultsError(f"no column {', '.join(map(repr, missing))} in the frame to split points by")
    params = [c for c in parameter_columns(rows) if rows[c].notna().any()]
    keys = list(dict.fromkeys([*_point_keys(rows), *params, *split]))
    context = [c for c in CONTEXT if c in rows and c not in keys]
    return keys, context


def _floats(rows: pd.DataFrame, column: str) -> np.ndarray:
    if column not in rows:
        return np.full(len(rows), np.nan)
    values = rows[column]
    if values.dtype.kind in "fiu":  # numbers already (nullable or not): no conversion through Float64
        return values.to_numpy(dtype=float, na_value=np.nan)
    return values.astype("Float64").to_numpy(dtype=float, na_value=np.nan)


class _Groups:
    """Sums, maxima and I/O-weighted means per group, NA where any member is NA."""

    def __init__(self, ids: np.ndarray, count: int) -> None:
        self.ids = ids
        self.count = count

    def sum(self, values: np.ndarray) -> np.ndarray:
        total = np.bincount(self.ids, weights=np.nan_to_num(values), minlength=self.count)
        missing = np.bincount(self.ids, weights=np.isnan(values), minlength=self.count) > 0
        return np.where(missing, np.nan, total)

    def max(self, values: np.ndarray) -> np.ndarray:
        out = np.full(self.count, -np.inf)
        np.maximum.at(out, self.ids, np.nan_to_num(values, nan=-np.inf))
        missing = np.bincount(self.ids, weights=np.isnan(values), minlength=self.count) > 0
        return np.where(missing | np.isinf(out), np.nan, out)

    def mean(self, values: np.ndarray, weights: np.ndarray) -> np.ndarray:
        return _ratio(self.sum(values * weights), self.sum(weights))


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / denominator, np.nan)


def merged_percentiles(
    cells: pd.Series, groups: np.ndarray, count: int, percentiles: Sequence[float]
) -> np.ndarray:
    """fio's percentiles (µs) of each group's merged json+ histograms.

    The histograms of a group's rows are added bin by bin (fio's
    ``sum_thread_stats()`` adds ``io_u_plat``), then each percentile is the
    value of the first bin at which the running count reaches ``p / 100 ×
    samples`` — ``calc_clat_percentiles()`` in fio's stat.c, with its long
    double arithmetic, so a single job's result is the value fio printed.

    Parameters
    ----------
    cells : pandas.Series
        A histogram column (:mod:`iobench.results.fioout.bins`), row by row.
    groups : numpy.ndarray
        The group of each row, ``0 <= group < count``.
    count : int
        How many groups.
    percentiles : sequence of float
        In percent (``99.9``).

    Returns
    -------
    numpy.ndarray
        ``count × len(percentiles)``; NaN for a group without bins.
    """
    out = np.full((count, len(percentiles)), np.nan)
    bins = decode(cells)
    if not len(bins.rows):
        return out
    group = groups[bins.rows]
    order = np.lexsort((bins.values_ns, group))
    group, value, counts = group[order], bins.values_ns[order], bins.counts[order]
    new_bin = np.ones(len(group), dtype=bool)
    new_bin[1:] = (group[1:] != group[:-1]) | (value[1:] != value[:-1])
    starts = np.flatnonzero(new_bin)
    counts = np.add.reduceat(counts, starts)
    group, value = group[starts], value[starts]
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    sizes = np.diff(np.r_[first, len(group)])
    running = np.cumsum(counts)
    running -= np.repeat(running[first] - counts[first], sizes)
    samples = np.repeat(running[first + sizes - 1], sizes).astype(np.longdouble)
    reached = running.astype(np.longdouble)
    for column, percentile in enumerate(percentiles):
        # fio: sum >= (long double) p / 100.0 * nr
        hit = np.flatnonzero(reached >= np.longdouble(percentile) / np.longdouble(100.0) * samples)
        firsts = np.r_[True, group[hit][1:] != group[hit][:-1]]
        out[group[hit][firsts], column] = value[hit][firsts] / 1000.0
    return out


def _one_or_joined(rows: pd.DataFrame, column: str, ids: np.ndarray, count: int) -> pd.Series:
    """Per group, its one value of ``column``, or the distinct values joined with ``+``."""
    codes, _ = pd.factorize(rows[column].array, use_na_sentinel=True)
    known = codes >= 0
    low = np.full(count, np.iinfo(np.int64).max)
    high = np.full(count, -1)
    np.minimum.at(low, ids[known], codes[known])
    np.maximum.at(high, ids[known], codes[known])
    if not (high > low).any():  # one value (or none) per group, as nearly always: no joining
        row = np.full(count, -1)
        row[ids[known][::-1]] = np.flatnonzero(known)[::-1]  # a row holding the group's value
        return pd.Series(rows[column].array.take(row, allow_fill=True))
    values = pd.DataFrame({"g": ids, "v": rows[column].array}).dropna().drop_duplicates()
    several = values["g"].duplicated(keep=False)
    if not several.any():
        one: pd.Series = values.set_index("g")["v"].reindex(range(count))
        return one
    joined = values[several].groupby("g")["v"].agg(lambda v: "+".join(sorted(map(str, v))))
    single = values[~several].set_index("g")["v"].astype(object)
    out: pd.Series = pd.concat([single, joined.astype(object)]).reindex(range(count))
    return out


def _job_ios_all_directions(rows: pd.DataFrame, ios: np.ndarray) -> np.ndarray:
    """Each row's job's I/Os over every direction (a job's CPU time is spent on all of them)."""
    key = [c for c in _JOB_KEY if c in rows]
    if not key or "direction" not in rows:
        return ios
    frame = rows[key].reset_index(drop=True).assign(_ios=ios)
    return frame.groupby(key, dropna=False, sort=False)["_ios"].transform("sum").to_numpy(dtype=float)


def _totals(rows: pd.DataFrame, keys: list[str], context: list[str]) -> pd.DataFrame:
    """Apply the point rules to ``rows`` (data rows only) grouped by ``keys``."""
    if keys:
        ids = rows.groupby(keys, dropna=False, sort=True).ngroup().to_numpy()
    else:
        ids = np.zeros(len(rows), dtype=np.int64)
    count = int(ids.max()) + 1 if len(ids) else 0
    groups = _Groups(ids, count)
    present = set(rows.columns)
    has_runtime = "runtime_ms" in present
    runtime = _floats(rows, "runtime_ms") if has_runtime else np.full(len(rows), 1000.0)
    ios = _floats(rows, "total_ios")
    ios = np.where(np.isnan(ios), _floats(rows, "iops") * runtime / 1000.0, ios)
    volume = _floats(rows, "io_bytes")
    volume = np.where(np.isnan(volume), _floats(rows, "bw_bytes") * runtime / 1000.0, volume)
    longest = groups.max(runtime)
    out: dict[str, np.ndarray] = {}
    out["iops"] = _ratio(groups.sum(ios) * 1000.0, longest)
    if {"io_bytes", "bw_bytes"} & present:
        out["bw_bytes"] = _ratio(groups.sum(volume) * 1000.0, longest)
    hosts = _host_counts(rows, ids, count) if "host" in present else None
    if hosts is not None and "window_ios" in present and "window_s" in present:
        _cluster_rates(rows, groups, hosts, ios, volume, out)
    # Without runtimes, volumes would only be the rates renamed: left out.
    if "io_bytes" in present or ("bw_bytes" in present and has_runtime):
        out["io_bytes"] = groups.sum(volume)
    if "total_ios" in present or has_runtime:
        out["total_ios"] = groups.sum(ios)
    if has_runtime:
        out["runtime_ms"] = longest
    for column in _MEANS:
        if column in present:
            out[column] = groups.mean(_floats(rows, column), ios)
    pct_exact = _percentiles(rows, ids, count, groups, ios, present, out)
    if "job_runtime_ms" in present:
        accounted = _floats(rows, "job_runtime_ms")
    else:
        accounted = np.ones(len(rows))
    for column in ("usr_cpu", "sys_cpu"):
        if column in present:
            out[column] = groups.mean(_floats(rows, column), accounted)
    if "ctx" in present:
        out["ctx"] = groups.sum(_floats(rows, "ctx"))
    if "job_runtime_ms" in present:
        out["job_runtime_ms"] = groups.sum(accounted)
    if "cpu_us_per_io" in present:
        out["cpu_us_per_io"] = groups.mean(_floats(rows, "cpu_us_per_io"), _job_ios_all_directions(rows, ios))
    if "lat_mean_us" in out:
        out["inflight"] = out["iops"] * out["lat_mean_us"] / 1e6
    if "runtime_requested_ms" in present:
        out["runtime_requested_ms"] = groups.max(_floats(rows, "runtime_requested_ms"))
    first = np.unique(ids, return_index=True)[1]
    # Every column is made first and the frame once: inserting them one by one costs more than computing them.
    columns: dict[str, Any] = {c: rows[c].array.take(first) for c in keys}
    columns.update((column, pd.array(values, dtype="Float64")) for column, values in out.items())
    columns["jobs"] = pd.array(np.bincount(ids, minlength=count), dtype="Int64")
    columns["pct_exact"] = pct_exact.array
    if hosts is not None:
        columns["hosts"] = pd.array(hosts, dtype="Int64")
    for column in context:
        columns[column] = _one_or_joined(rows, column, ids, count).array
    if "steady" in present:
        columns["steady"] = _all_of(rows["steady"], ids, count)
    if "steady_reason" in present:
        columns["steady_reason"] = _one_or_joined(rows, "steady_reason", ids, count).astype("string").array
    for column in (*TELEMETRY, *HOSTS):
        if (
            column in present and column != "window_ios"
        ):  # the same on every row of a point × repeat (× direction)
            if column in TELEMETRY_TEXT or column in HOSTS_TEXT:
                columns[column] = pd.array(_one_or_joined(rows, column, ids, count).array, dtype="string")
            else:
                numbers = _floats(rows, column)
                known = np.bincount(ids, weights=~np.isnan(numbers), minlength=count) > 0
                top = groups.max(np.where(np.isnan(numbers), -np.inf, numbers))
                columns[column] = pd.array(np.where(known, top, np.nan), dtype="Float64")
    return pd.DataFrame(columns, index=pd.RangeIndex(count))


def _host_counts(rows: pd.DataFrame, ids: np.ndarray, count: int) -> np.ndarray:
    """How many distinct hosts each group's rows name."""
    codes, _ = pd.factorize(rows["host"].array, use_na_sentinel=True)
    known = codes >= 0
    pairs = np.unique(ids[known].astype(np.int64) * (int(codes.max(initial=0)) + 1) + codes[known])
    return np.bincount(pairs // (int(codes.max(initial=0)) + 1), minlength=count)


def _cluster_rates(
    rows: pd.DataFrame,
    groups: _Groups,
    hosts: np.ndarray,
    ios: np.ndarray,
    volume: np.ndarray,
    out: dict[str, np.ndarray],
) -> None:
    """Groups of several hosts: ``iops`` and ``bw_bytes`` over the window all of them ran (module note)."""
    window_ios = _floats(rows, "window_ios")
    in_window = groups.sum(window_ios)
    window_s = groups.max(_floats(rows, "window_s"))
    # Each job's bytes follow its I/Os at its own mean size.
    window_bytes = groups.sum(window_ios * _ratio(volume, ios))
    cluster = (hosts >= 2) & np.isfinite(in_window) & (window_s > 0)
    out["window_ios"] = in_window
    out["iops"] = np.where(cluster, _ratio(in_window, window_s), out["iops"])
    if "bw_bytes" in out:
        out["bw_bytes"] = np.where(
            cluster & np.isfinite(window_bytes), _ratio(window_bytes, window_s), out["bw_bytes"]
        )


def _all_of(column: pd.Series, ids: np.ndarray, count: int) -> pd.api.extensions.ExtensionArray:
    """Per group: False when any row is False, else NA when any is NA, else True."""
    values = column.astype("boolean")
    false = (
        np.bincount(ids, weights=values.eq(False).fillna(False).to_numpy(dtype=float), minlength=count) > 0
    )
    unknown = np.bincount(ids, weights=values.isna().to_numpy(dtype=float), minlength=count) > 0
    flags: pd.api.extensions.ExtensionArray = _flags(~false, false | ~unknown).array
    return flags


def _percentiles(
    rows: pd.DataFrame,
    ids: np.ndarray,
    count: int,
    groups: _Groups,
    ios: np.ndarray,
    present: set[str],
    out: dict[str, np.ndarray],
) -> pd.Series:
    """Fill ``out`` with each kind's percentiles; return whether the clat ones are fio's own."""
    exact = _flags(np.zeros(count, dtype=bool), np.zeros(count, dtype=bool))
    for kind, columns in _PERCENTILES.items():
        cells = f"{kind}_bins"
        reported = [c for c in columns.values() if c in present]
        if cells not in present and not reported:
            continue
        merged = np.full((count, len(columns)), np.nan)
        complete = np.zeros(count, dtype=bool)
        if cells in present:
            has_bins = rows[cells].notna().to_numpy()
            complete = np.bincount(ids, weights=~has_bins, minlength=count) == 0
            merged = merged_percentiles(rows[cells], ids, count, list(columns))
            merged[~complete] = np.nan
        if kind != "clat":
            if complete.any():
                out.update({c: merged[:, i] for i, c in enumerate(columns.values())})
            continue
        single = np.bincount(ids, minlength=count) == 1
        for index, column in enumerate(columns.values()):
            if column not in present and not complete.any():
                continue
            values = _floats(rows, column)
            approx = np.full(count, np.nan)
            if column in present:  # one job: fio's own value; several: weighted by their I/Os
                approx = np.where(single, groups.sum(values), groups.mean(values, ios))
            out[column] = np.where(complete, merged[:, index], approx)
        if reported or complete.any():
            any_value = ~np.isnan(np.column_stack([out[c] for c in columns.values() if c in out])).all(axis=1)
            exact = _flags(complete | single, any_value)
    return exact


def _flags(values: np.ndarray, known: np.ndarray) -> pd.Series:
    """A nullable boolean column: ``values`` where ``known``, NA elsewhere."""
    return pd.Series(values, dtype="boolean").where(known)


def point_totals(df: pd.DataFrame, by: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per point × repeat × direction: its jobs and targets combined as fio combines a group.

    Parameters
    ----------
    df : pandas.DataFrame
        A tidy frame (docs/frame.md). Only rows with status ``ok`` and a direction
        count. A frame from :func:`iobench.parse_fio` has no ``point``: each fio
        output (``source``) is one.
    by : sequence of str, optional
        Columns that split a point further: ``["target"]`` gives each target's
        jobs a row of their own, ``["host"]`` each host's. By default a point's
        targets and hosts are combined.

    Returns
    -------
    pandas.DataFrame
        ``run_id``, ``point`` (else ``source``), ``repeat``, ``direction`` (those
        present), the parameter columns, the ``by`` columns; the metrics of the
        module's table that ``df`` allows (``Float64``); ``jobs`` (frame rows
        combined); ``pct_exact`` (the ``clat_p*_us`` are fio's own: merged json+
        bins, or one job's printed value; false: approximated; NA: none); then
        the :data:`CONTEXT` columns; then ``steady`` and ``steady_reason`` when
        ``df`` has them (a point × repeat judged as a whole); then the
        :data:`TELEMETRY` columns the frame has (the same on every row of a point × repeat × direction),
        ``hosts`` (how many hosts the total sums; with a ``host`` column) and
        the :data:`HOSTS` columns the frame has (``window_ios`` summed).

    Raises
    ------
    ResultsError
        ``df`` has neither ``iops`` nor ``total_ios``, or ``by`` names a column it lacks.

    Examples
    --------
    >>> totals = iobench.point_totals(df)                         # doctest: +SKIP
    >>> per_target = iobench.point_totals(df, by=["target"])      # doctest: +SKIP
    """
    memo = _SHARED.get()
    key = (id(df), tuple(by or ()))
    if memo is not None and key in memo and memo[key][0] is df:
        return memo[key][1].copy(deep=False)
    rows = data_rows(df).reset_index(drop=True)
    keys, context = _keys(rows, by)
    if rows.empty:
        return pd.DataFrame(columns=[*keys, "iops", *ADDED, *context])
    if "iops" not in rows and "total_ios" not in rows:
        raise ResultsError("point_totals: the frame has no `iops` column (nor `total_ios`)")
    totals = _totals(rows, keys, context)
    if memo is not None:
        memo[key] = (df, totals)  # holding df keeps its id from being reused within the block
        return totals.copy(deep=False)
    return totals


Shared = dict[tuple[int, tuple[str, ...]], tuple[pd.DataFrame, pd.DataFrame]]
"""Point totals already computed: (frame's id, ``by``) -> (the frame, its totals)."""

_SHARED: ContextVar[Shared | None] = ContextVar("iobench_shared_totals", default=None)


@contextlib.contextmanager
def shared_totals(memo: Shared | None = None) -> Iterator[Shared]:
    """Within the block, :func:`point_totals` of one frame object is computed once.

    For a report's or a figure set's many uses of one frame that nobody changes
    meanwhile (the merged percentiles of thousands of points cost seconds);
    each caller gets its own shallow copy. Within an enclosing block its memo
    is shared; pass the ``memo`` a block yielded to share it with a later block.
    """
    memo = memo if memo is not None else _SHARED.get()
    memo = {} if memo is None else memo
    token = _SHARED.set(memo)
    try:
        yield memo
    finally:
        _SHARED.reset(token)


#: A window's throughput metrics (summed over a point's jobs) and latency metrics (weighted by I/Os).
WINDOW_RATES: tuple[str, ...] = ("iops", "bw_bytes")
WINDOW_LATENCIES: tuple[str, ...] = ("lat_mean_us", "clat_mean_us", "slat_mean_us")


def window_totals(series: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """One row per point × repeat × window: its jobs and directions combined, as :func:`point_totals` does.

    Parameters
    ----------
    series : pandas.DataFrame
        The long frame of :func:`iobench.timeseries` (``point``, ``repeat``,
        ``host``, ``jobname``, ``job``, ``direction``, ``window``, ``t_s``,
        ``metric``, ``value``). A point's jobs are its hosts' jobs: on several
        hosts a window's sum is the cluster's.
    by : sequence of str, optional
        Columns that split a point further: ``["host"]`` gives each host's windows.

    Returns
    -------
    pandas.DataFrame
        ``point``, ``repeat`` (and ``run_id`` when present), the ``by``
        columns, ``window``, ``t_s`` (the window's latest time stamp), ``iops`` and ``bw_bytes``
        (summed over the jobs and directions that logged the window; a job with
        two samples in one window counts their mean), ``lat_mean_us``,
        ``clat_mean_us``, ``slat_mean_us`` (the jobs' means weighted by the
        IOPS each logged for the same direction and window; unweighted where
        the IOPS log lacks it), ``jobs`` (jobs with a throughput sample in the
        window) and ``complete`` (every job of the point × repeat has one: fio
        logs no sample for a window without I/O, and may miss a job's last
        window, so an incomplete window's sum is not the point's), in point,
        repeat and window order. Metrics the logs do not have are left out.
    """
    keys = [*(c for c in ("run_id", "point", "repeat") if c in series), *by]
    job = [c for c in ("host", "jobname", "job") if c in series and c not in by]
    cell_keys = [*keys, *job, "direction", "window"]
    wanted = series[series["metric"].isin([*WINDOW_RATES, *WINDOW_LATENCIES])]
    if wanted.empty:
        return pd.DataFrame(columns=[*keys, "window", "t_s", "jobs", "complete"])
    cells = wanted.groupby([*cell_keys, "metric"], dropna=False, sort=True, observed=True).agg(
        value=("value", "mean"), t_s=("t_s", "max")
    )
    wide = cells["value"].unstack("metric")
    stamp = cells["t_s"].groupby(level=cell_keys, dropna=False, sort=True).max()
    wide = wide.assign(_t=stamp).reset_index()
    window_keys = [*keys, "window"]
    grouped = wide.groupby(window_keys, dropna=False, sort=True)
    out = grouped["_t"].max().rename("t_s").to_frame()
    rate = next((m for m in WINDOW_RATES if m in wide), None)
    for metric in WINDOW_RATES:
        if metric in wide:
            out[metric] = grouped[metric].sum(min_count=1)
    weight = wide[rate].astype(float) if rate == "iops" else pd.Series(np.nan, index=wide.index)
    for metric in WINDOW_LATENCIES:
        if metric not in wide:
            continue
        value = wide[metric].astype(float)
        usable = value.notna() & weight.notna() & (weight > 0)
        weighted = _ratio(
            (value * weight)
            .where(usable)
            .groupby([wide[k] for k in window_keys], dropna=False)
            .sum()
            .to_numpy(),
            weight.where(usable).groupby([wide[k] for k in window_keys], dropna=False).sum().to_numpy(),
        )
        plain = grouped[metric].mean().to_numpy(dtype=float)
        out[metric] = np.where(np.isnan(weighted), plain, weighted)
    if rate is not None:
        logged = wide[rate].notna()
        jobs = wide[logged].drop_duplicates([*keys, *job, "window"])
        out["jobs"] = jobs.groupby(window_keys, dropna=False).size().reindex(out.index, fill_value=0)
        every = wide[logged].drop_duplicates([*keys, *job]).groupby(keys, dropna=False).size()
        out = out.reset_index()
        needed = every.reindex(pd.MultiIndex.from_frame(out[keys]) if len(keys) > 1 else out[keys[0]])
        out["complete"] = out["jobs"].to_numpy() == needed.fillna(-1).to_numpy()
    else:
        out = out.reset_index()
        out["jobs"], out["complete"] = 0, False
    for column in (*WINDOW_RATES, *WINDOW_LATENCIES):
        if column in out:
            out[column] = out[column].astype("Float64")
    out["jobs"] = out["jobs"].astype("Int64")
    return out


def over_repeats(totals: pd.DataFrame, by: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """Mean, sample std, 95 % confidence half-width, CV and count of ``metrics`` per ``by`` group.

    Parameters
    ----------
    totals : pandas.DataFrame
        Point totals (:func:`point_totals`).
    by : sequence of str
        The columns that tell points apart; what remains in a group is its repeats.
    metrics : sequence of str
        Columns of ``totals``.

    Returns
    -------
    pandas.DataFrame
        The ``by`` columns (sorted), then per metric ``<m>_mean``, ``<m>_std``,
        ``<m>_ci95`` (``t(0.975, n-1) · std / √n``), ``<m>_cv`` (``std / mean``)
        and ``<m>_n`` (repeats with a value); plain floats, NaN where undefined
        (std, CI and CV below two repeats, CV at a zero mean).
    """
    keys = list(by) or ["_all"]
    data = totals.assign(_all=0)
    values = pd.DataFrame(
        {m: data[m].astype("Float64").to_numpy(dtype=float, na_value=np.nan) for m in metrics}
    )
    values.index = data.index
    grouped = pd.concat([data[keys], values], axis=1).groupby(keys, dropna=False, sort=True)
    stats = grouped[list(metrics)].agg(["mean", "std", "count"])
    out = stats.index.to_frame(index=False)
    for metric in metrics:
        n = stats[(metric, "count")].to_numpy(dtype=float)
        mean = stats[(metric, "mean")].to_numpy(dtype=float)
        std = np.where(n >= 2, stats[(metric, "std")].to_numpy(dtype=float), np.nan)
        t = np.array([t975(int(k) - 1) if k >= 2 else math.nan for k in n])
        out[f"{metric}_mean"] = mean
        out[f"{metric}_std"] = std
        out[f"{metric}_ci95"] = t * std / np.sqrt(np.maximum(n, 1))
        out[f"{metric}_cv"] = _ratio(std, np.abs(mean)) if len(mean) else mean
        out[f"{metric}_n"] = n
    return out.drop(columns="_all", errors="ignore")


def summarize(
    df: pd.DataFrame,
    *,
    by: Sequence[str] | None = None,
    noisy_cv: float = NOISY_CV,
    steady_only: bool = False,
) -> pd.DataFrame:
    """Summarise each point over its repeats.

    Parameters
    ----------
    df : pandas.DataFrame
        The tidy frame (docs/frame.md); rows not ``ok`` and rows without a direction
        are ignored. Without a ``repeat`` column every row is repeat 0.
    by : sequence of str, optional
        Columns that split a point further, as in :func:`point_totals`.
    noisy_cv : float, default :data:`NOISY_CV` (0.05)
        A point is ``noisy`` when the CV of its IOPS over repeats (of its
        bandwidth where IOPS is absent) exceeds this.
    steady_only : bool, default False
        Leave out the repeats judged not steady (``steady`` false; see
        :mod:`iobench.results.steady`); repeats that could not be judged stay.

    Returns
    -------
    pandas.DataFrame
        One row per point × direction (× ``by``): ``run_id``, ``point`` (else
        ``source``), the parameter and ``by`` columns, ``direction``, ``n``
        (repeats), ``<metric>_mean``, ``_std``, ``_ci95`` and ``_cv`` for each of
        :data:`SUMMARY_METRICS` present and each ``lat_p*``/``slat_p*`` column
        (NA below two repeats), ``pct_exact`` (every repeat's percentiles are
        fio's own), ``noisy``, ``short_runtime`` (a repeat's longest job ran
        shorter than ``runtime_requested_ms``, unless fio stopped it on reaching
        steady state), ``unsteady`` (repeats judged not steady, counted before
        ``steady_only`` leaves them out; NA when the frame has no ``steady``
        column), ``hosts`` (with a ``host`` column: how many hosts the point's
        numbers sum, the most over its repeats), then the :data:`CONTEXT`
        columns, then, where the frame has telemetry, ``<m>_mean`` of its
        numbers and the distinct ``top_thread`` and ``bottleneck`` values over
        the repeats (joined with ``+``), and, for points on hosts,
        ``window_s_mean``, ``start_skew_ms_mean``, ``overlap_pct_mean`` and the
        distinct ``host_outliers`` of the repeats.

    Raises
    ------
    ResultsError
        ``by`` names a column the frame does not have.
    """
    totals = point_totals(df, by=by)
    keys, context = _keys(data_rows(df), by)
    keys = [k for k in keys if k not in ("repeat", "direction")] + (
        ["direction"] if "direction" in keys else []
    )
    extra = [c for cs in list(_PERCENTILES.values())[1:] for c in cs.values() if c in totals]
    metrics = [m for m in SUMMARY_METRICS if m in totals] + extra
    stats = [f"{m}_{s}" for m in metrics for s in ("mean", "std", "ci95", "cv")]
    observed = [c for c in (*TELEMETRY_SUMMARY, *HOSTS_SUMMARY) if c in totals]
    numbers = [c for c in observed if c not in TELEMETRY_TEXT and c not in HOSTS_TEXT]
    telemetry = [f"{c}_mean" if c in numbers else c for c in observed]
    hosts = ["hosts"] if "hosts" in totals else []
    columns = [
        *keys,
        "n",
        *stats,
        "pct_exact",
        "noisy",
        "short_runtime",
        "unsteady",
        *hosts,
        *context,
        *telemetry,
    ]
    if totals.empty:
        return pd.DataFrame(columns=columns)
    not_steady = _not_steady(totals)
    unsteady = (
        not_steady.groupby([totals[k] for k in keys], dropna=False, sort=False).transform("sum")
        if keys
        else pd.Series(int(not_steady.sum()), index=totals.index)
    )
    if steady_only:
        totals, unsteady = totals[~not_steady], unsteady[~not_steady]
        if totals.empty:
            return pd.DataFrame(columns=columns)
    summary = over_repeats(totals, keys, metrics)
    ids = totals.groupby(keys, dropna=False, sort=True).ngroup().to_numpy()
    count = len(summary)
    summary["n"] = pd.Series(np.bincount(ids, minlength=count), dtype="Int64").array
    for column in stats:
        summary[column] = summary[column].astype("Float64")
    exact = totals["pct_exact"].astype("boolean")
    known = np.bincount(ids, weights=exact.notna().to_numpy(), minlength=count) > 0
    all_exact = np.bincount(ids, weights=exact.eq(False).fillna(False).to_numpy(), minlength=count) == 0
    summary["pct_exact"] = _flags(all_exact, known).array
    cv = summary.get("iops_cv", summary.get("bw_bytes_cv"))
    noisy = np.zeros(count, dtype=bool) if cv is None else (cv > noisy_cv).fillna(False).to_numpy(dtype=bool)
    summary["noisy"] = _flags(noisy, np.ones(count, dtype=bool)).array
    short = np.zeros(count, dtype=bool)
    if "runtime_requested_ms" in totals and "runtime_ms" in totals:
        ran_short = (totals["runtime_ms"] < totals["runtime_requested_ms"]).fillna(False).to_numpy(dtype=bool)
        short = np.bincount(ids, weights=ran_short & ~_stopped_steady(totals), minlength=count) > 0
    summary["short_runtime"] = _flags(short, np.ones(count, dtype=bool)).array
    first = np.unique(ids, return_index=True)[1]
    counted = pd.array(unsteady.to_numpy()[first], dtype="Int64")
    summary["unsteady"] = counted if "steady" in totals else pd.array([pd.NA] * count, dtype="Int64")
    if hosts:
        most = np.zeros(count, dtype=np.int64)
        np.maximum.at(most, ids, totals["hosts"].fillna(0).to_numpy(dtype=np.int64))
        summary["hosts"] = pd.array(most, dtype="Int64")
    for column in context:
        summary[column] = _one_or_joined(totals, column, ids, count).array
    if numbers:
        means = over_repeats(totals, keys, numbers)
        for column in numbers:
            summary[f"{column}_mean"] = means[f"{column}_mean"].astype("Float64").array
    for column in observed:
        if column == "host_outliers":  # the hosts any repeat named, once each
            summary[column] = _named_over_repeats(totals[column], ids, count)
        elif column in TELEMETRY_TEXT or column in HOSTS_TEXT:
            summary[column] = pd.array(_one_or_joined(totals, column, ids, count).array, dtype="string")
    return summary[columns]


def _named_over_repeats(names: pd.Series, ids: np.ndarray, count: int) -> pd.api.extensions.ExtensionArray:
    """Per group, every name any of its rows holds (space-separated), in first-seen order; NA when none was judged."""
    found: list[list[str] | None] = [None] * count
    for group, text in zip(ids.tolist(), names.astype(object).tolist(), strict=True):
        if not isinstance(text, str):  # NA: not judged
            continue
        known = found[group] = found[group] or []
        known += [n for n in str(text).split() if n not in known]
    joined: pd.api.extensions.ExtensionArray = pd.array(
        [None if n is None else " ".join(n) for n in found], dtype="string"
    )
    return joined


def _not_steady(totals: pd.DataFrame) -> pd.Series:
    """Each row's repeat was judged not steady."""
    if "steady" not in totals:
        return pd.Series(False, index=totals.index)
    return totals["steady"].astype("boolean").eq(False).fillna(False).astype(bool)


def _stopped_steady(totals: pd.DataFrame) -> np.ndarray:
    """Each row's repeat ended early because fio's ``steadystate=`` detection was satisfied."""
    if "steady" not in totals or "steady_reason" not in totals:
        return np.zeros(len(totals), dtype=bool)
    by_fio = totals["steady_reason"].astype("string").str.startswith(FIO_STEADY).fillna(False)
    return (totals["steady"].astype("boolean").fillna(False) & by_fio).to_numpy(dtype=bool)


#: What a point's rates are computed from (:func:`rate_totals`).
_RATES = ("iops", "total_ios", "runtime_ms", "io_bytes", "bw_bytes")
_HEADLINE = (*_RATES, "lat_mean_us")


def rate_totals(df: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """:func:`point_totals` of ``df`` for the rates alone: ``iops``, ``bw_bytes``, ``io_bytes``, ``total_ios``, ``runtime_ms``.

    The same rules on the same rows, per ``run_id``, ``point`` (else
    ``source``), ``groupid``, ``repeat``, ``direction`` and the ``by``
    columns, without merging latency histograms for percentiles, which costs
    many times the rest.
    """
    keep = ("run_id", "point", "source", "groupid", "repeat", "direction", "status", *_RATES, *by)
    return point_totals(df[[c for c in dict.fromkeys(keep) if c in df]], by=list(by) or None)


class Headline(NamedTuple):
    """The CLI's figures of one finished point (:func:`headline`)."""

    iops: float | None
    """IOPS summed over the directions: the cluster's over the window all hosts ran, on several hosts."""
    lat_mean_us: float | None
    """The mean latency of the point's I/Os (µs)."""
    hosts: int
    """How many hosts the IOPS sums (1: this machine, or one host)."""


def headline(frames: pd.DataFrame | Sequence[pd.DataFrame]) -> Headline:
    """The CLI's line for one finished point: its IOPS (every direction), mean latency and hosts.

    Parameters
    ----------
    frames : pandas.DataFrame or sequence of them
        fio's outputs of one point × repeat as :func:`iobench.parse_fio_text`
        gives them (one frame per fio process, or one frame); on several
        hosts with ``window_s`` and ``window_ios``
        (:func:`iobench.results.assemble.with_host_window`), so the IOPS are
        the cluster's as :func:`point_totals` gives them.

    Returns
    -------
    Headline
        The point's IOPS summed over its directions, ``lat_mean_us`` weighted
        by each direction's I/Os (``None`` where there is none), and how many
        hosts the IOPS sum.
    """
    parts = [frames] if isinstance(frames, pd.DataFrame) else list(frames)
    rows = data_rows(pd.concat(parts, ignore_index=True)) if parts else pd.DataFrame()
    hosts = int(rows["host"].nunique()) if "host" in rows and rows["host"].notna().any() else 1
    if rows.empty or "iops" not in rows or rows["iops"].isna().all():
        return Headline(None, None, hosts)
    # Only what the line shows: the percentiles (json+ bins decoded and merged) would cost 20x the rest.
    needed = [c for c in ("direction", "host", "window_s", "window_ios", *_HEADLINE) if c in rows]
    directions = _totals(rows[needed].reset_index(drop=True), ["direction"], [])
    iops = directions["iops"].astype("Float64")
    if iops.isna().all():
        return Headline(None, None, hosts)
    lat = (
        directions["lat_mean_us"] if "lat_mean_us" in directions else pd.Series(pd.NA, index=directions.index)
    )
    weights = directions["total_ios"].astype("Float64")
    valid = lat.notna() & weights.notna() & (weights > 0)
    mean = float((lat[valid] * weights[valid]).sum() / weights[valid].sum()) if valid.any() else None
    return Headline(float(iops.sum()), mean, hosts)

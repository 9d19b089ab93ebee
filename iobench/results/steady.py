"""Did a point settle? One verdict per point × repeat: the frame's ``steady`` and ``steady_reason``.

Two sources, one column:

1. **fio's own verdict**, when the point used fio's steady-state detection
   (``steadystate_duration`` above 0, with ``steadystate`` and
   ``steadystate_ramp_time``): fio stops a job once its criterion holds over
   the rolling window and reports ``"steadystate": {"attained": 0|1, ...}``
   per job (per group with ``group_reporting``). The point × repeat is steady
   when every reported job or group attained it.
2. **The time series** otherwise (:func:`iobench.timeseries`): the point's
   IOPS per window (its jobs and directions summed,
   :func:`iobench.results.points.window_totals`; bandwidth where there is no
   IOPS log), over the last :data:`LAST_WINDOWS` windows that every job logged
   (SNIA's steady-state test judges five rounds; here a round is one of fio's
   windows). Steady when both hold:

   - *level*: the mean of each pair of consecutive judged windows lies within
     ±:data:`MAX_DEVIATION` (20 %) of the median of those means. Pairs, because
     a window that a busy host slowed down is repaid in the next one (fio's
     rate limiter catches up, a queue drains): the pair's mean is unmoved,
     while a change that lasts moves the pairs it spans by at least half of
     its size.
   - *trend*, judged over :data:`TREND_WINDOWS` (5) windows or more: the
     least-squares line through the judged windows changes by at most
     :data:`MAX_DRIFT` (10 %) of their median across them, or its slope is not
     significant (``|t| <`` Student's t at 97.5 %, ``n - 2`` degrees of
     freedom): noise does not make a trend, and three or four windows cannot
     tell one from it.

   Fewer than :data:`MIN_WINDOWS` complete windows cannot be judged: ``steady``
   is NA and the reason says why (the run was shorter than three windows of
   ``log_avg_msec``).

``steady`` is NA for points that did not finish ``ok`` and for points without
logs (runs made before iobench asked fio for them). docs/timeseries.md
explains the choices and shows what a busy host does to fio's windows.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from iobench.results.fioout import detect
from iobench.results.points import FIO_STEADY, t975, window_totals
from iobench.results.timeseries import RunLogs, read_run_logs, run_dir_of
from iobench.store.records import PointMeta
from iobench.store.rundir import RunDir
from iobench.store.untrusted import FIO_TEXT, read_bytes, run_of

#: Judge the last this many complete windows (fewer when the run has fewer).
LAST_WINDOWS = 5
#: Below this many complete windows a point × repeat is not judged.
MIN_WINDOWS = 3
#: Largest distance of a pair of windows' mean from the median of those means, relative to it.
MAX_DEVIATION = 0.20
#: Largest change of a significant fitted line across the judged windows, relative to their median.
MAX_DRIFT = 0.10
#: The trend is judged only over this many windows or more.
TREND_WINDOWS = 5
NO_LOGS = "no fio logs in the point directory (a run made before iobench wrote them)"
#: The verdict frame's columns.
VERDICT_COLUMNS: tuple[str, ...] = (
    "point",
    "repeat",
    "steady",
    "steady_reason",
    "judged_from_s",
    "judged_to_s",
)


def _pct(value: float) -> str:
    return f"{value * 100:.1f} %"


def _secs(value: float) -> str:
    return f"{value:g} s"


def judge_windows(
    windows: pd.DataFrame,
    timing: pd.DataFrame | None = None,
    *,
    by: Sequence[str] = (),
    last: int = LAST_WINDOWS,
    min_windows: int = MIN_WINDOWS,
    max_deviation: float = MAX_DEVIATION,
    max_drift: float = MAX_DRIFT,
) -> pd.DataFrame:
    """Judge each point × repeat from its window totals (the criterion of the module docstring).

    Parameters
    ----------
    windows : pandas.DataFrame
        :func:`iobench.results.points.window_totals` of a time series.
    timing : pandas.DataFrame, optional
        Per point × repeat ``window_s`` (``log_avg_msec``), to word the reasons
        and place the judged span; every point × repeat in it gets a row,
        judged or not (without ``by``).
    by : sequence of str, optional
        The columns ``windows`` were split by (``window_totals(series, by=["host"])``):
        each of their values is judged on its own, and named in the result.
    last, min_windows, max_deviation, max_drift
        The criterion's settings (the module's constants by default).

    Returns
    -------
    pandas.DataFrame
        :data:`VERDICT_COLUMNS` (the ``by`` columns after ``repeat``):
        ``steady`` (boolean, NA when not judged), ``steady_reason``, and the
        span judged (``judged_from_s``, the start of the first judged window,
        to ``judged_to_s``, the end of the last).
    """
    split = list(by)
    keys = ["point", "repeat", *split]
    metric = "iops" if "iops" in windows else "bw_bytes" if "bw_bytes" in windows else None
    window_s: dict[tuple[int, int], float] = {}
    if timing is not None and not timing.empty:
        window_s = {
            (int(p), int(r)): float(w)
            for p, r, w in zip(timing["point"], timing["repeat"], timing["window_s"], strict=True)
        }
    rows: list[dict[str, Any]] = []
    if metric is not None and not windows.empty:
        usable = windows[windows["complete"].astype(bool) & windows[metric].notna()]
        usable = usable.sort_values([*keys, "window"])
        points = usable["point"].to_numpy(dtype=np.int64)
        repeats = usable["repeat"].to_numpy(dtype=np.int64)
        extra = [usable[c].to_numpy(dtype=object) for c in split]
        times = usable["t_s"].to_numpy(dtype=float)
        values = usable[metric].to_numpy(dtype=float, na_value=np.nan)
        change = (points[1:] != points[:-1]) | (repeats[1:] != repeats[:-1])
        for column in extra:
            change |= column[1:] != column[:-1]
        starts = np.flatnonzero(np.r_[True, change]) if len(points) else np.array([], dtype=np.int64)
        for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(points)], strict=True):
            key = (int(points[start]), int(repeats[start]))
            x, y = times[start:end][-last:], values[start:end][-last:]
            row = _verdict(
                key, x, y, end - start, metric, window_s.get(key), min_windows, max_deviation, max_drift
            )
            rows.append({**row, **{c: v[start] for c, v in zip(split, extra, strict=True)}})
    if not split:
        seen = {(r["point"], r["repeat"]) for r in rows}
        for key in sorted(set(window_s) - seen):
            rows.append(_unjudged(key, 0, window_s[key], min_windows, metric))
    columns = [*keys, *VERDICT_COLUMNS[2:]]
    return _typed(pd.DataFrame(rows, columns=columns))


def _unjudged(
    key: tuple[int, int], n: int, window: float | None, min_windows: int, metric: str | None
) -> dict[str, Any]:
    if metric is None:
        reason = "no IOPS or bandwidth log to judge from"
    else:
        size = f" of {_secs(window)}" if window else ""
        reason = (
            f"{n} complete window{'' if n == 1 else 's'}{size}, {min_windows} needed to judge: "
            "run longer or lower log_avg_msec"
        )
    return {
        "point": key[0],
        "repeat": key[1],
        "steady": None,
        "steady_reason": reason,
        "judged_from_s": math.nan,
        "judged_to_s": math.nan,
    }


def _trend(x: np.ndarray, y: np.ndarray) -> tuple[float, bool]:
    """The least-squares slope of ``y`` over ``x``, and whether it is significant at 95 % (two-sided)."""
    dx = x - x.mean()
    sxx = float(dx @ dx)
    if sxx <= 0:
        return 0.0, False
    slope = float(dx @ (y - y.mean())) / sxx
    residual = y - y.mean() - slope * dx
    if len(x) < 3:
        return slope, False
    variance = float(residual @ residual) / (len(x) - 2)
    if variance <= 0:
        return slope, slope != 0
    return slope, abs(slope) / math.sqrt(variance / sxx) > t975(len(x) - 2)


def _verdict(
    key: tuple[int, int],
    x: np.ndarray,
    y: np.ndarray,
    complete: int,
    metric: str,
    window: float | None,
    min_windows: int,
    max_deviation: float,
    max_drift: float,
) -> dict[str, Any]:
    n = len(y)
    if n < min_windows:
        return _unjudged(key, complete, window, min_windows, metric)
    name = "IOPS" if metric == "iops" else "bandwidth"
    # A window's time stamp is its end: the judged span begins one window before the first.
    begin = max(0.0, float(x[0]) - (window or 0.0))
    base = {"point": key[0], "repeat": key[1], "judged_from_s": begin, "judged_to_s": float(x[-1])}
    pairs = (y[1:] + y[:-1]) / 2
    centre = float(np.median(pairs))
    if not centre > 0:
        return {**base, "steady": None, "steady_reason": f"no I/O in the last {n} windows"}
    deviation = float(np.max(np.abs(pairs - centre))) / centre
    slope, significant = _trend(x, y)
    drift = abs(slope) * float(x[-1] - x[0]) / centre
    judged = n >= TREND_WINDOWS
    size = f" of {_secs(window)}" if window else ""
    over = f"over the last {n} windows{size}"
    if deviation > max_deviation:
        reason = (
            f"{name} moved {_pct(deviation)} from its median (means of window pairs; "
            f"limit {_pct(max_deviation)}) {over}"
        )
        return {**base, "steady": False, "steady_reason": reason}
    if judged and significant and drift > max_drift:
        trend = "rose" if slope > 0 else "fell"
        reason = f"{name} {trend} {_pct(drift)} along a significant trend (limit {_pct(max_drift)}) {over}"
        return {**base, "steady": False, "steady_reason": reason}
    if not judged:
        trend_text = f"trend not judged (fewer than {TREND_WINDOWS} windows)"
    else:
        trend_text = f"trend {_pct(drift)}" + ("" if significant else " (not significant)")
    reason = f"{name} within {_pct(deviation)} of its median (means of window pairs), {trend_text} {over}"
    return {**base, "steady": True, "steady_reason": reason}


def fio_verdict(point_dir: Path, meta: PointMeta) -> tuple[bool | None, str] | None:
    """fio's steady-state verdict of one point × repeat, or None when fio reported none.

    Parameters
    ----------
    point_dir
        A saved point's directory (its ``fio*.json`` outputs are read).
    meta
        Its ``meta.json``.

    Returns
    -------
    tuple of (bool, str) or None
        Whether every job (or group) that fio judged attained steady state,
        and the reason naming fio's criterion and the value it reached.
    """
    outputs = [p.output for p in meta.processes if p.output]
    entries: list[dict[str, Any]] = []
    for name in outputs:
        try:
            data = read_bytes(point_dir / str(name), FIO_TEXT, run_of(point_dir))
        except OSError:
            continue
        if b'"steadystate"' not in data:
            continue
        document = detect.whole_json(data) or detect.find_json(data.decode("utf-8", errors="replace"))
        if document is None:
            continue
        jobs = (
            document.get("client_stats")
            if isinstance(document.get("client_stats"), list)
            else document.get("jobs")
        )
        entries += [
            job["steadystate"]
            for job in jobs or []
            if isinstance(job, dict) and isinstance(job.get("steadystate"), dict)
        ]
    if not entries:
        return None
    missed = [e for e in entries if not e.get("attained")]
    criterion = str(entries[0].get("ss", "?"))
    duration = entries[0].get("duration")
    within = f" over {duration} s" if duration is not None else ""
    if missed:
        reached = ", ".join(str(e.get("criterion", "?")) for e in missed)
        return False, f"{FIO_STEADY} {criterion} not attained{within} (reached {reached})"
    reached = ", ".join(str(e.get("criterion", "?")) for e in entries)
    return True, f"{FIO_STEADY} {criterion} attained{within} (reached {reached})"


def verdicts(
    run: str | os.PathLike[str] | RunDir | Any,
    logs: RunLogs | None = None,
    *,
    points: Iterable[tuple[Path, PointMeta]] | None = None,
) -> pd.DataFrame:
    """The steady-state verdict of every ``ok`` point × repeat of a run.

    Parameters
    ----------
    run
        A run directory (path, :class:`~iobench.store.rundir.RunDir`, or what
        :func:`iobench.run` returned).
    logs
        Its logs already read (:func:`iobench.results.timeseries.read_run_logs`).
    points
        Its saved points, already read (when ``logs`` is not given).

    Returns
    -------
    pandas.DataFrame
        :data:`VERDICT_COLUMNS`, one row per ``ok`` point × repeat: fio's verdict
        where the point used fio's steady-state detection, else the time
        series' (module docstring); NA with the reason when neither can judge,
        or when one of the point's logs cannot be read (naming it).
    """
    run_dir = run_dir_of(run)
    logs = logs if logs is not None else read_run_logs(run_dir, points)
    if not logs.points:
        return _typed(pd.DataFrame(columns=list(VERDICT_COLUMNS)))
    series = logs.series
    # Only the throughput is judged: the other logs need not be combined.
    rate = "iops" if series["metric"].eq("iops").any() else "bw_bytes"
    judged = judge_windows(window_totals(series[series["metric"].eq(rate)]), logs.timing)
    judged = with_host_verdicts(judged, series[series["metric"].eq(rate)], logs.timing)
    present = series[["point", "repeat"]].drop_duplicates()
    has_logs = set(
        zip(present["point"].astype(int).tolist(), present["repeat"].astype(int).tolist(), strict=True)
    )
    by_key: dict[tuple[int, int], dict[str, Any]] = {
        (int(r["point"]), int(r["repeat"])): {str(k): v for k, v in r.items()}
        for r in judged.to_dict("records")
    }
    rates = series[series["metric"].eq(rate)]
    ends = rates.groupby(["point", "repeat"])["t_s"].max()
    last = {(int(p), int(r)): float(t) for (p, r), t in zip(ends.index.tolist(), ends.tolist(), strict=True)}
    rows: list[dict[str, Any]] = []
    for (point_dir, meta), timing in zip(logs.points, logs.timing.to_dict("records"), strict=True):
        key = (meta.point, meta.repeat)
        found = fio_verdict(point_dir, meta) if float(timing["steadystate_s"]) > 0 else None
        row: dict[str, Any] = {
            "point": key[0],
            "repeat": key[1],
            "judged_from_s": math.nan,
            "judged_to_s": math.nan,
        }
        if found is not None:
            row.update(steady=found[0], steady_reason=found[1])
            if key in last:  # fio judged the rolling window that ended when the job did
                duration = float(timing["steadystate_s"])
                row.update(judged_from_s=max(0.0, last[key] - duration), judged_to_s=last[key])
        elif key in logs.problems:
            row.update(steady=None, steady_reason=f"not judged: {logs.problems[key]}")
        elif key not in has_logs:
            row.update(steady=None, steady_reason=NO_LOGS)
        else:
            row.update(by_key[key])
        rows.append(row)
    return _typed(pd.DataFrame(rows, columns=list(VERDICT_COLUMNS)))


def host_verdicts(series: pd.DataFrame, timing: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each host's own verdict, for the points × repeats of ``series`` that ran on several hosts.

    Parameters
    ----------
    series
        A time series (:func:`iobench.timeseries`), or its throughput rows.
    timing
        Its ``attrs["timing"]`` as a frame (``RunLogs.timing``), to word the reasons.

    Returns
    -------
    pandas.DataFrame
        :data:`VERDICT_COLUMNS` with ``host`` after ``repeat``: the same
        criterion on each host's windows alone.
    """
    columns = ["point", "repeat", "host", *VERDICT_COLUMNS[2:]]
    if "host" not in series or series.empty:
        return _typed(pd.DataFrame(columns=columns))
    rate = "iops" if series["metric"].eq("iops").any() else "bw_bytes"
    rows = series[series["metric"].eq(rate)]
    several = rows.groupby(["point", "repeat"])["host"].transform("nunique") > 1
    rows = rows[several.to_numpy()]
    if rows.empty:
        return _typed(pd.DataFrame(columns=columns))
    return judge_windows(window_totals(rows, by=["host"]), timing, by=["host"])


def with_host_verdicts(judged: pd.DataFrame, series: pd.DataFrame, timing: pd.DataFrame) -> pd.DataFrame:
    """``judged`` (the sums' verdicts) with each host's: a point on several hosts is steady when its sum is and
    every host is (:func:`host_verdicts` of ``series``); the hosts that are not are named first in the reason.
    """
    hosts = host_verdicts(series, timing)
    unsteady = hosts[hosts["steady"].eq(False).fillna(False)]
    if unsteady.empty:
        return judged
    said: dict[tuple[int, int], list[str]] = {}
    for point, repeat, host, reason in unsteady[["point", "repeat", "host", "steady_reason"]].itertuples(
        index=False, name=None
    ):
        said.setdefault((int(point), int(repeat)), []).append(f"host {host}: {reason}")
    steady = judged["steady"].astype(object).tolist()
    reasons = judged["steady_reason"].astype(object).tolist()
    for index, (point, repeat) in enumerate(zip(judged["point"], judged["repeat"], strict=True)):
        found = said.get((int(point), int(repeat)))
        if not found:
            continue
        cluster = reasons[index]
        head = [] if cluster is None or cluster is pd.NA else [f"the hosts' sum: {cluster}"]
        steady[index] = False
        count = f"{len(found)} host{'s' if len(found) > 1 else ''} not steady"
        reasons[index] = "; ".join([count, *found, *head])
    return _typed(judged.assign(steady=steady, steady_reason=reasons))


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    types = dict(zip(VERDICT_COLUMNS, _TYPES, strict=True))
    return frame.astype({c: types.get(c, "string") for c in frame.columns})


_TYPES = ("Int64", "Int64", "boolean", "string", "float64", "float64")


def with_steady(
    frame: pd.DataFrame,
    run: RunDir,
    *,
    points: Iterable[tuple[Path, PointMeta]] | None = None,
    notes: list[str] | None = None,
) -> pd.DataFrame:
    """``frame`` (a run's tidy frame) with ``steady`` and ``steady_reason`` from :func:`verdicts`.

    Rows of points that did not finish ``ok`` get NA. ``points``: the run's
    saved points, already read. Each log that cannot be read is appended to
    ``notes`` (its point's verdict is NA, with the reason).
    """
    if frame.empty or "point" not in frame or "repeat" not in frame:
        return frame
    logs = read_run_logs(run, points)
    if notes is not None:
        notes += list(dict.fromkeys(logs.problems.values()))
    found = verdicts(run, logs)
    index = pd.MultiIndex.from_arrays([found["point"], found["repeat"]])
    rows = index.get_indexer(pd.MultiIndex.from_arrays([frame["point"], frame["repeat"]]))
    return frame.assign(
        steady=found["steady"].array.take(rows, allow_fill=True),
        steady_reason=found["steady_reason"].array.take(rows, allow_fill=True),
    )

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
   IOPS log), over the last :data:`WINDOWS` (5) windows that every job logged,
   judged by the steady-state rule of SNIA's Solid State Storage Performance
   Test Specification (PTS), one of fio's windows being one of its rounds.
   Steady when both hold:

   - *range*: the largest minus the smallest of the 5 windows is at most
     :data:`MAX_RANGE` (20 %) of their mean;
   - *slope*: the least-squares line through the 5 windows moves at most
     :data:`MAX_EXCURSION` (10 %) of their mean from the first window to the
     last.

   Fewer than :data:`WINDOWS` complete windows cannot be judged: ``steady``
   is NA, "too short to judge (N windows, 5 needed)", with what would make
   the point judgeable (a longer ``runtime`` or a shorter ``log_avg_msec``).
   :func:`unjudged_line` counts such points in one line.

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
from iobench.results.points import FIO_STEADY, window_totals
from iobench.results.timeseries import RunLogs, read_run_logs, run_dir_of
from iobench.store.records import PointMeta
from iobench.store.rundir import RunDir
from iobench.store.untrusted import FIO_TEXT, read_bytes, run_of

#: SNIA PTS's measurement window: the last this many complete windows, and the fewest judged.
WINDOWS = 5
#: The largest ``max - min`` of the judged windows, relative to their mean.
MAX_RANGE = 0.20
#: The largest excursion of their least-squares line (first to last window), relative to their mean.
MAX_EXCURSION = 0.10
#: The start of a reason that says a point × repeat was too short to judge.
TOO_SHORT = "too short to judge"
NO_LOGS = "no fio logs in the point directory (a run made before iobench wrote them)"
EMPTY_LOGS = "fio's logs hold no sample (the job ended before its first log window, e.g. inside ramp_time)"
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
    last: int = WINDOWS,
    max_range: float = MAX_RANGE,
    max_excursion: float = MAX_EXCURSION,
) -> pd.DataFrame:
    """Judge each point × repeat from its window totals (the rule of the module docstring).

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
    last, max_range, max_excursion
        The rule's settings (the module's constants by default): how many
        windows are judged (and needed), the largest range and the largest
        excursion of the fitted line, as fractions of the windows' mean.

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
            row = _verdict(key, x, y, last, metric, window_s.get(key), max_range, max_excursion)
            rows.append({**row, **{c: v[start] for c, v in zip(split, extra, strict=True)}})
    if not split:
        seen = {(r["point"], r["repeat"]) for r in rows}
        for key in sorted(set(window_s) - seen):
            rows.append(_unjudged(key, 0, window_s[key], last, metric))
    columns = [*keys, *VERDICT_COLUMNS[2:]]
    return _typed(pd.DataFrame(rows, columns=columns))


def too_short(n: int, needed: int = WINDOWS, window: float | None = None) -> str:
    """The reason of a point × repeat with ``n`` complete windows, and what would make it judgeable."""
    size = f" of {_secs(window)}" if window else ""
    longer = f" ({_secs(needed * window)} at these windows)" if window else ""
    return (
        f"{TOO_SHORT} ({n} window{'' if n == 1 else 's'}{size}, {needed} needed): run each point for "
        f"{needed} windows of log_avg_msec after ramp_time{longer}, or lower log_avg_msec"
    )


def _unjudged(
    key: tuple[int, int], n: int, window: float | None, needed: int, metric: str | None
) -> dict[str, Any]:
    reason = "no IOPS or bandwidth log to judge from" if metric is None else too_short(n, needed, window)
    return {
        "point": key[0],
        "repeat": key[1],
        "steady": None,
        "steady_reason": reason,
        "judged_from_s": math.nan,
        "judged_to_s": math.nan,
    }


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """The least-squares slope of ``y`` over ``x`` (0 when every ``x`` is the same)."""
    dx = x - x.mean()
    sxx = float(dx @ dx)
    return float(dx @ (y - y.mean())) / sxx if sxx > 0 else 0.0


def _verdict(
    key: tuple[int, int],
    x: np.ndarray,
    y: np.ndarray,
    needed: int,
    metric: str,
    window: float | None,
    max_range: float,
    max_excursion: float,
) -> dict[str, Any]:
    n = len(y)
    if n < needed:
        return _unjudged(key, n, window, needed, metric)
    name = "IOPS" if metric == "iops" else "bandwidth"
    # A window's time stamp is its end: the judged span begins one window before the first.
    begin = max(0.0, float(x[0]) - (window or 0.0))
    base = {"point": key[0], "repeat": key[1], "judged_from_s": begin, "judged_to_s": float(x[-1])}
    mean = float(y.mean())
    if not mean > 0:
        return {**base, "steady": None, "steady_reason": f"no I/O in the last {n} windows"}
    spread = float(y.max() - y.min()) / mean
    slope = _slope(x, y)
    excursion = abs(slope) * float(x[-1] - x[0]) / mean
    size = f" of {_secs(window)}" if window else ""
    over = f"over the last {n} windows{size}"
    if spread > max_range:
        reason = f"{name} moved {_pct(spread)} of its mean (max − min; limit {_pct(max_range)}) {over}"
        return {**base, "steady": False, "steady_reason": reason}
    if excursion > max_excursion:
        trend = "rose" if slope > 0 else "fell"
        reason = (
            f"{name} {trend} {_pct(excursion)} of its mean along its fitted line "
            f"(limit {_pct(max_excursion)}) {over}"
        )
        return {**base, "steady": False, "steady_reason": reason}
    reason = (
        f"{name} within {_pct(spread)} of its mean (max − min), fitted line moved {_pct(excursion)} {over}"
    )
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
            written = any(point_dir.glob("*_iops.*log*")) or any(point_dir.glob("*_bw.*log*"))
            row.update(steady=None, steady_reason=EMPTY_LOGS if written else NO_LOGS)
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


def unjudged_line(frame: pd.DataFrame | None) -> str | None:
    """How many points × repeats of ``frame`` steady state could not judge, and what would: one line, or None.

    Said at the end of ``iobench run`` and in the report, so a run of short
    points does not read as steady for want of a ``not-steady`` finding.
    """
    if frame is None or frame.empty or "steady" not in frame or "point" not in frame:
        return None
    rows = frame.drop_duplicates([c for c in ("run_id", "point", "repeat") if c in frame])
    if "status" in rows:
        rows = rows[rows["status"].eq("ok").fillna(False).to_numpy()]
    unjudged = rows[rows["steady"].isna().to_numpy()]
    if unjudged.empty:
        return None
    reasons = unjudged["steady_reason"].astype("string").fillna("")
    short = int(reasons.str.startswith(TOO_SHORT).sum())
    other = len(unjudged) - short
    parts = []
    if short:
        parts.append(
            f"{short} {TOO_SHORT} (fewer than {WINDOWS} complete windows): give each point a runtime of "
            f"at least {WINDOWS} × log_avg_msec after ramp_time, or lower log_avg_msec"
        )
    if other:
        parts.append(f"{other} for other reasons (the frame's steady_reason)")
    return f"steady state: {len(unjudged)} of {len(rows)} points × repeats not judged: " + "; ".join(parts)


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

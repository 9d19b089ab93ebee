"""When each host of a point ran, the window all of them ran together, and the I/Os each did in it.

fio 3.33's client output says how long each host's jobs ran, not when. A
point on hosts therefore asks every host to stamp its logs in Unix time
(``log_unix_epoch=1``, :func:`iobench.planner.timelogs.host_log_options`).
From those logs and fio's JSON (docs/numbers.md, "Points on several hosts"):

- **a job's end** is the last time stamp of its latency logs: fio writes the
  last, short latency window when the job ends (``finalize_logs()`` in
  stat.c, called right after ``total_run_time`` is taken);
- **a job's start** is its end minus its runtime in fio's JSON (the longest
  of its directions'); both are the host's own clock, after any
  ``ramp_time``;
- **a host's span** runs from its first job's start to its last job's end;
  the point's **window** from the latest host's start to the earliest host's
  end (``window_s``), ``start_skew_ms`` is the latest start minus the
  earliest, and ``overlap_pct`` the window's share of the longest host's span;
- **the I/Os a job did in the window** (``window_ios``, per job and
  direction): its IOPS log gives the shape of the job's cumulative I/O count
  over time (each sample is fio's rate since its previous sample; the last
  logged rate carried on to the job's end, since fio often misses the last
  partial window; a log without samples means an even rate), and fio's total
  of the direction gives the amount: ``total_ios × (S(to) − S(from)) / S(end)``.

A sample more than :data:`IDLE_GAP` windows after the previous one of the
same job and direction covers one window: fio logs nothing for a window
without I/O, and its next rate counts from the window before.

Hosts' clocks are compared as they are: the window is only as right as the
hosts' clocks agree (NTP keeps them within milliseconds; docs/numbers.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from iobench.errors import ResultsError
from iobench.results.fioout.clients import client_key, parse_client_output
from iobench.store.records import PointMeta
from iobench.store.untrusted import FIO_TEXT, read_text, run_of

#: A sample this many windows or more after the previous one of its job and direction follows
#: windows without I/O: it covers one window.
IDLE_GAP = 1.5
#: The metrics whose last time stamp is a job's end (fio writes them as the job ends).
END_METRICS: frozenset[str] = frozenset(
    {"lat_mean_us", "clat_mean_us", "slat_mean_us", "lat_max_us", "clat_max_us", "slat_max_us"}
)
#: The per point × repeat columns of :func:`host_windows`.
WINDOW_COLUMNS: tuple[str, ...] = ("window_s", "start_skew_ms", "overlap_pct")
#: The job spans' columns (:func:`job_spans`): times in seconds from the point's earliest start.
SPAN_COLUMNS: tuple[str, ...] = ("point", "repeat", "host", "jobname", "job", "start_s", "end_s")


def client_hosts(meta: PointMeta) -> dict[str, str]:
    """Each name fio's client gave a host of the point (``host-a``: its logs' suffix) → the host's name.

    A name several hosts share (the ``127.0.0.1`` of runs that reached
    servers through TCP forwards, whose logs overwrote each other) is left
    out: its logs cannot be told apart.
    """
    names: dict[str, set[str]] = {}
    for process in meta.processes:
        if process.client is not None and process.host is not None:
            try:
                name = client_key(process.client)[0]
            except ValueError:
                continue
            names.setdefault(name, set()).add(process.host)
    return {name: next(iter(hosts)) for name, hosts in names.items() if len(hosts) == 1}


def host_runtimes(point_dir: Path, meta: PointMeta) -> pd.DataFrame:
    """Each host job's runtime as fio's JSON says (:func:`runtimes_of` of the point's client output).

    Raises
    ------
    ResultsError
        The fio output cannot be read or holds no client results (naming it).
    """
    by_output: dict[str, dict[tuple[str, int | None], str]] = {}
    for process in meta.processes:
        if process.client is not None and process.host is not None:
            try:
                key = client_key(process.client)
            except ValueError:
                continue
            by_output.setdefault(process.output, {})[key] = process.host
    frames = []
    for output, clients in by_output.items():
        path = point_dir / output
        try:
            text = read_text(path, FIO_TEXT, run_of(point_dir))
        except OSError as exc:
            raise ResultsError(f"{path}: cannot read: {exc.strerror}") from None
        try:
            frames.append(runtimes_of(parse_client_output(text, clients, origin=str(path))))
        except ValueError as exc:
            raise ResultsError(f"{path}: not fio output ({exc})") from None
    if not frames:
        return runtimes_of(pd.DataFrame())
    return pd.concat(frames, ignore_index=True)


def runtimes_of(rows: pd.DataFrame) -> pd.DataFrame:
    """Each job's runtime in fio's rows of one point: ``host``, ``jobname``, ``rank``, ``runtime_ms``.

    ``rows``: a point's tidy rows (``host``, ``jobname``, ``job_index``,
    ``runtime_ms``, one per job and direction). ``rank`` is the job's place
    among the entries of its host and section, in fio's order (the order of
    its logs' job numbers); ``runtime_ms`` the longest of its directions'.
    """
    columns = ["host", "jobname", "rank", "runtime_ms"]
    needed = ["host", "jobname", "job_index", "runtime_ms"]
    if rows.empty or any(c not in rows for c in needed):
        return pd.DataFrame(columns=columns)
    entries = rows[needed].astype({"runtime_ms": "Float64"})
    longest = entries.groupby(["host", "jobname", "job_index"], sort=True, dropna=False)["runtime_ms"].max()
    jobs = longest.reset_index()
    jobs["rank"] = jobs.groupby(["host", "jobname"], sort=False).cumcount()
    return jobs[columns]


def job_spans(series: pd.DataFrame, runtimes: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Each host job's start and end, in Unix ms, from one point's logs and fio's runtimes.

    Parameters
    ----------
    series
        The point × repeat's log rows in Unix time: ``host``, ``jobname``,
        ``job``, ``metric``, ``t_ms`` (the time stamp as fio wrote it).
    runtimes
        :func:`host_runtimes` of the point.

    Returns
    -------
    tuple of (pandas.DataFrame, str or None)
        ``host``, ``jobname``, ``job``, ``start_ms``, ``end_ms`` (float; NaN
        where unknown), and why some job's span is unknown (None: all known).
        A section whose JSON entries are fewer than its logged jobs (fio's
        ``group_reporting``) gives each job the section's longest runtime.
    """
    keys = ["host", "jobname", "job"]
    if series.empty:
        return pd.DataFrame(columns=[*keys, "start_ms", "end_ms"]), None
    data = series[[*keys, "metric", "t_ms"]]
    every = data.groupby(keys, sort=True)["t_ms"].max()
    ends = data[data["metric"].isin(END_METRICS)].groupby(keys, sort=True)["t_ms"].max()
    spans = every.rename("last_ms").to_frame().join(ends.rename("end_ms")).reset_index()
    spans["rank"] = spans.groupby(["host", "jobname"], sort=False).cumcount()
    known = runtimes.astype({"runtime_ms": "Float64"})
    longest = known.groupby(["host", "jobname"])["runtime_ms"].max().rename("section_ms").reset_index()
    counted = known.groupby(["host", "jobname"]).size().rename("entries").reset_index()
    spans = spans.merge(known, on=["host", "jobname", "rank"], how="left")
    spans = spans.merge(longest, on=["host", "jobname"], how="left").merge(
        counted, on=["host", "jobname"], how="left"
    )
    logged = spans.groupby(["host", "jobname"])["job"].transform("size")
    grouped = spans["entries"].notna() & (spans["entries"] < logged)
    runtime = spans["runtime_ms"].where(~grouped, spans["section_ms"]).astype("Float64")
    end = spans["end_ms"].astype("Float64")
    spans["start_ms"] = (end - runtime).to_numpy(dtype=float, na_value=np.nan)
    spans["end_ms"] = end.to_numpy(dtype=float, na_value=np.nan)
    problem = None
    missing = spans[np.isnan(spans["start_ms"].to_numpy())]
    if len(missing):
        first = missing.iloc[0]
        what = (
            "no latency log to tell when it ended"
            if pd.isna(first["end_ms"])
            else "no runtime in fio's output for it"
        )
        problem = f"host {first['host']}: job {first['jobname']}.{first['job']}: {what}"
    return spans[[*keys, "start_ms", "end_ms"]], problem


def host_windows(spans: pd.DataFrame) -> pd.DataFrame:
    """Per point × repeat: the window all its hosts ran together, their start skew and overlap.

    Parameters
    ----------
    spans
        Job spans (:data:`SPAN_COLUMNS`).

    Returns
    -------
    pandas.DataFrame
        ``point``, ``repeat``, ``from_s``, ``to_s`` (the window, on the spans'
        clock), ``window_s``, ``start_skew_ms``, ``overlap_pct`` (``window_s``
        over the longest host's span, × 100) and ``hosts``; NaN where a job's
        span is unknown.
    """
    keys = ["point", "repeat"]
    columns = [*keys, "from_s", "to_s", *WINDOW_COLUMNS, "hosts"]
    if spans.empty:
        return pd.DataFrame(columns=columns)
    per_host = spans.groupby([*keys, "host"], sort=True).agg(
        start=("start_s", lambda s: s.min(skipna=False)), end=("end_s", lambda s: s.max(skipna=False))
    )
    per_host["span"] = per_host["end"] - per_host["start"]
    grouped = per_host.groupby(level=keys, sort=True)
    out = pd.DataFrame(
        {
            "from_s": grouped["start"].max(skipna=False),
            "to_s": grouped["end"].min(skipna=False),
            "first_s": grouped["start"].min(skipna=False),
            "longest": grouped["span"].max(skipna=False),
            "hosts": grouped.size(),
        }
    )
    out["window_s"] = (out["to_s"] - out["from_s"]).clip(lower=0.0)
    out["start_skew_ms"] = (out["from_s"] - out["first_s"]) * 1000.0
    with np.errstate(divide="ignore", invalid="ignore"):
        out["overlap_pct"] = np.where(out["longest"] > 0, 100.0 * out["window_s"] / out["longest"], np.nan)
    return out.reset_index()[columns]


def cumulative(
    t_s: np.ndarray, rate: np.ndarray, start_s: float, end_s: float, window_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """One job × direction's I/O count over time, from its IOPS log: the knots ``(times, counts)``.

    ``t_s`` and ``rate`` are its samples in time order (seconds on the spans'
    clock, I/Os per second since the previous sample), ``start_s`` and
    ``end_s`` the job's span, ``window_s`` fio's ``log_avg_msec`` in seconds.
    The count is 0 at the start, grows by ``rate × covered`` at each sample
    (``covered``: the time since the previous sample, one window after a gap
    of :data:`IDLE_GAP` windows or more), and by the last rate until the end.
    """
    inside = (t_s > start_s) & (t_s <= end_s)
    t_s, rate = t_s[inside], rate[inside]
    if not len(t_s):  # no sample: nothing to shape the count by (in_window spreads it evenly)
        return np.array([start_s, end_s]), np.array([0.0, 0.0])
    previous = np.r_[start_s, t_s[:-1]]
    covered = t_s - previous
    covered = np.where(covered >= IDLE_GAP * window_s, window_s, covered)
    counts = np.cumsum(rate * covered)
    tail = rate[-1] * max(0.0, end_s - t_s[-1])
    return np.r_[start_s, t_s, end_s], np.r_[0.0, counts, counts[-1] + tail]


def in_window(times: np.ndarray, counts: np.ndarray, total: float, lo: float, hi: float) -> float:
    """``total`` I/Os spread over time as ``(times, counts)`` say: how many fell between ``lo`` and ``hi``."""
    if not counts[-1] > 0:  # the log saw nothing: an even rate over the span
        counts = np.array([0.0, 1.0])
        times = np.array([times[0], times[-1]])
    share = (np.interp(hi, times, counts) - np.interp(lo, times, counts)) / counts[-1]
    return float(total * max(0.0, share))


def window_ios(
    rows: pd.DataFrame,
    series: pd.DataFrame,
    spans: pd.DataFrame,
    windows: pd.DataFrame,
    log_window_s: Mapping[tuple[int, int], float],
) -> np.ndarray:
    """Each row's I/Os within its point's window (NaN where its span or window is unknown).

    Parameters
    ----------
    rows
        Tidy-frame rows of points on hosts: ``point``, ``repeat``, ``host``,
        ``jobname``, ``job_index``, ``direction``, ``total_ios``.
    series
        Those points' IOPS log rows (``metric`` ``iops``): ``point``,
        ``repeat``, ``host``, ``jobname``, ``job``, ``direction``, ``t_s``,
        ``value``, on the spans' clock.
    spans
        Their job spans (:data:`SPAN_COLUMNS`).
    windows
        :func:`host_windows` of the spans.
    log_window_s
        Each point × repeat's ``log_avg_msec``, in seconds.

    Returns
    -------
    numpy.ndarray
        One float per row of ``rows``, in order. A row maps to its host and
        section's job of the same rank (fio's order); where a section has fewer
        rows per direction than logged jobs (``group_reporting``), to all of
        them.
    """
    out = np.full(len(rows), np.nan)
    if rows.empty or spans.empty:
        return out
    point_keys = ["point", "repeat"]
    section = [*point_keys, "host", "jobname"]
    bounds = {
        (int(p), int(r)): (float(lo), float(hi))
        for p, r, lo, hi in windows[[*point_keys, "from_s", "to_s"]].itertuples(index=False, name=None)
        if np.isfinite(lo) and np.isfinite(hi)
    }
    ordered = spans.sort_values([*section, "job"])
    jobs_of: dict[tuple[object, ...], list[tuple[int, float, float]]] = {}
    for p, r, host, name, job, start, end in ordered[[*section, "job", "start_s", "end_s"]].itertuples(
        index=False, name=None
    ):
        jobs_of.setdefault((int(p), int(r), str(host), str(name)), []).append(
            (int(job), float(start), float(end))
        )
    samples: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray]] = {}
    if not series.empty:
        data = series.sort_values([*section, "job", "direction", "t_s"])
        for key, group in data.groupby([*section, "job", "direction"], sort=False):
            p, r, host, name, job, direction = (str(k) for k in key)
            samples[(int(p), int(r), host, name, int(job), direction)] = (
                group["t_s"].to_numpy(dtype=float),
                group["value"].to_numpy(dtype=float),
            )
    frame = rows[[*section, "job_index", "direction", "total_ios"]].reset_index(drop=True)
    frame["rank"] = frame.groupby([*section, "direction"], sort=False)["job_index"].rank(method="first") - 1
    sizes = frame.groupby([*section, "direction"], sort=False)["job_index"].transform("size")
    for at, (p, r, host, name, _, direction, total, rank, size) in enumerate(
        zip(
            *(frame[c] for c in (*section, "job_index", "direction", "total_ios", "rank")), sizes, strict=True
        )
    ):
        if pd.isna(p) or pd.isna(r) or pd.isna(total) or pd.isna(host):
            continue
        key = (int(p), int(r))
        jobs = jobs_of.get((*key, str(host), str(name)), [])
        if key not in bounds or not jobs:
            continue
        chosen = [jobs[int(rank)]] if size == len(jobs) else jobs if size == 1 else []
        if not chosen:
            continue
        lo, hi = bounds[key]
        width = log_window_s.get(key, 1.0)
        knots = []
        for job, start, end in chosen:
            if not (np.isfinite(start) and np.isfinite(end)):
                break
            t, v = samples.get((*key, str(host), str(name), job, str(direction)), (np.empty(0), np.empty(0)))
            knots.append(cumulative(t, v, start, end, width))
        else:
            out[at] = _combined(knots, float(total), lo, hi)
    return out


def _combined(knots: Sequence[tuple[np.ndarray, np.ndarray]], total: float, lo: float, hi: float) -> float:
    """``total`` spread over the summed counts of several jobs: the share between ``lo`` and ``hi``."""
    if len(knots) == 1:
        return in_window(*knots[0], total, lo, hi)
    grid = np.unique(np.concatenate([t for t, _ in knots]))
    summed = sum(np.interp(grid, t, c) for t, c in knots)
    return in_window(grid, np.asarray(summed, dtype=float), total, lo, hi)

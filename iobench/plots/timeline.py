"""Throughput and latency over time, per point, from fio's own logs: did it settle?"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from iobench.errors import PlotOptionError, ResultsError
from iobench.plots import options
from iobench.plots import plotstyle as st
from iobench.results.points import window_totals
from iobench.results.steady import verdicts as steady_verdicts
from iobench.results.timeseries import COLUMNS, read_run_logs, run_dir_of, series_frame

#: At most this many points get a row of panels; the rest are named in the caption.
MAX_POINTS = 12
THROUGHPUT = ("iops", "bw_bytes")
LATENCY = ("lat_mean_us", "clat_mean_us", "slat_mean_us")
RAMP_COLOUR = "0.85"
SS_RAMP_COLOUR = "#fdd49e"
#: Judged windows by verdict: steady, not steady, not judged. Every shade is opaque and drawn under the
#: lines, a point's spans not steady last, so overlapping spans show one of these colours, never a blend.
JUDGED_COLOURS = {True: "#c7e9c0", False: "#fcbba1", None: "#c6dbef"}
#: Each host's own line, under the hosts' sum, at a point on several hosts.
HOST_COLOUR = "0.6"
#: The roles the figure fixes, and what each is.
FIXED = {
    "x": "the time",
    "hue": "the repeat",
    "col": "throughput, then latency",
    "row": "the point",
}


def _load(data: Any) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The long frame, and the verdicts when ``data`` is a run directory."""
    if isinstance(data, pd.DataFrame):
        return data, None
    if not isinstance(data, str | os.PathLike) and not hasattr(data, "run_dir"):
        raise ResultsError("timeline: give the frame of iobench.timeseries(run), or a run directory")
    run = run_dir_of(data)
    logs = read_run_logs(run)
    return series_frame(logs, run), steady_verdicts(run, logs)


def _timing(series: pd.DataFrame) -> dict[tuple[int, int], dict[str, Any]]:
    return {(int(t["point"]), int(t["repeat"])): t for t in series.attrs.get("timing") or []}


def _label(series: pd.DataFrame, point: int, params: list[str]) -> str:
    row = series[series["point"] == point].iloc[0]
    described = st.describe(params, [row[c] for c in params]) if params else ""
    return f"point {point}" + (f" · {described}" if described else "")


def _verdict_text(found: pd.DataFrame) -> str:
    if found.empty:
        return ""
    values = found["steady"].astype("boolean")
    bad = sorted(int(r) for r in found.loc[values.eq(False).fillna(False).to_numpy(), "repeat"])
    if bad:
        which = f"repeat {bad[0]}" if len(bad) == 1 else f"repeats {', '.join(map(str, bad))}"
        return f": not steady in {which} (of {len(found)})"
    if values.isna().all():
        return ": not judged"
    return ": steady"


def _choose(
    points: list[int], found: pd.DataFrame | None, wanted: Sequence[int] | None
) -> tuple[list[int], str]:
    """The points to draw (those not steady first when there are too many) and a note on the rest."""
    if wanted is not None:
        missing = sorted(set(wanted) - set(points))
        if missing:
            raise ResultsError(
                f"timeline: no logs for point {', '.join(map(str, missing))} (points with logs: "
                f"{', '.join(map(str, points))})"
            )
        return list(dict.fromkeys(wanted)), ""
    if len(points) <= MAX_POINTS:
        return points, ""
    first: list[int] = []
    if found is not None and not found.empty:
        first = sorted({int(p) for p in found.loc[found["steady"].eq(False).fillna(False), "point"]})
    chosen = list(dict.fromkeys([*first, *points]))[:MAX_POINTS]
    order = "those not steady first, " if first else ""
    return sorted(chosen), f"{MAX_POINTS} of {len(points)} points shown ({order}by point number)"


def _shade(axis: Axes, timing: dict[str, Any] | None, span: tuple[float, float] | None, steady: Any) -> None:
    """The ramps and the judged windows as opaque spans under the lines (a span not steady above the rest)."""
    if timing:
        ramp = float(timing.get("ramp_s") or 0.0)
        if ramp > 0:
            axis.axvspan(-ramp, 0, color=RAMP_COLOUR, zorder=0, lw=0)
        ss_ramp = float(timing.get("steadystate_ramp_s") or 0.0)
        if ss_ramp > 0:
            axis.axvspan(0, ss_ramp, color=SS_RAMP_COLOUR, zorder=0, lw=0)
    if span is not None:
        key = None if steady is None or pd.isna(steady) else bool(steady)
        axis.axvspan(span[0], span[1], color=JUDGED_COLOURS[key], zorder=0.2 if key is False else 0.1, lw=0)


def _draw(
    axis: Axes,
    windows: pd.DataFrame,
    metric: str,
    repeats: list[int],
    *,
    label: str | None = None,
    colours: Sequence[str] = st.CYCLE,
) -> bool:
    """A line per repeat through the windows every job logged; others as hollow markers. True when drawn."""
    if metric not in windows or windows[metric].isna().all():
        return False
    factor = st.scale(metric)
    for index, repeat in enumerate(repeats):
        rows = windows[windows["repeat"] == repeat]
        if rows.empty:
            continue
        colour = colours[index % len(colours)]
        whole = rows[rows["complete"].astype(bool)] if metric in THROUGHPUT else rows
        partial = rows[~rows["complete"].astype(bool)] if metric in THROUGHPUT else rows.iloc[0:0]
        axis.plot(
            whole["t_s"].to_numpy(dtype=float),
            whole[metric].to_numpy(dtype=float, na_value=np.nan) * factor,
            color=colour,
            marker="o",
            markersize=3,
            linewidth=1.3,
            label=label or (f"repeat {repeat}" if len(repeats) > 1 else None),
        )
        if not partial.empty:
            axis.plot(
                partial["t_s"].to_numpy(dtype=float),
                partial[metric].to_numpy(dtype=float, na_value=np.nan) * factor,
                linestyle="none",
                marker="o",
                markersize=4,
                markerfacecolor="none",
                color=colour,
            )
    axis.set_ylabel(st.label(metric))
    st.metric_ticks(axis.yaxis, metric)
    axis.grid(True, alpha=0.3)
    return True


def _draw_hosts(axis: Axes, windows: pd.DataFrame, metric: str) -> bool:
    """Each host's own windows as thin grey lines under the hosts' sum (a point on several hosts)."""
    if windows.empty or metric not in windows or windows[metric].isna().all():
        return False
    factor = st.scale(metric)
    for index, ((_, _), rows) in enumerate(windows.groupby(["host", "repeat"], sort=True)):
        rows = rows.sort_values("t_s")
        axis.plot(
            rows["t_s"].to_numpy(dtype=float),
            rows[metric].to_numpy(dtype=float, na_value=np.nan) * factor,
            color=HOST_COLOUR,
            linewidth=0.8,
            alpha=0.7,
            zorder=1,
            label="each host" if index == 0 else None,
        )
    return True


def timeline(
    data: pd.DataFrame | str | os.PathLike[str] | Any,
    *,
    x: str | None = None,
    y: str = "iops",
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
    latency: str | None = "lat_mean_us",
    points: Sequence[int] | None = None,
    verdicts: pd.DataFrame | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Throughput and latency over time, a row of panels per point, a line per repeat.

    Each line is the point's windows (:func:`iobench.results.points.window_totals`):
    its jobs' IOPS or bandwidth summed, their mean latencies weighted by their
    I/Os. At a point on several hosts that is the hosts' sum (their windows on
    one clock: :mod:`iobench.results.hostspan`), and each host's own windows
    are thin grey lines under it; the verdict is the sum's and every host's. Windows that some job did not log (fio's last, partial window) are
    hollow markers off the line. Time runs from the start of fio's measured
    time: ``ramp_time`` comes before 0 and is shaded grey (fio logs nothing
    during it), ``steadystate_ramp_time`` is shaded orange, and the windows
    the steady-state verdict judged (:mod:`iobench.results.steady`) green when
    steady, red when not. Each row's title says the verdict.

    Parameters
    ----------
    data
        The frame of :func:`iobench.timeseries`, or a run directory (then the
        verdicts come from it too).
    x, hue, col, row
        Fixed (the time, the repeat, throughput and latency, the point); giving any is an error.
    y
        The throughput metric: ``iops`` or ``bw_bytes``.
    latency
        The latency metric of the right-hand panels (``lat_mean_us``,
        ``clat_mean_us`` or ``slat_mean_us``); None for throughput only.
    points
        The points to draw (default: every point with logs, at most
        :data:`MAX_POINTS`, those not steady first).
    verdicts
        :func:`iobench.results.steady.verdicts` of the run, when ``data`` is a frame.
    ax
        An Axes to draw the throughput of every chosen point × repeat into.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        ``x``, ``hue``, ``col`` or ``row`` given, or an unknown metric.
    ResultsError
        A point without logs, or no logs at all.
    """
    options.fixed("timeline", {"x": x, "hue": hue, "col": col, "row": row}, FIXED)
    if y not in THROUGHPUT:
        raise PlotOptionError(
            "timeline", "y", y, "is not a throughput metric of fio's logs", list(THROUGHPUT)
        )
    if latency is not None and latency not in LATENCY:
        raise PlotOptionError("timeline", "latency", latency, "is not a latency of fio's logs", list(LATENCY))
    series, found = _load(data)
    found = verdicts if verdicts is not None else found
    if series.empty:
        raise ResultsError(
            "timeline: no fio logs in these results (runs made before iobench asked fio for its "
            "bw/iops/lat logs have none)"
        )
    windows = window_totals(series)
    if y not in windows or windows[y].isna().all():
        raise ResultsError(f"timeline: the logs hold no {y!r} samples")
    several = (
        series.groupby(["point", "repeat"])["host"].transform("nunique") > 1 if "host" in series else None
    )
    per_host = (
        window_totals(series[several.to_numpy()], by=["host"])
        if several is not None and several.any()
        else pd.DataFrame(columns=["point", "repeat", "host", "t_s"])
    )
    chosen, note = _choose(sorted(int(p) for p in windows["point"].unique()), found, points)
    params = [c for c in series.columns if c not in COLUMNS and series[c].nunique(dropna=False) > 1]
    timing = _timing(series)
    if ax is not None:
        for index, point in enumerate(chosen):
            rows = windows[windows["point"] == point]
            repeats = sorted(int(r) for r in rows["repeat"].unique())
            colour = st.CYCLE[index % len(st.CYCLE)]
            for position, repeat in enumerate(repeats):
                label = _label(series, point, params) if position == 0 else None
                _draw(ax, rows[rows["repeat"] == repeat], y, [repeat], label=label, colours=[colour])
        ax.set_xlabel("Time since the measured time began (s)")
        ax.set_ylim(bottom=0)
        ax.set_xlim(left=0)
        ax.legend(fontsize=st.SMALL)
        return st.root_figure(ax)
    columns = 2 if latency is not None else 1
    fig = st.new_figure(st.PANEL_WIDTH * columns * 0.8, 2.4 * len(chosen) + 1.4)
    # The panels sit in a subfigure, so that the title and the legend above them get their own room.
    grid = fig.subfigures(1, 1, squeeze=False)[0][0].subplots(
        len(chosen), columns, squeeze=False, sharex=True
    )
    earliest = -max([float(t.get("ramp_s") or 0.0) for t in timing.values()] + [0.0])
    for line, point in enumerate(chosen):
        rows = windows[windows["point"] == point]
        repeats = sorted(int(r) for r in rows["repeat"].unique())
        mine = found[found["point"] == point] if found is not None else pd.DataFrame()
        for place, metric in enumerate([y, latency][:columns]):
            axis = grid[line][place]
            axis.tick_params(labelsize=st.SMALL)
            for repeat in repeats:
                verdict = mine[mine["repeat"] == repeat] if not mine.empty else mine
                span = None
                steady = None
                if not verdict.empty and pd.notna(verdict["judged_from_s"].iloc[0]):
                    span = (float(verdict["judged_from_s"].iloc[0]), float(verdict["judged_to_s"].iloc[0]))
                    steady = verdict["steady"].iloc[0]
                _shade(axis, timing.get((point, repeat)), span, steady)
            if metric is not None:
                _draw_hosts(axis, per_host[per_host["point"] == point], metric)
            if metric is not None and not _draw(axis, rows, metric, repeats):
                axis.text(
                    0.5,
                    0.5,
                    f"no {st.short_label(metric).lower()} log",
                    transform=axis.transAxes,
                    ha="center",
                    va="center",
                    fontsize=st.SMALL,
                    color="0.4",
                )
            axis.set_ylim(bottom=0)
            if line == len(chosen) - 1:
                axis.set_xlabel("Time since the measured time began (s)")
        grid[line][0].set_title(
            _label(series, point, params) + _verdict_text(mine), fontsize=st.MEDIUM, loc="left"
        )
    latest = float(windows.loc[windows["point"].isin(chosen), "t_s"].max())
    grid[0][0].set_xlim(earliest, latest + 0.03 * (latest - earliest))
    _legend(fig, timing, found)
    shown = windows[windows["point"].isin(chosen)]
    partial = "hollow markers: windows not every job logged" if not shown["complete"].all() else ""
    notes = [n for n in (note, partial) if n]
    st.finish(
        fig,
        series,
        f"{st.short_label(y)} and {st.in_sentence(st.short_label(latency or y))} over time"
        if latency
        else f"{st.short_label(y)} over time",
        "; ".join(notes),
    )
    return fig


def _legend(fig: Figure, timing: dict[tuple[int, int], dict[str, Any]], found: pd.DataFrame | None) -> None:
    """Name the shaded spans that appear (the lines' repeats are labelled by :func:`_draw`)."""
    axis = fig.axes[0]
    if any(float(t.get("ramp_s") or 0) > 0 for t in timing.values()):
        axis.plot([], [], color=RAMP_COLOUR, linewidth=8, label="ramp_time (not logged)")
    if any(float(t.get("steadystate_ramp_s") or 0) > 0 for t in timing.values()):
        axis.plot([], [], color=SS_RAMP_COLOUR, linewidth=8, label="steadystate_ramp_time")
    spans = found[found["judged_from_s"].notna()] if found is not None else pd.DataFrame({"steady": []})
    verdicts = spans["steady"].astype("boolean")
    for verdict, text in ((True, "judged: steady"), (False, "judged: not steady")):
        if verdicts.eq(verdict).fillna(False).any():
            axis.plot([], [], color=JUDGED_COLOURS[verdict], linewidth=8, label=text)
    if verdicts.isna().any():
        axis.plot([], [], color=JUDGED_COLOURS[None], linewidth=8, label="judged: no verdict")


def unsteady_points(frame: pd.DataFrame) -> list[int]:
    """The points of a tidy frame with a repeat judged not steady (``steady`` false), in order."""
    if "steady" not in frame or "point" not in frame:
        return []
    bad = frame[frame["steady"].astype("boolean").eq(False).fillna(False)]
    return sorted({int(p) for p in bad["point"].dropna()})


def unsteady_timeline(run: str | os.PathLike[str], frame: pd.DataFrame) -> Figure | None:
    """The :func:`timeline` of the points of ``frame`` (the run's tidy frame) that were not steady, if any."""
    points = unsteady_points(frame)
    if not points:
        return None
    return timeline(run, points=points[:MAX_POINTS])

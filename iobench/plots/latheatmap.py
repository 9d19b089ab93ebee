"""Completion latency over time as a heatmap, from fio's histogram logs: per host and merged.

A column is a span of time (one or more of fio's ``log_hist_msec`` windows,
at most :data:`~iobench.results.histlogs.COLUMNS` of them), a row a band of
latency (:data:`ROWS_PER_OCTAVE` to each doubling, on a log scale), the
colour how many I/Os completed there (log colour scale, shared by every
panel). p50, p99 and p99.9 of each column are drawn over it, computed from
fio's own bins by fio's rule (:func:`iobench.results.histlogs.percentiles`).
The top panel adds every host's I/Os; below it each host has its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator

from iobench.errors import ResultsError
from iobench.plots import options
from iobench.plots import plotstyle as st
from iobench.results.histlogs import COLUMNS, PERCENTILES, LatencyMap, LoggedPoint, logged_points, percentiles

#: Latency rows per doubling: fio's bins are 1/64 of one; 8 rows keep 9 % steps.
ROWS_PER_OCTAVE = 8
#: Host panels per row under the merged one.
HOST_COLS = 4
HOST_HEIGHT = 1.7
#: Host panels at most (8 rows: within the figure's 5,000 px); the merged panel adds every host.
MAX_HOST_PANELS = 32
PERCENTILE_STYLES = {50.0: ("white", "-"), 99.0: ("#ff7f0e", "-"), 99.9: ("#d62728", "--")}
FIXED = {
    "x": "the time",
    "y": "the completion latency",
    "hue": "the I/Os completed",
    "col": "the host",
    "row": "the host",
}
_NICE = (1.0, 2.0, 5.0)


def _rows(latency: LatencyMap, merged: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Which latency row each bin falls in, and the rows' range as log10(µs); bins outside are -1."""
    used = np.flatnonzero(merged.sum(axis=0))
    values_us = np.maximum(latency.values_ns, 0.5) / 1000.0
    if not len(used):
        return np.full(len(values_us), -1), 0.0, 1.0
    low = math.log2(latency.edges_ns[used[0]] / 1000.0 if latency.edges_ns[used[0]] > 0 else values_us[0])
    high = math.log2(latency.edges_ns[used[-1] + 1] / 1000.0)
    low, high = math.floor(low * ROWS_PER_OCTAVE), math.ceil(high * ROWS_PER_OCTAVE)
    rows = np.floor(np.log2(values_us) * ROWS_PER_OCTAVE).astype(np.int64) - low
    rows[(rows < 0) | (rows >= high - low)] = -1
    return rows, low / ROWS_PER_OCTAVE * math.log10(2), high / ROWS_PER_OCTAVE * math.log10(2)


def _image(counts: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``columns × bins`` counts added into latency rows: ``rows × columns``, NaN where nothing completed."""
    height = int(rows.max()) + 1 if (rows >= 0).any() else 1
    image = np.zeros((height, counts.shape[0]))
    keep = rows >= 0
    onehot = np.zeros((int(keep.sum()), height))
    onehot[np.arange(onehot.shape[0]), rows[keep]] = 1.0
    image[:] = (counts[:, keep].astype(np.float64) @ onehot).T
    image[image <= 0] = np.nan
    return image


def _label(log10_us: float) -> str:
    us = 10.0**log10_us
    return f"{us / 1000:g} ms" if us >= 1000 else f"{us:g} µs"


def _ticks(low: float, high: float) -> list[float]:
    return [
        math.log10(n * 10.0**d)
        for d in range(math.floor(low) - 1, math.ceil(high) + 1)
        for n in _NICE
        if low <= math.log10(n * 10.0**d) <= high
    ]


def _panel(
    axis: Axes,
    latency: LatencyMap,
    counts: np.ndarray,
    rows: np.ndarray,
    extent: tuple[float, float, float, float],
    norm: LogNorm,
    *,
    title: str,
    legend: bool,
) -> Any:
    image = axis.imshow(
        _image(counts, rows),
        origin="lower",
        aspect="auto",
        extent=extent,
        norm=norm,
        cmap="viridis",
        interpolation="nearest",
        rasterized=True,
    )
    middle = (latency.t_edges_s[:-1] + latency.t_edges_s[1:]) / 2.0
    found = percentiles(counts, latency.values_ns)
    for column, p in enumerate(PERCENTILES):
        colour, style = PERCENTILE_STYLES[p]
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.log10(found[:, column] / 1000.0)
        axis.plot(middle, y, color=colour, linestyle=style, linewidth=0.9, label=f"p{p:g}")
    axis.set_ylim(extent[2], extent[3])
    if legend:
        ticks = _ticks(extent[2], extent[3])
        axis.yaxis.set_major_locator(FixedLocator(ticks))
        axis.set_yticklabels([_label(t) for t in ticks])
    axis.set_title(title, fontsize=st.MEDIUM if legend else st.SMALL, pad=2)
    if legend:
        # A dark legend: the p50 line is white, to show on the map's bright middle.
        axis.legend(
            loc="upper right", fontsize=st.SMALL, facecolor="0.35", labelcolor="white", framealpha=0.8
        )
    return image


def draw_map(latency: LatencyMap, *, note: str = "", ax: Axes | None = None) -> Figure:
    """The figure of one :class:`~iobench.results.histlogs.LatencyMap`: merged on top, each host below.

    With ``ax``, only the merged panel, drawn into it.
    """
    hosts = sorted(latency.counts)
    shown_hosts = hosts[:MAX_HOST_PANELS]
    merged = latency.merged()
    rows, low, high = _rows(latency, merged)
    extent = (float(latency.t_edges_s[0]), float(latency.t_edges_s[-1]), low, high)
    image = _image(merged, rows)
    norm = LogNorm(vmin=1.0, vmax=max(1.0, float(np.nanmax(image, initial=1.0))))
    if ax is not None:
        _panel(ax, latency, merged, rows, extent, norm, title="all hosts, merged", legend=True)
        return st.root_figure(ax)
    host_rows = math.ceil(len(shown_hosts) / HOST_COLS) if len(hosts) > 1 else 0
    height = st.PANEL_HEIGHT + host_rows * HOST_HEIGHT + st.FRAME_HEIGHT + 0.6
    fig = st.new_figure(st.PANEL_WIDTH * 2, height)
    # Fixed margins: constrained layout measures every tick label of every panel (seconds with 32 hosts).
    fig.set_layout_engine("none")
    grid = fig.add_gridspec(
        1 + host_rows,
        HOST_COLS,
        height_ratios=[st.PANEL_HEIGHT + 0.4] + [HOST_HEIGHT] * host_rows,
        left=0.08,
        right=0.92,
        top=1 - 0.5 / height,
        bottom=0.75 / height,
        hspace=0.45,
        wspace=0.08,
    )
    main = fig.add_subplot(grid[0, :])
    title = "all hosts, merged" if len(hosts) > 1 else f"host {hosts[0]}"
    shown = _panel(main, latency, merged, rows, extent, norm, title=title, legend=True)
    main.set_ylabel("completion latency")
    main.set_xlabel("time (s)")
    for index, host in enumerate(shown_hosts if host_rows else []):
        axis = fig.add_subplot(grid[1 + index // HOST_COLS, index % HOST_COLS])
        _panel(axis, latency, latency.counts[host], rows, extent, norm, title=f"host {host}", legend=False)
        # Small multiples on the merged panel's axes: its ticks say the scale (ticks cost most of the drawing).
        axis.set_xlim(extent[0], extent[1])
        axis.set_xticks([])
        axis.set_yticks([])
    fig.colorbar(shown, ax=main, label="I/Os completed", pad=0.01, fraction=0.03)
    windows = round((latency.t_edges_s[1] - latency.t_edges_s[0]) / latency.window_s)
    fig.suptitle(f"Completion latency over time · point {latency.point}, repeat {latency.repeat}")
    text = (
        f"fio's histogram logs: a {latency.window_s:g} s window"
        + (f", {windows} windows a column" if windows > 1 else "")
        + "; lines: p50, p99, p99.9 of each column (fio's rule, its own bins)"
        + ("; each host below on the same axes and colours" if host_rows else "")
        + (
            f" (the first {len(shown_hosts)} of {len(hosts)} hosts by name)"
            if len(shown_hosts) < len(hosts)
            else ""
        )
        + ". "
        + note
    )
    fig.supxlabel(text.strip(), fontsize=st.SMALL)
    return fig


def lat_heatmap(
    data: Any,
    *,
    x: str | None = None,
    y: str | None = None,
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
    point: int | None = None,
    repeat: int | None = None,
    direction: str | None = None,
    columns: int = COLUMNS,
    logged: Sequence[LoggedPoint] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Completion latency over time of one point × repeat, from fio's histogram logs (``iobench plot RUN lat-heatmap``).

    Parameters
    ----------
    data
        A run directory (or a run's result).
    point, repeat
        Which point × repeat; default the first that wrote histogram logs.
    direction
        ``read``, ``write`` or ``trim``; None draws all I/Os.
    columns
        At most this many time columns.
    logged
        The run's points with logs, already listed (:func:`iobench.results.histlogs.logged_points`).
    ax
        Draw only the merged panel, into this Axes.

    Raises
    ------
    ResultsError
        No point wrote histogram logs (the matrix sets no ``log_hist_msec``), or the one asked for did not.
    """
    options.fixed("lat-heatmap", {"x": x, "y": y, "hue": hue, "col": col, "row": row}, FIXED)
    found = list(logged) if logged is not None else logged_points(data)
    if not found:
        raise ResultsError(
            f"lat-heatmap: {data}: no point wrote fio's histogram logs; set `log_hist_msec` (e.g. 1000) "
            "under `fio:` in the matrix and run it again"
        )
    chosen = [
        p for p in found if (point is None or p.point == point) and (repeat is None or p.repeat == repeat)
    ]
    if not chosen:
        have = ", ".join(f"{p.point}/{p.repeat}" for p in found)
        raise ResultsError(
            f"lat-heatmap: no histogram logs for that point/repeat (points/repeats with them: {have})"
        )
    others = len({p.point for p in found}) - 1
    note = (
        f"{others} other point(s) have logs: iobench.plots.latheatmap.lat_heatmap(run, point=N)."
        if others > 0 and point is None
        else ""
    )
    return draw_map(chosen[0].read(columns=columns, direction=direction), note=note, ax=ax)


def report_heatmap(run: Any) -> Figure | None:
    """The report's latency-over-time figure: the first point with histogram logs, or None without any."""
    found = logged_points(run)
    return lat_heatmap(run, logged=found) if found else None

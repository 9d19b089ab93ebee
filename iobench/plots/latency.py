"""Completion latency percentile curves, one per point, on a 'nines' axis."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter

from iobench.errors import ResultsError
from iobench.plots import limits, options
from iobench.plots import plotdata as dt
from iobench.plots import plotstyle as st
from iobench.plots.lineplots import x_positions

#: Panels per row before the figure wraps.
MAX_COLS = 2


def nines(p: Any) -> Any:
    """The 'nines' of a percentile: ``-log10(1 - p/100)`` (p50 → 0.3, p90 → 1, p99 → 2, p99.9 → 3)."""
    return -np.log10(1 - np.clip(np.asarray(p, dtype=float), 0, 99.9999) / 100)


def _from_nines(n: Any) -> Any:
    return 100 * (1 - 10 ** (-np.asarray(n, dtype=float)))


def percentile_layout(totals: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Panels: the first categorical axis when two or more vary; lines: the rest."""
    axes = dt.splitting_axes(totals, [])
    if len(axes) < 2:
        return [], axes
    panel = next((c for c in axes if x_positions(c, dt.ordered(c, totals[c])) is not None), axes[-1])
    return [panel], [c for c in axes if c != panel]


def _palette(lines: Sequence[str], curves: list[tuple[object, ...]]) -> list[Any]:
    """Light to dark along one numeric axis (iodepth 1 … 64), fixed or cycled colours otherwise."""
    if len(lines) == 1 and len(curves) > 2 and st.is_numeric([c[0] for c in curves]):
        return [colormaps["viridis"](0.9 * i / (len(curves) - 1)) for i in range(len(curves))]
    return st.palette(lines, curves)


def _draw_curves(
    axis: Axes,
    data: pd.DataFrame,
    lines: Sequence[str],
    percentiles: dict[float, str],
    curves: list[tuple[object, ...]],
    colours: list[Any],
) -> None:
    """A curve per combination of ``lines`` through the mean of each percentile column, with its 95 % CI.

    Past as many curves as there are colours, the colours come round again with
    the next line style and marker: no two curves look alike.
    """
    ps = list(percentiles)
    distinct = len(set(colours))
    for index, (curve, colour) in enumerate(zip(curves, colours, strict=True)):
        row = dt.select(data, lines, curve)
        if row.empty:
            continue
        ys = row[list(percentiles.values())].iloc[0].to_numpy(dtype=float)
        cis = row[[f"{c}_ci95" for c in percentiles.values()]].iloc[0].to_numpy(dtype=float)
        turn = index // max(1, distinct)
        axis.plot(
            ps,
            ys,
            color=colour,
            linestyle=st.LINESTYLES[turn % len(st.LINESTYLES)],
            marker=st.MARKERS[turn % len(st.MARKERS)],
            markersize=4,
            linewidth=1.5,
            label=st.describe(lines, curve) if lines else None,
        )
        if np.isfinite(cis).any():
            axis.errorbar(
                ps, ys, yerr=st.error_bars(ys, cis), fmt="none", ecolor=colour, elinewidth=1, capsize=2
            )
    axis.set_xscale("function", functions=(nines, _from_nines))
    axis.set_xticks(ps, [f"p{p:g}" for p in ps])
    axis.set_xlim(float(_from_nines(nines(ps[0]) - 0.2)), float(_from_nines(nines(ps[-1]) + 0.2)))
    axis.set_yscale("log")
    axis.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    st.metric_ticks(axis.yaxis, "clat_p50_us")
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.set_xlabel("Percentile")
    axis.set_ylabel("Completion latency (µs)")
    axis.grid(True, which="major", alpha=0.3)


def latency_percentiles(
    df: pd.DataFrame,
    *,
    x: str | None = None,
    y: str | None = None,
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
    direction: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Completion latency at each percentile fio reported, one curve per point.

    The x axis counts nines (p50, p90, p99, p99.9 evenly apart), the y axis is
    log-scaled µs: both are fixed. Each curve is the mean over the point's repeats of the
    point's percentiles (:func:`iobench.point_totals`): fio's percentile of the
    merged json+ histograms of all its jobs; where the output had no histograms
    and a point has several jobs, their I/O-weighted percentiles, an
    approximation the caption then names. Curves are labelled with the parameters that
    vary; a single varying number (iodepth, numjobs, bs) is coloured light to
    dark along a sequential map. Without ``hue``, ``col`` or ``row``, when two
    or more axes vary, the first categorical one (binding, placement,
    scheduler, direction ...) gets a panel per value; with one of them, the
    first axis without a role gets the columns unless ``col`` is given. Past
    :data:`~iobench.plots.limits.MAX_SERIES` curves the highest are kept.

    Parameters
    ----------
    df
        A tidy frame with ``clat_p*_us`` columns.
    x, y
        Fixed (the percentile, the latency); giving either is an error.
    hue
        The category whose values get a curve each; other axes that vary add curves too.
    col, row
        Categories whose values get a column, a row of panels each.
    direction
        Only this direction (``read``, ``write``, ``trim``); all, as an axis, when omitted.
    ax
        An Axes to draw into; panels then become curves.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        ``x`` or ``y`` given, or a column does not fit its role.
    ResultsError
        No percentile column holds data, ``direction`` matches no row, or no point finished ``ok``.
    """
    figure = "latency_percentiles"
    options.fixed(figure, {"x": x, "y": y}, {"x": "the percentile", "y": "the completion latency"})
    data = df
    if direction is not None:
        dt.require(df, ["direction"], figure)
        data = df[df["direction"].eq(direction).fillna(False)]
        if data.empty:
            raise ResultsError(f"latency_percentiles: no rows with direction {direction!r}")
    totals = dt.totals_for(data, figure)
    options.check(data, totals, figure, categories={"hue": hue, "col": col, "row": row})
    percentiles = dt.percentile_columns(totals)
    if not percentiles:
        raise ResultsError(
            "latency_percentiles: no clat_p*_us column holds data (fio reports percentiles unless "
            "clat_percentiles=0 or the output format lacks them)"
        )
    rows = [row] if row else []
    if hue is None and col is None and row is None:
        cols, lines = percentile_layout(totals)
    else:  # as in the line figures: the first axis without a role gets the columns, the rest curves
        others = dt.splitting_axes(totals, [c for c in (hue, col, row) if c])
        if col is None and others:
            col = others.pop(0)
        cols = [col] if col else []
        lines = [*([hue] if hue else []), *others]
    if ax is not None:
        rows, cols, lines = [], [], [*rows, *cols, *lines]
    panels = [*rows, *cols]
    columns = list(percentiles.values())
    summary = dt.over_repeats(totals, [*panels, *lines], columns)
    curves = limits.top(summary, lines, columns[-1])
    notes = [
        limits.shown(
            len(curves),
            dt.distinct(summary, lines),
            "curves",
            f"the highest mean {st.short_label(columns[-1])}",
        )
    ]
    summary = limits.keep(summary, lines, curves)
    draw = partial(
        _draw_curves, lines=lines, percentiles=percentiles, curves=curves, colours=_palette(lines, curves)
    )
    if ax is not None:
        draw(ax, summary)
        if lines:
            ax.legend(fontsize=st.SMALL)
        return st.root_figure(ax)
    grid = st.panel_grid(dt.combos(summary, panels), panels, rows=len(rows), max_cols=MAX_COLS, height=3.6)
    axes = [axis for (axis,) in grid.stacks]
    for axis, panel in zip(axes, grid.panels, strict=True):
        draw(axis, dt.select(summary, panels, panel))
    low = min(axis.get_ylim()[0] for axis in axes)
    high = max(axis.get_ylim()[1] for axis in axes)
    for axis in axes:
        axis.set_ylim(low, high)
    note = st.repeats_note(summary, columns)
    if "pct_exact" in totals and totals["pct_exact"].eq(False).any():
        note += "; approximate percentiles (no json+ histograms): jobs' percentiles weighted by their I/Os"
    st.finish(grid.fig, df, "Completion latency percentiles", [note, *notes, grid.note])
    return grid.fig

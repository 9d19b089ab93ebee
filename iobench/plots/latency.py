"""Completion latency percentile curves, one per point, on a 'nines' axis."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from iobench.errors import ResultsError
from iobench.plots import _style as st
from iobench.plots._data import ok_rows, over_repeats, percentile_columns, point_totals, splitting_axes
from iobench.plots._lines import combos, panel_title, select

#: Panels per row before the figure wraps.
MAX_COLS = 2
_TOP = 99.9999


def nines(p: Any) -> Any:
    """The 'nines' of a percentile: ``-log10(1 - p/100)`` (p50 → 0.3, p90 → 1, p99 → 2, p99.9 → 3)."""
    return -np.log10(1 - np.clip(np.asarray(p, dtype=float), 0, _TOP) / 100)


def _from_nines(n: Any) -> Any:
    return 100 * (1 - 10 ** (-np.asarray(n, dtype=float)))


def _percentile_text(p: float) -> str:
    return f"p{p:g}"


def percentile_layout(totals: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Panels: the first categorical axis when two or more vary; lines: the rest."""
    axes = splitting_axes(totals, [])
    if len(axes) < 2:
        return [], axes
    for column in axes:
        values = totals[column].dropna().tolist()
        if st.x_positions(column, st.ordered(column, values)) is not None:
            return [column], [c for c in axes if c != column]
    return axes[-1:], axes[:-1]


def _palette(lines: Sequence[str], curves: list[tuple[object, ...]]) -> list[Any]:
    """A sequential map along one numeric axis, fixed/cycled colours otherwise."""
    if len(lines) == 1 and len(curves) > 2 and st.is_numeric([c[0] for c in curves]):
        cmap = colormaps["viridis"]
        return [cmap(0.9 * i / (len(curves) - 1)) for i in range(len(curves))]
    if len(lines) == 1:
        return st.colours(lines[0], [c[0] for c in curves])
    return st.colours(None, curves)


def _draw(
    axis: Axes,
    data: pd.DataFrame,
    lines: Sequence[str],
    percentiles: dict[float, str],
    curves: list[tuple[object, ...]],
    palette: list[Any],
) -> None:
    ps = list(percentiles)
    for index, (combo, colour) in enumerate(zip(curves, palette, strict=True)):
        row = select(data, lines, combo)
        if row.empty:
            continue
        values = [float(row[c].iloc[0]) for c in percentiles.values()]
        text = st.series_label(lines, combo) if lines else "all points"
        dashes = st.LINESTYLES[index // len(st.CYCLE) % len(st.LINESTYLES)]
        axis.plot(
            ps, values, color=colour, linestyle=dashes, marker="o", markersize=4, linewidth=1.5, label=text
        )
    axis.set_xscale("function", functions=(nines, _from_nines))
    axis.set_xticks(ps, [_percentile_text(p) for p in ps])
    axis.set_xlim(float(_from_nines(nines(ps[0]) - 0.2)), float(_from_nines(nines(ps[-1]) + 0.2)))
    axis.set_yscale("log")
    axis.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: st.plain(float(v))))
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.set_xlabel("Percentile")
    axis.set_ylabel("Completion latency (µs)")
    axis.grid(True, which="major", alpha=0.3)


def latency_percentiles(df: pd.DataFrame, *, direction: str | None = None, ax: Axes | None = None) -> Figure:
    """Completion latency at each percentile fio reported, one curve per point.

    The x axis counts nines (p50, p90, p99, p99.9 evenly apart), the y axis is
    log-scaled µs. Each curve is the mean over the point's repeats of the
    IOPS-weighted per-job percentiles (an approximation of the merged
    distribution's percentile). Curves are labelled with the parameters that
    vary; a single varying number (iodepth, numjobs, bs) is coloured light to
    dark along a sequential map. When two or more axes vary, the first
    categorical one (binding, placement, scheduler, direction ...) gets a panel per value.

    Parameters
    ----------
    df
        A tidy frame with ``clat_p*_us`` columns.
    direction
        Only this direction (``read``, ``write``, ``trim``); all, as an axis, when omitted.
    ax
        An Axes to draw into; panels then become lines.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        No percentile column holds data, or no point finished ``ok``.
    """
    data = ok_rows(df, "latency_percentiles")
    if direction is not None:
        data = data[data["direction"] == direction]
        if data.empty:
            raise ResultsError(f"latency_percentiles: no ok rows with direction {direction!r}")
    percentiles = percentile_columns(data)
    if not percentiles:
        raise ResultsError(
            "latency_percentiles: no clat_p*_us column holds data (fio reports percentiles unless "
            "clat_percentiles=0 or the output format lacks them)"
        )
    totals = point_totals(data)
    panels, lines = percentile_layout(totals)
    if ax is not None:
        panels, lines = [], [*lines, *panels]
    summary = over_repeats(totals, [*panels, *lines], list(percentiles.values()))
    curves = combos(summary, lines)
    palette = _palette(lines, curves)
    if ax is not None:
        _draw(ax, summary, lines, percentiles, curves, palette)
        ax.legend(fontsize=st.SMALL)
        return st.root_figure(ax)
    panel_values = combos(summary, panels)
    cols = min(len(panel_values), MAX_COLS)
    rows = math.ceil(len(panel_values) / cols)
    fig, grid = st.new_figure(rows, cols, height=3.6)
    drawn: list[Axes] = []
    for index, panel in enumerate(panel_values):
        axis: Axes = grid.flat[index]
        _draw(axis, select(summary, panels, panel), lines, percentiles, curves, palette)
        if panels:
            axis.set_title(panel_title(panels, panel), fontsize=st.MEDIUM)
        drawn.append(axis)
    for axis in grid.flat[len(drawn) :]:
        axis.set_visible(False)
    if len(drawn) > 1:
        low = min(a.get_ylim()[0] for a in drawn)
        high = max(a.get_ylim()[1] for a in drawn)
        for axis in drawn:
            axis.set_ylim(low, high)
    fig.suptitle("Completion latency percentiles", fontsize=st.LARGE)
    st.legend_outside(fig, drawn)
    st.add_caption(
        fig, st.caption(df, notes=[st.repeats_note(summary, list(percentiles.values()), bars=False)])
    )
    return fig

"""Line figures: a metric against a parameter, a line per series, a panel per remaining axis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from iobench.errors import ResultsError
from iobench.matrix.display import format_value
from iobench.plots import limits, options
from iobench.plots import plotdata as dt
from iobench.plots import plotstyle as st
from iobench.plots.marks import Mark, annotate, with_marks

#: x axes a sweep prefers, in order.
SWEEP_X = ("iodepth", "numjobs", "bs")
#: Panel columns per row before a figure wraps.
MAX_COLS = 3
#: Axes drawn on a log2 scale with their values as ticks.
LOG2 = frozenset({"iodepth", "numjobs", "bs"})
#: Numeric axes drawn evenly spaced, as categories (0 does not fit a log scale; 0/1 are modes).
CATEGORICAL = frozenset({"readahead_kb", "direct"})


@dataclass(frozen=True)
class Layout:
    """Which columns a line figure puts where.

    ``colour`` columns pick a line's colour (``hue``), ``style`` columns its
    dash and marker, ``col`` and ``row`` columns its panel. Every axis that
    tells points apart has a place, so nothing is averaged but the repeats of
    one point.
    """

    x: str
    colour: tuple[str, ...] = ()
    style: tuple[str, ...] = ()
    col: tuple[str, ...] = ()
    row: tuple[str, ...] = ()

    @property
    def series(self) -> tuple[str, ...]:
        """Columns that make one line."""
        return (*self.colour, *self.style)

    @property
    def panel(self) -> tuple[str, ...]:
        """Columns that make one panel: the rows', then the columns'."""
        return (*self.row, *self.col)

    @property
    def keys(self) -> list[str]:
        """Every column a mean over repeats is grouped by."""
        return list(dict.fromkeys((self.x, *self.series, *self.panel)))

    def in_one_panel(self) -> Layout:
        """This layout with the panel columns turned into line styles."""
        return Layout(self.x, self.colour, (*self.panel, *self.style))


def layout_for(
    totals: pd.DataFrame,
    x: str,
    *,
    hue: str | None,
    col: str | None,
    row: str | None,
    auto_hue: bool = False,
    auto_col: bool = False,
) -> Layout:
    """The :class:`Layout` of the roles given; every other axis that varies gets a place.

    With ``auto_hue`` the first other axis gets the colours when ``hue`` is
    not given, with ``auto_col`` the next the panels when ``col`` is not
    given; any further axis gets a line style.
    """
    others = dt.splitting_axes(totals, [c for c in (x, hue, col, row) if c])
    if hue is None and auto_hue and others:
        hue = others.pop(0)
    if col is None and auto_col and others:
        col = others.pop(0)
    return Layout(
        x,
        colour=(hue,) if hue else (),
        style=tuple(others),
        col=(col,) if col else (),
        row=(row,) if row else (),
    )


def main_axis(axes: Sequence[str], preferred: str = SWEEP_X[0]) -> str | None:
    """The x of a line figure: ``preferred``, else iodepth, numjobs or bs, else the first of ``axes``."""
    return next((c for c in (preferred, *SWEEP_X, *axes) if c in axes), None)


def x_positions(column: str, values: Sequence[object]) -> dict[object, float] | None:
    """Evenly spaced positions, keyed by :func:`key`, for a categorical x axis; None for a numeric one."""
    if st.is_numeric(values) and column not in CATEGORICAL:
        return None
    return {dt.key(v): float(i) for i, v in enumerate(values)}


def _setup_x(
    axis: Axes, column: str, values: Sequence[object], positions: dict[object, float] | None
) -> None:
    """Label the x axis, log2-scale iodepth/numjobs/bs, and put a tick on every value drawn."""
    axis.set_xlabel(st.label(column))
    names = [format_value(column, v) for v in values]
    if positions is not None:
        axis.set_xticks(list(positions.values()), names)
        axis.set_xlim(-0.5, len(values) - 0.5)
        return
    numbers = [n for v in values if (n := dt.as_number(v)) is not None]
    if column in LOG2 and min(numbers) > 0:
        axis.set_xscale("log", base=2)
        if len(numbers) == 1:
            axis.set_xlim(numbers[0] / 2, numbers[0] * 2)
    if len(numbers) <= 16:
        axis.set_xticks(numbers, names)
        axis.xaxis.set_minor_locator(NullLocator())


def _draw_lines(
    axis: Axes,
    summary: pd.DataFrame,
    layout: Layout,
    metric: str,
    *,
    x_values: Sequence[object],
    series: Sequence[tuple[object, ...]],
    marks: Sequence[tuple[Mark, str]],
    names: Mapping[str, str] | None = None,
) -> None:
    """Draw ``metric`` (mean over repeats, with 95 % CI bars) against ``layout.x``, a line per series.

    ``summary`` comes from :func:`over_repeats` grouped by ``layout.keys``; the
    x values and ``series`` span every panel, so a series keeps its colour and
    dash in all of them. Points against a nominal x (schedulers) are not
    joined: no line runs between values that have no order.
    """
    positions = x_positions(layout.x, x_values)
    joined = st.is_numeric(x_values)
    factor = st.scale(metric)
    width = len(layout.colour)
    colour_combos = list(dict.fromkeys(tuple(dt.key(v) for v in s[:width]) for s in series))
    style_combos = list(dict.fromkeys(tuple(dt.key(v) for v in s[width:]) for s in series))
    colours = st.palette(layout.colour, [s[:width] for s in _firsts(series, width)])
    rows = dt.positions(summary, layout.series)
    for values in series:
        line = summary.iloc[rows.get(tuple(dt.key(v) for v in values), [])]
        if line.empty or line[metric].isna().all():
            continue
        colour = colours[colour_combos.index(tuple(dt.key(v) for v in values[:width]))]
        index = style_combos.index(tuple(dt.key(v) for v in values[width:]))
        xs = np.array(
            [positions[dt.key(v)] if positions else dt.as_number(v) for v in line[layout.x]], dtype=float
        )
        order = np.argsort(xs, kind="stable")
        ys = line[metric].to_numpy(dtype=float)[order] * factor
        ci = line[f"{metric}_ci95"].to_numpy(dtype=float)[order] * factor
        axis.plot(
            xs[order],
            ys,
            color=colour,
            linestyle=st.LINESTYLES[index % len(st.LINESTYLES)] if joined else "none",
            marker=st.MARKERS[index % len(st.MARKERS)],
            markersize=5 if joined else 7,
            linewidth=1.6,
            label=st.describe(layout.series, values, names=names) if layout.series else None,
        )
        if np.isfinite(ci).any():
            axis.errorbar(
                xs[order],
                ys,
                yerr=st.error_bars(ys, ci),
                fmt="none",
                ecolor=colour,
                elinewidth=1.1,
                capsize=3,
            )
        annotate(axis, xs[order], ys, line.iloc[order], marks)
    _setup_x(axis, layout.x, x_values, positions)
    axis.set_ylabel(st.label(metric))
    st.metric_ticks(axis.yaxis, metric)
    if summary[metric].min() >= 0:
        axis.set_ylim(0, axis.get_ylim()[1] * 1.05)  # room for the top markers
    axis.grid(True, alpha=0.3)


def _firsts(series: Sequence[tuple[object, ...]], width: int) -> list[tuple[object, ...]]:
    """The first series of each colour, in order: one entry per colour."""
    seen: dict[tuple[object, ...], tuple[object, ...]] = {}
    for values in series:
        seen.setdefault(tuple(dt.key(v) for v in values[:width]), values)
    return list(seen.values())


def lines_figure(
    df: pd.DataFrame,
    totals: pd.DataFrame,
    layout: Layout,
    metrics: Sequence[str],
    *,
    ax: Axes | None = None,
    title: str = "",
    legend_title: str | None = None,
    names: Mapping[str, str] | None = None,
) -> Figure:
    """Draw ``metrics`` (a row of panels each) per :class:`Layout`; into ``ax`` when given (first metric).

    Past :data:`~iobench.plots.limits.MAX_SERIES` lines the figure keeps those
    with the highest mean of the first metric, past
    :data:`~iobench.plots.limits.MAX_CATEGORIES` values of a categorical x the
    first, and past what fits the first panels; its caption says so.
    """
    totals, marks = with_marks(totals)
    summary = dt.over_repeats(totals, layout.keys, [*metrics, *(column for _, column in marks)])
    if ax is not None:
        layout = layout.in_one_panel()
    notes = []
    x_values = dt.ordered(layout.x, summary[layout.x])
    if x_positions(layout.x, x_values) is not None and len(x_values) > limits.MAX_CATEGORIES:
        kept = limits.first(x_values)
        summary = limits.keep(summary, [layout.x], [(v,) for v in kept])
        notes.append(limits.shown(len(kept), len(x_values), f"values of {layout.x}", "the first"))
        x_values = kept
    series = limits.top(summary, layout.series, metrics[0])
    total = dt.distinct(summary, list(layout.series)) if layout.series else 1
    if len(series) < total:
        summary = limits.keep(summary, layout.series, series)
        rule = f"the highest mean {st.short_label(metrics[0])}"
        notes.append(limits.shown(len(series), total, "lines", rule))
    draw = partial(_draw_lines, layout=layout, x_values=x_values, series=series, marks=marks, names=names)
    if ax is not None:
        draw(ax, summary, metric=metrics[0])
        if layout.series or marks:
            ax.legend(fontsize=st.SMALL, title=legend_title, title_fontsize=st.SMALL)
        return st.root_figure(ax)
    grid = st.panel_grid(
        dt.combos(summary, layout.panel),
        layout.panel,
        rows=len(layout.row),
        max_cols=MAX_COLS,
        rows_each=len(metrics),
    )
    for panel, stack in zip(grid.panels, grid.stacks, strict=True):
        for axis, metric in zip(stack, metrics, strict=True):
            draw(axis, dt.select(summary, layout.panel, panel), metric=metric)
        for axis in stack[:-1]:
            axis.set_xlabel("")
    for place in range(len(metrics)):  # panels side by side compare one metric: one y range for it
        st.share_y([stack[place] for stack in grid.stacks])
    st.finish(grid.fig, df, title, [st.repeats_note(summary, metrics), *notes, grid.note])
    return grid.fig


def _axes_given(x: str | None, hue: str | None, col: str | None, row: str | None) -> dict[str, str | None]:
    return {"x": x, "hue": hue, "col": col, "row": row}


def plot(
    df: pd.DataFrame,
    *,
    x: str | None = None,
    y: str | Sequence[str] = "iops",
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Draw ``y`` (mean over repeats of the point totals) against ``x``, one line per ``hue``.

    Axes that vary but are neither ``x``, ``hue``, ``col`` nor ``row`` get a
    line style each: nothing is averaged but a point's repeats.

    Parameters
    ----------
    df
        A tidy frame (from :func:`iobench.load` or :func:`iobench.run`).
    x
        Category column for the horizontal axis; by default the main axis
        (iodepth, numjobs or bs, the first that varies).
    y
        Metric column, or several (a row of panels each); combined over a
        point's jobs as :func:`point_totals` says.
    hue
        Category column whose values get a line (and colour) each.
    col, row
        Category columns whose values get a column, a row of panels each
        (line styles, when ``ax`` is given).
    ax
        A matplotlib Axes to draw into (the first ``y`` only); a new Figure is made when omitted.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        A column does not fit its role (:mod:`iobench.plots.options`).
    ResultsError
        No point finished ``ok``, or nothing varies and ``x`` is not given.
    """
    metrics = [y] if isinstance(y, str) else list(y)
    totals = dt.totals_for(df, "plot")
    options.check(df, totals, "plot", categories=_axes_given(x, hue, col, row), metrics={"y": metrics})
    x = x or main_axis(dt.splitting_axes(totals, [c for c in (hue, col, row) if c]))
    if x is None:
        raise ResultsError(
            f"plot: nothing varies between the points; pass x= one of {', '.join(options.category_fits(totals))}"
        )
    layout = layout_for(totals, x, hue=hue, col=col, row=row)
    return lines_figure(df, totals, layout, metrics, ax=ax, title=st.headline(metrics, x))


def sweep(
    df: pd.DataFrame,
    *,
    x: str | None = None,
    y: str | None = None,
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Throughput and mean latency against the run's main axis.

    Roles not given are filled in from the axes that vary: ``x`` is iodepth,
    numjobs or bs (the first that varies), else the first varying axis; the
    next varying axis gets a colour per value (``hue``), the one after a panel
    per value (``col``), and any further one a line style: no axis is averaged
    away.

    Parameters
    ----------
    df
        A tidy frame.
    x
        The horizontal axis (a category column).
    y
        The throughput metric; by default ``bw_bytes`` (MiB/s) when the run's
        I/Os average 64 KiB or more, else ``iops`` (see :func:`throughput_metric`).
    hue, col, row
        Category columns for the lines' colours, the panels' columns and rows.
    ax
        An Axes to draw the throughput lines into; a new two-row Figure when omitted.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        A column does not fit its role.
    ResultsError
        Nothing varies between the points, or no point finished ``ok``.
    """
    totals = dt.totals_for(df, "sweep")
    given = _axes_given(x, hue, col, row)
    options.check(df, totals, "sweep", categories=given, metrics={"y": [y] if y else []})
    x = x or main_axis(dt.splitting_axes(totals, [c for c in (hue, col, row) if c]))
    if x is None:
        raise ResultsError("sweep: nothing varies between the points; use plot(df, x=..., y=...) instead")
    layout = layout_for(totals, x, hue=hue, col=col, row=row, auto_hue=True, auto_col=True)
    metrics = list(dict.fromkeys([y or dt.throughput_metric(totals), "lat_mean_us"]))
    options.check(df, totals, "sweep", metrics={"y": metrics})
    return lines_figure(df, totals, layout, metrics, ax=ax, title=st.headline(metrics, x))

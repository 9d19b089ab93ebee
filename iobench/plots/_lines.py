"""Line figures: a metric against a parameter, a line per series, a panel per remaining axis."""

from __future__ import annotations

import itertools
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
from iobench.plots import _data as dt
from iobench.plots import _style as st

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

    ``colour`` columns pick a line's colour, ``style`` columns its dash and
    marker, ``panel`` columns its panel. Every axis that tells points apart
    has a place, so nothing is averaged but the repeats of one point.
    """

    x: str
    colour: tuple[str, ...] = ()
    style: tuple[str, ...] = ()
    panel: tuple[str, ...] = ()

    @property
    def series(self) -> tuple[str, ...]:
        """Columns that make one line."""
        return (*self.colour, *self.style)

    @property
    def keys(self) -> list[str]:
        """Every column a mean over repeats is grouped by."""
        return list(dict.fromkeys((self.x, *self.series, *self.panel)))

    def in_one_panel(self) -> Layout:
        """This layout with the panel columns turned into line styles."""
        return Layout(self.x, self.colour, (*self.panel, *self.style))


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
    colour_combos: Sequence[tuple[object, ...]],
    style_combos: Sequence[tuple[object, ...]],
    names: Mapping[str, str] | None = None,
) -> None:
    """Draw ``metric`` (mean over repeats, with 95 % CI bars) against ``layout.x``, a line per series.

    ``summary`` comes from :func:`over_repeats` grouped by ``layout.keys``; the
    x values and series combinations span every panel, so a series keeps its
    colour and dash in all of them. Points against a nominal x (schedulers) are
    not joined: no line runs between values that have no order.
    """
    positions = x_positions(layout.x, x_values)
    joined = st.is_numeric(x_values)
    factor = st.scale(metric)
    colours = st.palette(layout.colour, colour_combos)
    for (colour, colour_values), (index, style_values) in itertools.product(
        zip(colours, colour_combos, strict=True), enumerate(style_combos)
    ):
        values = (*colour_values, *style_values)
        line = dt.select(summary, layout.series, values)
        if line[metric].isna().all():
            continue
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
                xs[order], ys, yerr=np.nan_to_num(ci), fmt="none", ecolor=colour, elinewidth=1.1, capsize=3
            )
    _setup_x(axis, layout.x, x_values, positions)
    axis.set_ylabel(st.label(metric))
    st.metric_ticks(axis.yaxis, metric)
    if summary[metric].min() >= 0:
        axis.set_ylim(0, axis.get_ylim()[1] * 1.05)  # room for the top markers
    axis.grid(True, alpha=0.3)


def lines_figure(
    df: pd.DataFrame,
    totals: pd.DataFrame,
    layout: Layout,
    metrics: Sequence[str],
    *,
    figure: str,
    ax: Axes | None = None,
    title: str = "",
    legend_title: str | None = None,
    names: Mapping[str, str] | None = None,
) -> Figure:
    """Draw ``metrics`` (a row of panels each) per :class:`Layout`; into ``ax`` when given (first metric).

    Raises
    ------
    ResultsError
        A metric the point totals do not have.
    """
    dt.require_metrics(totals, metrics, figure)
    summary = dt.over_repeats(totals, layout.keys, metrics)
    if ax is not None:
        layout = layout.in_one_panel()
    draw = partial(
        _draw_lines,
        layout=layout,
        x_values=dt.ordered(layout.x, summary[layout.x]),
        colour_combos=dt.combos(summary, layout.colour),
        style_combos=dt.combos(summary, layout.style),
        names=names,
    )
    if ax is not None:
        draw(ax, summary, metric=metrics[0])
        if layout.series:
            ax.legend(fontsize=st.SMALL, title=legend_title, title_fontsize=st.SMALL)
        return st.root_figure(ax)
    panels = dt.combos(summary, layout.panel)
    fig, stacks = st.panel_grid(panels, layout.panel, max_cols=MAX_COLS, rows_each=len(metrics))
    for panel, stack in zip(panels, stacks, strict=True):
        for axis, metric in zip(stack, metrics, strict=True):
            draw(axis, dt.select(summary, layout.panel, panel), metric=metric)
        for axis in stack[:-1]:
            axis.set_xlabel("")
    st.finish(fig, df, title, st.repeats_note(summary, metrics))
    return fig


def plot(
    df: pd.DataFrame,
    *,
    x: str,
    y: str | Sequence[str] = "iops",
    hue: str | None = None,
    col: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Draw ``y`` (mean over repeats of the point totals) against ``x``, one line per ``hue``.

    Axes that vary but are neither ``x``, ``hue`` nor ``col`` get a line style
    each: nothing is averaged but a point's repeats.

    Parameters
    ----------
    df
        A tidy frame (from :func:`iobench.load` or :func:`iobench.run`).
    x
        Column for the horizontal axis.
    y
        Metric column, or several (a row of panels each); combined over a
        point's jobs as :func:`point_totals` says.
    hue
        Column whose values get a line (and colour) each.
    col
        Column whose values get a panel each (a line style, when ``ax`` is given).
    ax
        A matplotlib Axes to draw into (the first ``y`` only); a new Figure is made when omitted.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        A named column or metric is missing, or no point finished ``ok``.
    """
    chosen = [c for c in (x, hue, col) if c]
    totals = dt.totals_for(df, "plot", chosen)
    layout = Layout(
        x,
        colour=(hue,) if hue else (),
        style=tuple(dt.splitting_axes(totals, chosen)),
        panel=(col,) if col else (),
    )
    metrics = [y] if isinstance(y, str) else list(y)
    return lines_figure(df, totals, layout, metrics, figure="plot", ax=ax, title=st.headline(metrics, x))


def sweep(df: pd.DataFrame, *, y: str | None = None, ax: Axes | None = None) -> Figure:
    """Throughput and mean latency against the run's main axis.

    The x axis is iodepth, numjobs or bs (the first that varies), else the first
    varying axis. The next varying axis gets a colour per value, the one after
    a panel per value, and any further one a line style: no axis is averaged
    away.

    Parameters
    ----------
    df
        A tidy frame.
    y
        The throughput metric; by default ``bw_bytes`` (MiB/s) when the run's
        I/Os average 64 KiB or more, else ``iops`` (see :func:`throughput_metric`).
    ax
        An Axes to draw the throughput lines into; a new two-row Figure when omitted.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        Nothing varies between the points, or no point finished ``ok``.
    """
    totals = dt.totals_for(df, "sweep")
    x = main_axis(dt.splitting_axes(totals, []))
    if x is None:
        raise ResultsError("sweep: nothing varies between the points; use plot(df, x=..., y=...) instead")
    others = dt.splitting_axes(totals, [x])
    layout = Layout(x, colour=tuple(others[:1]), panel=tuple(others[1:2]), style=tuple(others[2:]))
    y = y or dt.throughput_metric(totals)
    metrics = [y, "lat_mean_us"]
    return lines_figure(df, totals, layout, metrics, figure="sweep", ax=ax, title=st.headline(metrics, x))

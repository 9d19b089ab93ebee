"""Line figures: a metric against a parameter, a line per series, a panel per remaining axis."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from iobench.errors import ResultsError
from iobench.plots import _style as st
from iobench.plots._data import (
    ok_rows,
    over_repeats,
    point_totals,
    require,
    splitting_axes,
    throughput_metric,
)

#: x axes a sweep prefers, in order.
SWEEP_X = ("iodepth", "numjobs", "bs")
#: Panel columns per row before a figure wraps.
MAX_COLS = 3


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
        return list(dict.fromkeys((self.x, *self.colour, *self.style, *self.panel)))


def combos(frame: pd.DataFrame, columns: Sequence[str]) -> list[tuple[object, ...]]:
    """The distinct value combinations of ``columns`` in reading order."""
    if not columns:
        return [()]
    rows = {tuple(st.key(v) for v in r): tuple(r) for r in frame[list(columns)].itertuples(index=False)}
    orders = [{st.key(v): i for i, v in enumerate(st.ordered(c, frame[c].tolist()))} for c in columns]
    return sorted(rows.values(), key=lambda r: [o[st.key(v)] for o, v in zip(orders, r, strict=True)])


def select(frame: pd.DataFrame, columns: Sequence[str], values: Sequence[object]) -> pd.DataFrame:
    mask = pd.Series(True, index=frame.index)
    for column, value in zip(columns, values, strict=True):
        mask &= frame[column].isna() if st.is_missing(value) else (frame[column] == value).fillna(False)
    return frame[mask]


def panel_title(columns: Sequence[str], values: Sequence[object]) -> str:
    """``bs=64k · direction=read`` (``O_DIRECT``, not ``direct=O_DIRECT``)."""
    parts = [
        st.format_value(c, v) if c in st.SELF_EXPLAINING else f"{c}={st.format_value(c, v)}"
        for c, v in zip(columns, values, strict=True)
    ]
    return " · ".join(parts)


def draw_lines(
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
    """Draw ``metric`` (mean over repeats) against ``layout.x`` into ``axis``, a line per series.

    ``summary`` comes from :func:`over_repeats` grouped by ``layout.keys``; the
    x values and series combinations span every panel, so a series keeps its
    colour and dash in all of them. Against a nominal x (schedulers) points are
    not joined: no line runs between values that have no order.
    """
    positions = st.x_positions(layout.x, x_values)
    nominal = positions is not None and not st.is_numeric(x_values)
    if len(layout.colour) == 1:
        palette = st.colours(layout.colour[0], [c[0] for c in colour_combos])
    else:
        palette = st.colours(None, colour_combos)
    factor = st.scale(metric)
    order = {st.key(v): i for i, v in enumerate(x_values)}
    for colour_index, colour_values in enumerate(colour_combos):
        for style_index, style_values in enumerate(style_combos):
            line = select(summary, layout.series, (*colour_values, *style_values))
            line = line[line[layout.x].notna()]
            if line.empty or line[metric].isna().all():
                continue
            line = line.iloc[sorted(range(len(line)), key=lambda i: order[st.key(line[layout.x].iloc[i])])]
            xs = [st.x_value(v, positions) for v in line[layout.x]]
            ys = line[metric].to_numpy(dtype=float) * factor
            colour = palette[colour_index]
            text = None
            if layout.series:
                text = st.series_label(layout.series, (*colour_values, *style_values))
                text = (names or {}).get(text, text)
            axis.plot(
                xs,
                ys,
                color=colour,
                linestyle="none" if nominal else st.LINESTYLES[style_index % len(st.LINESTYLES)],
                marker=st.MARKERS[style_index % len(st.MARKERS)],
                markersize=7 if nominal else 5,
                linewidth=1.6,
                label=text,
            )
            ci = line[f"{metric}_ci95"].to_numpy(dtype=float) * factor
            if np.isfinite(ci).any():
                axis.errorbar(
                    xs, ys, yerr=np.nan_to_num(ci), fmt="none", ecolor=colour, elinewidth=1.1, capsize=3
                )
    st.setup_x(axis, layout.x, x_values, positions)
    axis.set_ylabel(st.label(metric))
    st.metric_ticks(axis.yaxis, metric)
    values = summary[metric].dropna()
    if len(values) and float(values.min()) >= 0:
        axis.set_ylim(bottom=0)
        top = float((summary[metric] + summary[f"{metric}_ci95"].fillna(0)).max()) * factor
        if math.isfinite(top) and top > 0:
            axis.set_ylim(top=top * 1.08)
    axis.grid(True, alpha=0.3)


def lines_figure(
    df: pd.DataFrame,
    totals: pd.DataFrame,
    layout: Layout,
    metrics: Sequence[str],
    *,
    ax: Axes | None = None,
    title: str | None = None,
    legend_title: str | None = None,
    names: Mapping[str, str] | None = None,
) -> Figure:
    """Draw ``metrics`` (a row of panels each) per :class:`Layout`; into ``ax`` when given (first metric)."""
    for metric in metrics:
        require(totals, [metric], "plot", "pick a metric column of the frame")
    summary = over_repeats(totals, layout.keys, metrics)
    if ax is not None and layout.panel:
        layout = Layout(layout.x, layout.colour, (*layout.style, *layout.panel))
    draw = partial(
        draw_lines,
        layout=layout,
        x_values=st.ordered(layout.x, summary[layout.x].dropna().tolist()),
        colour_combos=combos(summary, layout.colour),
        style_combos=combos(summary, layout.style),
        names=names,
    )
    if ax is not None:
        draw(ax, summary, metric=metrics[0])
        if layout.series:
            ax.legend(fontsize=st.SMALL, title=legend_title, title_fontsize=st.SMALL)
        return st.root_figure(ax)
    panels = combos(summary, layout.panel)
    cols = min(len(panels), MAX_COLS)
    blocks = math.ceil(len(panels) / cols)
    fig, grid = st.new_figure(blocks * len(metrics), cols)
    drawn: list[Axes] = []
    for index, panel in enumerate(panels):
        block, col = divmod(index, cols)
        data = select(summary, layout.panel, panel)
        for row, metric in enumerate(metrics):
            axis: Axes = grid[block * len(metrics) + row][col]
            draw(axis, data, metric=metric)
            if layout.panel and row == 0:
                axis.set_title(panel_title(layout.panel, panel), fontsize=st.MEDIUM)
            if row < len(metrics) - 1:
                axis.set_xlabel("")
            drawn.append(axis)
    for axis in grid.flat[len(drawn) :]:
        axis.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=st.LARGE)
    if layout.series:
        st.legend_outside(fig, drawn)
    st.add_caption(fig, st.caption(df, notes=[st.repeats_note(summary, metrics)]))
    return fig


def _line_layout(totals: pd.DataFrame, x: str, hue: str | None, col: str | None, *, panels: bool) -> Layout:
    chosen = [c for c in (x, hue, col) if c]
    others = splitting_axes(totals, chosen)
    return Layout(
        x,
        colour=(hue,) if hue else (),
        style=tuple(others),
        panel=(col,) if col and panels else (),
    )


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
        Metric column, or several (a row of panels each). IOPS and bandwidth are
        summed over a point's jobs; latencies are IOPS-weighted.
    hue
        Column whose values get a line (and colour) each.
    col
        Column whose values get a panel each (lines, when ``ax`` is given).
    ax
        A matplotlib Axes to draw into (the first ``y`` only); a new Figure is made when omitted.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        A named column is missing, or no point finished ``ok``.
    """
    require(df, [c for c in (x, hue, col) if c], "plot")
    totals = point_totals(ok_rows(df, "plot"))
    metrics = [y] if isinstance(y, str) else list(y)
    layout = _line_layout(totals, x, hue, col, panels=ax is None)
    return lines_figure(df, totals, layout, metrics, ax=ax)


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
    totals = point_totals(ok_rows(df, "sweep"))
    params = splitting_axes(totals, [])
    x = next((c for c in SWEEP_X if c in params), params[0] if params else None)
    if x is None:
        raise ResultsError("sweep: nothing varies between the points; use plot(df, x=..., y=...) instead")
    others = splitting_axes(totals, [x])
    layout = Layout(x, colour=tuple(others[:1]), panel=tuple(others[1:2]), style=tuple(others[2:]))
    y = y or throughput_metric(totals)
    title = f"{st.short_label(y)} and mean latency vs {st.in_sentence(st.short_label(x))}"
    return lines_figure(df, totals, layout, [y, "lat_mean_us"], ax=ax, title=title)

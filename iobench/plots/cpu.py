"""CPU time per I/O as bars, to compare settings (scheduler, readahead, buffered vs direct)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from iobench.errors import ResultsError
from iobench.plots import _style as st
from iobench.plots._data import ok_rows, over_repeats, point_totals, require, splitting_axes
from iobench.plots._lines import combos, panel_title, select

#: Settings ``by`` is picked from, in order, when not given.
SETTINGS = ("scheduler", "readahead_kb", "direct", "binding", "placement")
#: Panels per row before the figure wraps.
MAX_COLS = 3


def _draw(
    axis: Axes,
    data: pd.DataFrame,
    *,
    metric: str,
    by: str,
    by_values: Sequence[object],
    hue: str | None,
    hue_values: list[tuple[object, ...]],
) -> None:
    group_width = 0.8
    width = group_width / len(hue_values)
    hue_columns = [hue] if hue else []
    palette = st.colours(hue, hue_values) if hue else st.colours(by, by_values)
    factor = st.scale(metric)
    for index, hue_value in enumerate(hue_values):
        offset = (index - (len(hue_values) - 1) / 2) * width
        xs, heights, errors, colours = [], [], [], []
        for position, value in enumerate(by_values):
            row = select(data, [by, *hue_columns], (value, *hue_value))
            if row.empty or math.isnan(float(row[metric].iloc[0])):
                continue
            xs.append(position + offset)
            heights.append(float(row[metric].iloc[0]) * factor)
            errors.append(float(row[f"{metric}_ci95"].iloc[0]) * factor)
            colours.append(palette[index] if hue else palette[position])
        if not xs:
            continue
        yerr = np.nan_to_num(errors) if np.isfinite(errors).any() else None
        bars = axis.bar(
            xs,
            heights,
            width=width * 0.92,
            color=colours,
            yerr=yerr,
            capsize=4,
            error_kw={"elinewidth": 1.1, "ecolor": "0.2"},
            label=st.series_label([hue], hue_value) if hue else None,
        )
        tops = np.array(heights) + (yerr if yerr is not None else 0)
        for bar, top, height in zip(bars, tops, heights, strict=True):
            axis.annotate(
                st.metric_text(metric, height),
                (bar.get_x() + bar.get_width() / 2, top),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=st.SMALL,
            )
    axis.set_xticks(range(len(by_values)), [st.format_value(by, v) for v in by_values])
    axis.set_xlim(-0.6, len(by_values) - 0.4)
    axis.set_xlabel(st.label(by))
    axis.set_ylabel(st.label(metric))
    st.metric_ticks(axis.yaxis, metric)
    top = float((data[metric] + data[f"{metric}_ci95"].fillna(0)).max()) * factor
    if math.isfinite(top) and top > 0:
        axis.set_ylim(0, top * 1.15)
    axis.grid(True, axis="y", alpha=0.3)
    axis.set_axisbelow(True)


def cpu_per_io(
    df: pd.DataFrame,
    by: str | None = None,
    *,
    hue: str | None = None,
    metric: str = "cpu_us_per_io",
    ax: Axes | None = None,
) -> Figure:
    """CPU time per I/O for each value of a setting, as bars with 95 % CI whiskers.

    A bar is the mean over the point's repeats of its jobs' CPU time per I/O
    (user + system, IOPS-weighted over the jobs and over read and write).
    With ``hue`` each ``by`` value gets a group of bars. Any further axis that
    varies gets a panel per value (a line of bars, when ``ax`` is given, is not
    possible: an error says so).

    Parameters
    ----------
    df
        A tidy frame.
    by
        The setting on the x axis; when omitted, the first of
        :data:`SETTINGS` that varies, else the first varying axis.
    hue
        A second parameter: one bar per value within each group. When omitted
        and another axis varies, that axis.
    metric
        What the bars show; ``usr_cpu``, ``sys_cpu`` or any other metric works too.
    ax
        An Axes to draw into; only one panel's worth of axes may vary then.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        No ``metric`` data, nothing varies and ``by`` is not given, more axes
        vary than ``ax`` can show, or no point finished ``ok``.
    """
    require(df, [metric], "cpu_per_io", "the frame has no CPU accounting (fio reports usr_cpu/sys_cpu)")
    require(df, [c for c in (by, hue) if c], "cpu_per_io")
    ok = ok_rows(df, "cpu_per_io")
    if not ok[metric].notna().any():
        raise ResultsError(f"cpu_per_io: no ok row has a `{metric}` value")
    totals = point_totals(ok.assign(direction="all"))
    axes = splitting_axes(totals, [])
    if by is None:
        by = next((c for c in SETTINGS if c in axes), axes[0] if axes else None)
        if by is None:
            raise ResultsError("cpu_per_io: nothing varies between the points; pass by= a parameter column")
    others = splitting_axes(totals, [by, *([hue] if hue else [])])
    if hue is None and others:
        hue, others = others[0], others[1:]
    if ax is not None and others:
        raise ResultsError(
            f"cpu_per_io: {', '.join(others)} also vary; filter the frame, or omit ax= to get a panel each"
        )
    summary = over_repeats(totals, [by, *([hue] if hue else []), *others], [metric])
    by_values = st.ordered(by, summary[by].tolist())
    hue_values: list[tuple[object, ...]] = combos(summary, [hue]) if hue else [()]
    draw = partial(_draw, metric=metric, by=by, by_values=by_values, hue=hue, hue_values=hue_values)
    if ax is not None:
        draw(ax, summary)
        if hue:
            ax.legend(fontsize=st.SMALL, title=st.label(hue), title_fontsize=st.SMALL)
        return st.root_figure(ax)
    panels = combos(summary, others)
    cols = min(len(panels), MAX_COLS)
    rows = math.ceil(len(panels) / cols)
    width = max(4.5, min(st.PANEL_WIDTH, 1.2 + 0.9 * len(by_values) * len(hue_values)))
    fig, grid = st.new_figure(rows, cols, width=width, height=3.6)
    drawn: list[Axes] = []
    for index, panel in enumerate(panels):
        axis: Axes = grid.flat[index]
        draw(axis, select(summary, others, panel))
        if others:
            axis.set_title(panel_title(others, panel), fontsize=st.MEDIUM)
        drawn.append(axis)
    for axis in grid.flat[len(drawn) :]:
        axis.set_visible(False)
    fig.suptitle(f"{st.short_label(metric)} by {st.in_sentence(st.short_label(by))}", fontsize=st.LARGE)
    if hue:
        st.legend_outside(fig, drawn)
    st.add_caption(fig, st.caption(df, notes=[st.repeats_note(summary, [metric])]))
    return fig

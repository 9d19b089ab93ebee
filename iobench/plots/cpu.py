"""CPU time per I/O as bars, to compare settings (scheduler, readahead, buffered vs direct)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from iobench.errors import ResultsError
from iobench.matrix.display import format_value
from iobench.plots import limits, options
from iobench.plots import plotdata as dt
from iobench.plots import plotstyle as st

#: Settings ``by`` is picked from, in order, when not given.
SETTINGS = ("scheduler", "readahead_kb", "direct", "binding", "placement")
#: Panels per row before the figure wraps.
MAX_COLS = 3


def _draw_bars(
    axis: Axes,
    data: pd.DataFrame,
    *,
    metric: str,
    by: str,
    by_values: Sequence[object],
    hues: Sequence[str],
    hue_combos: Sequence[tuple[object, ...]],
) -> None:
    """A bar per ``by`` value (a group of them, one per hue), with its value on top and 95 % CI whiskers."""
    width = 0.8 / len(hue_combos)
    colours = st.palette(hues, hue_combos) if hues else st.palette([by], [(v,) for v in by_values])
    factor = st.scale(metric)
    position = {dt.key(v): p for p, v in enumerate(by_values)}
    for index, hue_values in enumerate(hue_combos):
        group = dt.select(data, hues, hue_values).dropna(subset=[metric])
        group = group.assign(_at=[position[dt.key(v)] for v in group[by]]).sort_values("_at")
        if group.empty:
            continue
        at = group["_at"].tolist()
        heights = group[metric].to_numpy(dtype=float) * factor
        yerr = st.error_bars(heights, group[f"{metric}_ci95"].to_numpy(dtype=float) * factor)
        bars = axis.bar(
            [p + (index - (len(hue_combos) - 1) / 2) * width for p in at],
            heights,
            width=width * 0.92,
            color=[colours[index]] * len(at) if hues else [colours[p] for p in at],
            yerr=yerr if yerr.any() else None,
            capsize=4,
            error_kw={"elinewidth": 1.1, "ecolor": "0.2"},
            label=st.describe(hues, hue_values) if hues else None,
        )
        for bar, height, top in zip(bars, heights, heights + yerr[1], strict=True):
            axis.annotate(
                st.metric_text(metric, height),
                (bar.get_x() + bar.get_width() / 2, top),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=st.SMALL,
            )
    axis.set_xticks(range(len(by_values)), [format_value(by, v) for v in by_values])
    axis.set_xlim(-0.6, len(by_values) - 0.4)
    axis.set_xlabel(st.label(by))
    axis.set_ylabel(st.label(metric))
    st.metric_ticks(axis.yaxis, metric)
    top = (data[metric] + data[f"{metric}_ci95"].fillna(0)).max() * factor
    if top > 0:
        axis.set_ylim(0, top * 1.15)  # room for the value over the highest whisker
    axis.grid(True, axis="y", alpha=0.3)
    axis.set_axisbelow(True)


def cpu_per_io(
    df: pd.DataFrame,
    x: str | None = None,
    *,
    y: str = "cpu_us_per_io",
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """CPU time per I/O for each value of a setting, as bars with 95 % CI whiskers.

    A bar is the mean over the point's repeats of its jobs' CPU time per I/O
    (user + system, IOPS-weighted over the jobs and over read and write).
    With ``hue`` each ``x`` value gets a group of bars. Any further axis that
    varies gets a panel per value (beside ``col`` and ``row``). Past
    :data:`~iobench.plots.limits.MAX_SERIES` bars a group the highest are kept,
    past :data:`~iobench.plots.limits.MAX_CATEGORIES` groups the first; the
    caption says so.

    Parameters
    ----------
    df
        A tidy frame.
    x
        The setting along the x axis; when omitted, the first of
        :data:`SETTINGS` that varies, else the first varying axis.
    y
        What the bars show; ``usr_cpu`` and ``sys_cpu`` (the mean over jobs) work too.
    hue
        A second category: one bar per value within each group. When omitted
        and another axis varies, that axis.
    col, row
        Categories whose values get a column, a row of panels each.
    ax
        An Axes to draw into; only ``x`` and ``hue`` may vary then (filter the frame first).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        A column does not fit its role.
    ResultsError
        No ``y`` data, nothing varies and ``x`` is not given, more axes
        vary than ``ax`` can show, or no point finished ``ok``.
    """
    data = df
    if "direction" in df:  # a job's CPU time covers all its directions
        data = df.assign(direction=df["direction"].mask(df["direction"].notna(), "all"))
    totals = dt.totals_for(data, "cpu_per_io")
    roles = {"x": x, "hue": hue, "col": col, "row": row}
    hints = {"cpu_us_per_io": "fio reports CPU time as usr_cpu/sys_cpu"}
    options.check(data, totals, "cpu_per_io", categories=roles, metrics={"y": [y]}, hints=hints)
    chosen = [c for c in (hue, col, row) if c]
    if x is None:
        axes = dt.splitting_axes(totals, chosen)
        x = next((c for c in SETTINGS if c in axes), axes[0] if axes else None)
        if x is None:
            raise ResultsError("cpu_per_io: nothing varies between the points; pass x= a parameter column")
    others = dt.splitting_axes(totals, [x, *chosen])
    if hue is None and others:
        hue, others = others[0], others[1:]
    rows, cols = [row] if row else [], [*([col] if col else []), *others]
    if ax is not None:
        dt.one_panel("cpu_per_io", [*rows, *cols])
    hues = [hue] if hue else []
    summary = dt.over_repeats(totals, [x, *hues, *rows, *cols], [y])
    every_x = dt.ordered(x, summary[x])
    x_values = limits.first(every_x)
    hue_combos = limits.top(summary, hues, y)
    notes = [
        limits.shown(len(x_values), len(every_x), f"values of {x}", "the first"),
        limits.shown(
            len(hue_combos),
            dt.distinct(summary, hues),
            "bars a group",
            f"the highest mean {st.short_label(y)}",
        ),
    ]
    summary = limits.keep(limits.keep(summary, [x], [(v,) for v in x_values]), hues, hue_combos)
    draw = partial(_draw_bars, metric=y, by=x, by_values=x_values, hues=hues, hue_combos=hue_combos)
    if ax is not None:
        draw(ax, summary)
        if hue:
            ax.legend(fontsize=st.SMALL, title=st.label(hue), title_fontsize=st.SMALL)
        return st.root_figure(ax)
    panel_columns = [*rows, *cols]
    width = max(4.5, min(st.PANEL_WIDTH, 1.2 + 0.9 * len(x_values) * len(hue_combos)))
    grid = st.panel_grid(
        dt.combos(summary, panel_columns),
        panel_columns,
        rows=len(rows),
        max_cols=MAX_COLS,
        width=width,
        height=3.6,
    )
    for panel, (axis,) in zip(grid.panels, grid.stacks, strict=True):
        draw(axis, dt.select(summary, panel_columns, panel))
    st.share_y([axis for (axis,) in grid.stacks])
    title = f"{st.short_label(y)} by {st.in_sentence(st.short_label(x))}"
    st.finish(grid.fig, df, title, [st.repeats_note(summary, [y]), *notes, grid.note])
    return grid.fig

"""CPU time per I/O as bars, to compare settings (scheduler, readahead, buffered vs direct)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from iobench.errors import ResultsError
from iobench.matrix.display import format_value
from iobench.plots import _data as dt
from iobench.plots import _style as st

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
        yerr = np.nan_to_num(group[f"{metric}_ci95"].to_numpy(dtype=float) * factor)
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
        for bar, height, top in zip(bars, heights, heights + yerr, strict=True):
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
    varies gets a panel per value.

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
        What the bars show; ``usr_cpu`` and ``sys_cpu`` (the mean over jobs) work too.
    ax
        An Axes to draw into; only ``by`` and ``hue`` may vary then (filter the frame first).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        No ``metric`` data, nothing varies and ``by`` is not given, more axes
        vary than ``ax`` can show, or no point finished ``ok``.
    """
    data = df
    if "direction" in df:  # a job's CPU time covers all its directions
        data = df.assign(direction=df["direction"].mask(df["direction"].notna(), "all"))
    totals = dt.totals_for(data, "cpu_per_io", [c for c in (by, hue) if c])
    dt.require_metrics(totals, [metric], "cpu_per_io", "fio reports CPU time as usr_cpu/sys_cpu")
    if totals[metric].isna().all():
        raise ResultsError(f"cpu_per_io: no ok point has a `{metric}` value")
    if by is None:
        axes = dt.splitting_axes(totals, [])
        by = next((c for c in SETTINGS if c in axes), axes[0] if axes else None)
        if by is None:
            raise ResultsError("cpu_per_io: nothing varies between the points; pass by= a parameter column")
    others = dt.splitting_axes(totals, [by, *([hue] if hue else [])])
    if hue is None and others:
        hue, others = others[0], others[1:]
    if ax is not None:
        dt.one_panel("cpu_per_io", others)
    hues = [hue] if hue else []
    summary = dt.over_repeats(totals, [by, *hues, *others], [metric])
    by_values = dt.ordered(by, summary[by])
    hue_combos = dt.combos(summary, hues)
    draw = partial(_draw_bars, metric=metric, by=by, by_values=by_values, hues=hues, hue_combos=hue_combos)
    if ax is not None:
        draw(ax, summary)
        if hue:
            ax.legend(fontsize=st.SMALL, title=st.label(hue), title_fontsize=st.SMALL)
        return st.root_figure(ax)
    panels = dt.combos(summary, others)
    width = max(4.5, min(st.PANEL_WIDTH, 1.2 + 0.9 * len(by_values) * len(hue_combos)))
    fig, stacks = st.panel_grid(panels, others, max_cols=MAX_COLS, width=width, height=3.6)
    for panel, (axis,) in zip(panels, stacks, strict=True):
        draw(axis, dt.select(summary, others, panel))
    title = f"{st.short_label(metric)} by {st.in_sentence(st.short_label(by))}"
    st.finish(fig, df, title, st.repeats_note(summary, [metric]))
    return fig

"""A history's series over runs: one panel per series, change points marked, and every series' ratio.

Each series (:mod:`iobench.answers.history`) gets a panel of its metric run by run, with a
dashed line at each change point labelled with the change and what changed around it (or
"unexplained"), and a tick at the top wherever a recorded event changed. The last panel
puts every series side by side as its ratio to its own first run, so several runs of many
points read at once rather than A against B.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from iobench.errors import ResultsError
from iobench.plots import plotstyle as st
from iobench.plots.limits import MAX_PANELS

MAX_COLS = 3


def history_figure(rows: pd.DataFrame, changes: pd.DataFrame, *, metric: str = "iops") -> Figure:
    """The figure of a history's ``metric`` (``rows``: :func:`iobench.answers.history.load`,
    ``changes``: :func:`iobench.answers.history.changes`).

    The series with change points come first; at most
    :data:`~iobench.plots.limits.MAX_PANELS` − 1 series get a panel, and the caption says how
    many were left out.
    """
    if rows.empty or metric not in rows:
        raise ResultsError(f"the history has no {metric} to draw")
    moved = changes[changes["metric"] == metric] if not changes.empty else changes
    order = list(dict.fromkeys([*moved.get("series", pd.Series(dtype=str)), *rows["series"]]))
    shown = order[: MAX_PANELS - 1]
    panels = [(name,) for name in shown] + [("ratio",)]
    grid = st.panel_grid(panels, [], max_cols=MAX_COLS)
    runs = list(dict.fromkeys(rows["run_id"]))
    position = {run: i for i, run in enumerate(runs)}
    factor = st.scale(metric)
    ratio_axis = grid.stacks[-1][0]
    for colour_index, (panel, stack) in enumerate(zip(grid.panels[:-1], grid.stacks[:-1], strict=True)):
        axis = stack[0]
        series = rows[rows["series"] == panel[0]]
        xs = series["run_id"].map(position).to_numpy(dtype=float)
        ys = series[metric].to_numpy(dtype=float) * factor
        colour = st.CYCLE[colour_index % len(st.CYCLE)]
        axis.plot(xs, ys, marker="o", markersize=3, color=colour)
        first = series.iloc[0]
        where = " ".join(str(x) for x in (first["point"], first["host"], first["direction"]) if x)
        axis.set_title(textwrap.shorten(where, 48), fontsize=st.MEDIUM)
        axis.set_ylabel(st.short_label(metric))
        axis.set_xlabel("run")
        events = series["events"].tolist()
        for i in range(1, len(events)):
            if events[i] != events[i - 1]:
                axis.axvline(xs[i] - 0.5, ymin=0.95, ymax=1.0, color="0.4", linewidth=2)
        for change in moved[moved["series"] == panel[0]].to_dict("records") if not moved.empty else []:
            at = position[change["run_id"]] - 0.5
            axis.axvline(at, color="firebrick", linestyle="--", linewidth=1)
            why = change["explained_by"] or "unexplained"
            axis.annotate(
                textwrap.shorten(f"{change['change_pct']:+.1f} %: {why}", 40),
                (at, 0.02),
                xycoords=("data", "axes fraction"),
                rotation=90,
                fontsize=st.SMALL,
                color="firebrick",
                va="bottom",
                ha="right",
            )
        base = ys[np.isfinite(ys)][:1]
        if base.size and base[0]:
            ratio_axis.plot(xs, ys / base[0], color=colour, linewidth=1, label=textwrap.shorten(where, 30))
    ratio_axis.axhline(1.0, color="0.5", linewidth=0.8)
    ratio_axis.set_title(f"{st.short_label(metric)}: ratio to each series' first run", fontsize=st.MEDIUM)
    ratio_axis.set_xlabel("run")
    notes = ["dashed red: a change point (its change and what changed); grey ticks: a recorded event changed"]
    if len(order) > len(shown):
        notes.append(f"{len(shown)} of {len(order)} series shown (those with change points first)")
    _finish(grid.fig, f"{st.label(metric)} over {len(runs)} runs", notes)
    return grid.fig


def _finish(fig: Figure, title: str, notes: list[str]) -> None:
    fig.suptitle(title, fontsize=st.LARGE)
    fig.supxlabel("; ".join(notes), x=0.01, ha="left", fontsize=st.SMALL, color="0.3")

"""Every host's own numbers at each point that ran on several hosts: who keeps up, who falls behind.

A point on several hosts is one number in every other figure and table, the
cluster's (:func:`iobench.point_totals`). This figure shows what it is made
of: each host's IOPS (and p99 below) by fio's rule on its own jobs
(``point_totals(df, by=["host"])``), the mean over repeats, a dot per host at
each point, the hosts' median as a bar, and in red, with their names, the
hosts far from the others by :mod:`iobench.results.hostoutliers`' rule
judged on the means drawn — not the frame's ``host_outliers``, which judges
each repeat: a host flagged in one repeat can sit on the median of the means.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from iobench.errors import ResultsError
from iobench.matrix.display import format_value
from iobench.plots import limits, options
from iobench.plots import plotdata as dt
from iobench.plots import plotstyle as st
from iobench.plots.lineplots import main_axis
from iobench.results import points
from iobench.results.hostoutliers import METRICS, RULE, judge_hosts

#: Panels per row before the figure wraps.
MAX_COLS = 3
#: The colour of a host the frame names as far from the others; of the rest.
OUTLIER_COLOUR = "#d62728"
HOST_COLOUR = "#1f77b4"


def host_totals(df: pd.DataFrame, *, several: bool = True) -> pd.DataFrame:
    """Each host's numbers at every point × repeat × direction that ran on several hosts.

    ``several=False`` keeps the points that ran on one host too.
    """
    rows = dt.data_rows(df)
    if "host" not in rows or rows.empty:
        return pd.DataFrame()
    keys = [c for c in ("run_id", "point", "repeat", "direction") if c in rows]
    if several:
        many = rows.groupby(keys, dropna=False)["host"].transform("nunique") >= 2
        rows = rows[many.to_numpy()]
    if rows.empty:
        return pd.DataFrame()
    return points.point_totals(rows, by=["host"])


def draw_hosts(
    axis: Axes,
    data: pd.DataFrame,
    *,
    metric: str,
    x: str,
    x_values: Sequence[object],
    numeric: bool = False,
) -> None:
    """A dot per host at each ``x`` value (its mean over repeats), the hosts' median, outliers red and named.

    ``data``: one row per ``x`` value × host with ``metric``. A host is red
    when :func:`~iobench.results.hostoutliers.judge_hosts` finds it far from
    the others among the values drawn at its ``x`` (for the metrics it
    judges). ``numeric``: place ``x`` values at their numbers on a log2 axis
    (else evenly, as categories).
    """
    factor = st.scale(metric)
    where = {dt.key(v): (float(v) if numeric else float(i)) for i, v in enumerate(x_values)}  # type: ignore[arg-type]
    top = 0.0
    for value in x_values:
        group = dt.select(data, [x], [value]).dropna(subset=[metric])
        if group.empty:
            continue
        at = where[dt.key(value)]
        ys = group[metric].to_numpy(dtype=float) * factor
        top = max(top, float(ys.max()))
        rank = np.argsort(np.argsort(group["host"].astype(str).to_numpy()))
        jitter = np.linspace(-0.12, 0.12, len(ys))[rank] if len(ys) > 1 else np.zeros(1)
        # On a log2 axis a spread is a factor: the same width at every count.
        xs = at * np.exp2(jitter) if numeric else at + jitter
        names = group["host"].astype(str).to_numpy()
        judged = {h for h, *_ in judge_hosts(pd.Series(ys, index=names))} if metric in METRICS else set()
        far = np.array([h in judged for h in names], dtype=bool)
        axis.scatter(xs[~far], ys[~far], s=16, color=HOST_COLOUR, alpha=0.75, label="a host", zorder=3)
        if far.any():
            axis.scatter(
                xs[far], ys[far], s=28, color=OUTLIER_COLOUR, label="a host far from the others", zorder=4
            )
            for px, py, host in zip(xs[far], ys[far], names[far], strict=True):
                axis.annotate(
                    host,
                    (px, py),
                    xytext=(4, 0),
                    textcoords="offset points",
                    fontsize=st.SMALL,
                    color=OUTLIER_COLOUR,
                    va="center",
                )
        width = 0.3 if not numeric else 0.15 * max(abs(at), 1.0)
        median = float(np.median(ys))
        axis.plot(
            [at - width, at + width], [median, median], color="0.2", linewidth=1.6, label="the hosts' median"
        )
    if not numeric:
        axis.set_xticks(range(len(x_values)), [format_value(x, v) for v in x_values])
        axis.set_xlim(-0.6, len(x_values) - 0.4)
    axis.set_xlabel(st.label(x))
    axis.set_ylabel(st.label(metric) + (" per host" if metric in ("iops", "bw_bytes") else ""))
    st.metric_ticks(axis.yaxis, metric)
    axis.set_ylim(0, top * 1.12 if top > 0 else 1.0)  # room above the highest host for its name
    axis.grid(True, axis="y", alpha=0.3)
    axis.set_axisbelow(True)


def hosts(
    df: pd.DataFrame,
    *,
    x: str | None = None,
    y: str = "iops",
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
    latency: str | None = "clat_p99_us",
    ax: Axes | None = None,
) -> Figure:
    """Every host's own ``y`` (and ``latency`` below) at each point that ran on several hosts.

    Parameters
    ----------
    df
        A tidy frame of a run on hosts.
    x
        The category along the x axis: when omitted, iodepth, numjobs or bs
        (the first that varies), else the first axis that varies, else ``point``.
    y
        The metric of the upper row: each host's own, by fio's rule on its jobs.
    hue
        Fixed: red marks the hosts far from the others among the means drawn.
    col, row
        Categories whose values get a column, a row of panels each; other
        axes that vary get columns of their own.
    latency
        A second metric in a row below (None: only ``y``).
    ax
        An Axes to draw ``y`` into (only ``x`` may vary then).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        A column does not fit its role, or ``hue`` is given.
    ResultsError
        No point ran on several hosts, or no point finished ``ok``.
    """
    options.fixed("hosts", {"hue": hue}, {"hue": "a host far from the others (red)"})
    totals = dt.totals_for(df, "hosts")
    metrics = [y, *([latency] if latency and ax is None else [])]
    roles = {"x": x, "col": col, "row": row}
    options.check(df, totals, "hosts", categories=roles, metrics={"y": [y], "latency": metrics[1:]})
    per_host = host_totals(df)
    if per_host.empty:
        raise ResultsError(
            "hosts: no point ran on several hosts at once (a run with `hosts:` and no `host` axis)"
        )
    chosen = [c for c in (col, row) if c]
    axes = [c for c in dt.splitting_axes(per_host, chosen) if c != "host"]
    if x is None:
        params = [a for a in axes if a in dt.parameter_columns(per_host)]
        x = main_axis(params) or (axes[0] if axes else "point")
    others = [c for c in dt.splitting_axes(per_host, [x, *chosen, "host"]) if c != "host"]
    rows_, cols = [row] if row else [], [*([col] if col else []), *others]
    if ax is not None:
        dt.one_panel("hosts", [*rows_, *cols])
    keys = [x, *rows_, *cols, "host"]
    summary = dt.over_repeats(per_host, keys, metrics)
    every_x = dt.ordered(x, summary[x])
    x_values = limits.first(every_x)
    summary = limits.keep(summary, [x], [(v,) for v in x_values])
    notes = [limits.shown(len(x_values), len(every_x), f"values of {x}", "the first")]
    numeric = x == "host_count"
    if ax is not None:
        draw_hosts(ax, summary, metric=y, x=x, x_values=x_values, numeric=numeric)
        return st.root_figure(ax)
    panel_columns = [*rows_, *cols]
    width = max(4.5, min(st.PANEL_WIDTH, 1.5 + 0.6 * len(x_values)))
    grid = st.panel_grid(
        dt.combos(summary, panel_columns),
        panel_columns,
        rows=len(rows_),
        max_cols=MAX_COLS,
        rows_each=len(metrics),
        width=width,
    )
    for panel, stack in zip(grid.panels, grid.stacks, strict=True):
        data = dt.select(summary, panel_columns, panel)
        for axis, metric in zip(stack, metrics, strict=True):
            draw_hosts(axis, data, metric=metric, x=x, x_values=x_values, numeric=numeric)
    count = int(per_host["host"].nunique())
    title = f"Each host's {st.in_sentence(st.short_label(y))}" + (
        f" and {st.in_sentence(st.short_label(latency))}" if len(metrics) > 1 and latency else ""
    )
    title += f" at the points on several hosts ({count} hosts)"
    rule = f"red: {RULE}, judged on the means drawn"
    st.finish(grid.fig, df, title, [st.repeats_note(summary, metrics, bars=False), rule, *notes, grid.note])
    return grid.fig

"""How a shared backend scales with clients: the cluster's numbers and each host's against ``host_count``.

A run with the ``host_count`` axis runs each point on the first N hosts at
once. Three rows of panels, ``host_count`` along x (log2 when it doubles):

1. the cluster's ``y`` (IOPS: all hosts over the window all of them ran,
   :func:`iobench.point_totals`), mean ± 95 % CI over repeats, with the line
   perfect scaling from the smallest count would follow (dashed);
2. the cluster's ``latency`` (p99 of every host's merged histograms);
3. each host's own ``y`` at every count (a dot per host, the hosts' median as
   a bar, those the frame names far from the others in red): where each
   client starts to get less, and whether all of them do.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from iobench.errors import ResultsError
from iobench.plots import limits, options
from iobench.plots import plotdata as dt
from iobench.plots import plotstyle as st
from iobench.plots.hostvalues import draw_hosts, host_totals

#: The axis this figure is about.
AXIS = "host_count"
#: Panels per row before the figure wraps.
MAX_COLS = 3


def _cluster(
    axis: Axes,
    data: pd.DataFrame,
    metric: str,
    hues: list[str],
    combos: list[tuple[object, ...]],
    ideal: bool,
) -> None:
    """The cluster's ``metric`` against host count: a line per hue, its CI, and perfect scaling (dashed)."""
    factor = st.scale(metric)
    colours = st.palette(hues, combos) if hues else [st.CYCLE[0]]
    for colour, combo in zip(colours, combos, strict=True):
        line = dt.select(data, hues, combo).sort_values(AXIS)
        line = line[line[metric].notna()]
        if line.empty:
            continue
        xs = line[AXIS].to_numpy(dtype=float)
        ys = line[metric].to_numpy(dtype=float) * factor
        ci = st.error_bars(ys, line[f"{metric}_ci95"].to_numpy(dtype=float) * factor)
        name = st.describe(hues, combo) if hues else "the cluster"
        axis.errorbar(xs, ys, yerr=ci if ci.any() else None, color=colour, marker="o", capsize=3, label=name)
        if ideal and len(xs) > 1 and xs[0] > 0:
            axis.plot(
                xs,
                ys[0] * xs / xs[0],
                color=colour,
                linestyle="--",
                linewidth=1.0,
                alpha=0.7,
                label="perfect scaling from the fewest hosts",
            )
    axis.set_ylabel(f"{st.label(metric)}, cluster")
    st.metric_ticks(axis.yaxis, metric)
    axis.set_ylim(bottom=0)
    axis.grid(True, alpha=0.3)


def _log2(axis: Axes, counts: list[object]) -> None:
    numbers = sorted(float(c) for c in counts)  # type: ignore[arg-type]
    if numbers and numbers[0] > 0 and numbers[-1] / numbers[0] >= 4:
        axis.set_xscale("log", base=2)
    axis.set_xticks(numbers, [f"{n:g}" for n in numbers])
    axis.set_xlabel("Hosts at once (host_count)")


def scale_out(
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
    """The cluster's ``y`` and ``latency``, and each host's ``y``, against the number of hosts at once.

    Parameters
    ----------
    df
        A tidy frame of a run with the ``host_count`` axis.
    x
        Fixed: ``host_count``.
    y
        The throughput metric (IOPS by default).
    hue
        A category whose values get a line each in the cluster's rows (when
        omitted, the first other axis that varies).
    col, row
        Categories whose values get a column, a row of panels each; other
        axes that vary get columns of their own.
    latency
        The cluster's latency metric of the second row (None: left out).
    ax
        An Axes to draw the cluster's ``y`` into (only ``hue`` may vary then).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        A column does not fit its role, or ``x`` is given.
    ResultsError
        ``host_count`` does not vary, or no point finished ``ok``.
    """
    options.fixed("scale_out", {"x": x}, {"x": "host_count"})
    totals = dt.totals_for(df, "scale_out")
    if not dt.varies(totals, AXIS):
        raise ResultsError(
            "scale_out: the points do not differ in host_count; run a matrix with a host_count axis"
        )
    cluster_metrics = [y, *([latency] if latency else [])]
    roles = {"hue": hue, "col": col, "row": row}
    options.check(
        df, totals, "scale_out", categories=roles, metrics={"y": [y], "latency": cluster_metrics[1:]}
    )
    chosen = [c for c in (hue, col, row) if c]
    # host (a, a+b, ...) says the same as host_count here
    others = [c for c in dt.splitting_axes(totals, [AXIS, *chosen]) if c != "host"]
    if hue is None and others:
        hue, others = others[0], others[1:]
    hues = [hue] if hue else []
    rows_, cols = [row] if row else [], [*([col] if col else []), *others]
    if ax is not None:
        dt.one_panel("scale_out", [*rows_, *cols])
    summary = dt.over_repeats(totals, [AXIS, *hues, *rows_, *cols], cluster_metrics)
    combos = limits.top(summary, hues, y)
    notes = [
        limits.shown(
            len(combos), dt.distinct(summary, hues), "lines", f"the highest mean {st.short_label(y)}"
        )
    ]
    summary = limits.keep(summary, hues, combos)
    counts = dt.ordered(AXIS, summary[AXIS])
    if ax is not None:
        _cluster(ax, summary, y, hues, combos, ideal=True)
        _log2(ax, counts)
        return st.root_figure(ax)
    per_host = host_totals(df, several=False)
    host_rows = 1 if not per_host.empty else 0
    host_summary = pd.DataFrame()
    if host_rows:
        if hues:  # a line's hosts: the first line's, not a mean over the lines
            per_host = dt.select(per_host, hues, combos[0])
            notes.append(f"each host at {st.describe(hues, combos[0], bare=frozenset())}")
        keys = [AXIS, *rows_, *cols, "host"]
        host_summary = dt.over_repeats(per_host, keys, [y])
    panel_columns = [*rows_, *cols]
    grid = st.panel_grid(
        dt.combos(summary, panel_columns),
        panel_columns,
        rows=len(rows_),
        max_cols=MAX_COLS,
        rows_each=len(cluster_metrics) + host_rows,
    )
    for panel, stack in zip(grid.panels, grid.stacks, strict=True):
        data = dt.select(summary, panel_columns, panel)
        for axis, metric in zip(stack[: len(cluster_metrics)], cluster_metrics, strict=True):
            _cluster(axis, data, metric, hues, combos, ideal=metric == y)
            _log2(axis, counts)
        if host_rows:
            axis = stack[-1]
            mine = dt.select(host_summary, panel_columns, panel)
            draw_hosts(axis, mine, metric=y, x=AXIS, x_values=counts, numeric=True)
            _log2(axis, counts)
    title = st.short_label(y) + (f" and {st.in_sentence(st.short_label(latency))}" if latency else "")
    title += " against hosts at once"
    st.finish(grid.fig, df, title, [st.repeats_note(summary, cluster_metrics), *notes, grid.note])
    return grid.fig

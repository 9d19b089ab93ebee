"""Why a point is where it is: where the CPU went, the device's I/Os against fio's, the busiest threads.

These figures read the telemetry a run recorded (:func:`iobench.telemetry` and
the summary columns of the tidy frame, docs/telemetry.md). Like every figure,
a point's repeats are averaged through :mod:`iobench.results.points`, and axes
that vary beside the x axis get a panel each.
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
from iobench.results.telemetry import cpu_by_node, thread_shares

#: The kinds of CPU time stacked in :func:`cpu_where`, bottom first, with their colours.
CPU_KINDS: dict[str, str] = {
    "user": "#1f77b4",
    "system": "#d62728",
    "irq": "#ff7f0e",
    "softirq": "#bcbd22",
}
MAX_COLS = 3


def _points(df: pd.DataFrame, figure: str, roles: dict[str, str | None]) -> tuple[pd.DataFrame, list[str]]:
    """Each ok point × repeat with its parameters, and the axes that tell the points apart; the roles checked."""
    totals = dt.totals_for(df, figure)
    options.check(df, totals, figure, categories=roles)
    params = dt.splitting_axes(totals.drop(columns=["direction"], errors="ignore"), [])
    given = [c for c in roles.values() if c]
    keep = list(dict.fromkeys(c for c in ("point", "repeat", *params, *given) if c in totals))
    return totals[keep].drop_duplicates(["point", "repeat"]), params


def _layout(
    axes: Sequence[str], x: str | None, col: str | None, row: str | None
) -> tuple[str, list[str], list[str]]:
    """The x axis (the main axis when not given), the row facet and the column facets (``col``, then the rest)."""
    chosen = x or main_axis([a for a in axes if a not in (col, row)]) or "point"
    others = [a for a in axes if a not in (chosen, col, row)]
    return chosen, [row] if row else [], [*([col] if col else []), *others]


def _x_labels(summary: pd.DataFrame, x: str) -> list[object]:
    return dt.ordered(x, summary[x]) if x in summary else []


_CPU_FIXED = {"y": "the CPU time", "hue": "the kind of CPU time (user, system, irq, softirq)"}


def cpu_where(
    df: pd.DataFrame,
    samples: pd.DataFrame,
    *,
    x: str | None = None,
    y: str | None = None,
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Where the CPU went: user, system, irq and softirq time per NUMA node, stacked, against the main axis.

    A bar is one node of one point: its CPUs' time over the point's measured
    window, summed over the node's CPUs (in CPUs: 1.5 = one and a half CPUs
    busy), the mean of the point's repeats. Idle and iowait are left out.
    Past what fits the first values of ``x`` are kept, and the caption says so.

    Parameters
    ----------
    df
        The run's tidy frame (which points ran ok, and their parameters).
    samples
        The run's telemetry (:func:`iobench.telemetry`).
    x
        The category along the x axis (default: the main axis, iodepth first).
    y, hue
        Fixed (the CPU time, its kind); giving either is an error.
    col, row
        Categories whose values get a column, a row of panels each; other
        axes that vary get columns too.
    ax
        An Axes to draw into; then no other axis may vary.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        ``y`` or ``hue`` given, or a column does not fit its role.
    ResultsError
        No ok point, or no CPU telemetry for them.
    """
    options.fixed("cpu_where", {"y": y, "hue": hue}, _CPU_FIXED)
    points, axes = _points(df, "cpu_where", {"x": x, "col": col, "row": row})
    x, rows, cols = _layout(axes, x, col, row)
    panel_columns = [*rows, *cols]
    if ax is not None:
        dt.one_panel("cpu_where", panel_columns)
    cpu = cpu_by_node(samples)
    data = cpu.merge(points, on=["point", "repeat"], how="inner") if not cpu.empty else cpu
    if data.empty:
        raise ResultsError("cpu_where: the run has no CPU telemetry for its ok points (telemetry: false?)")
    data = data.assign(node=data["node"].astype("Float64"))
    kinds = list(CPU_KINDS)
    # The stack's height is a mean too: its CI comes from each repeat's total.
    data = data.assign(total=data[kinds].sum(axis=1, min_count=1))
    summary = dt.over_repeats(data, [x, *panel_columns, "node"], [*kinds, "total"])
    nodes = list(dt.ordered("node", summary["node"]))
    every_x = _x_labels(summary, x)
    xs = limits.first(every_x, max(1, limits.MAX_CATEGORIES // max(1, len(nodes))))
    note = limits.shown(len(xs), len(every_x), f"values of {x}", "the first")
    summary = limits.keep(summary, [x], [(v,) for v in xs])

    def draw(axis: Axes, part: pd.DataFrame) -> None:
        width = 0.8 / max(1, len(nodes))
        for n_index, node in enumerate(nodes):
            rows = dt.select(part, ["node"], [node])
            at = {dt.key(v): i for i, v in enumerate(xs)}
            positions = np.array([at[dt.key(v)] for v in rows[x]], dtype=float)
            offset = positions + (n_index - (len(nodes) - 1) / 2) * width
            bottom = np.zeros(len(rows))
            for kind, colour in CPU_KINDS.items():
                heights = rows[kind].to_numpy(dtype=float)
                axis.bar(
                    offset,
                    heights,
                    width * 0.92,
                    bottom=bottom,
                    color=colour,
                    label=kind if n_index == 0 else None,
                    edgecolor="white",
                    linewidth=0.5,
                )
                bottom += np.nan_to_num(heights)
            spread = rows["total_ci95"].to_numpy(dtype=float)
            if np.isfinite(spread).any():
                axis.errorbar(
                    offset, bottom, yerr=st.error_bars(bottom, spread), fmt="none", ecolor="0.2", capsize=3
                )
            if len(nodes) > 1:
                for at_x, top in zip(offset, bottom, strict=True):
                    axis.annotate(
                        f"n{format_value('node', node)}",
                        (at_x, top),
                        xytext=(0, 2),
                        textcoords="offset points",
                        ha="center",
                        fontsize=st.SMALL,
                    )
        axis.set_xticks(range(len(xs)), [format_value(x, v) for v in xs])
        axis.set_xlabel(st.label(x))
        axis.set_ylabel("CPU time (CPUs)")
        axis.grid(True, axis="y", alpha=0.3)
        axis.set_axisbelow(True)

    if ax is not None:
        draw(ax, summary)
        ax.legend(fontsize=st.SMALL)
        return st.root_figure(ax)
    grid = st.panel_grid(
        dt.combos(summary, panel_columns),
        panel_columns,
        rows=len(rows),
        max_cols=MAX_COLS,
        width=max(4.5, 1.5 + 0.9 * len(xs) * len(nodes)),
    )
    for panel, (axis,) in zip(grid.panels, grid.stacks, strict=True):
        draw(axis, dt.select(summary, panel_columns, panel))
    st.share_y([axis for (axis,) in grid.stacks])
    notes = [
        "bars per NUMA node, summed over its CPUs; idle and iowait left out",
        st.repeats_note(summary, ["total"], bars=False)
        + (", whiskers: the stack's 95 % CI" if summary["total_ci95"].notna().any() else ""),
        note,
        grid.note,
    ]
    st.finish(grid.fig, df, f"Where the CPU went vs {st.in_sentence(st.short_label(x))}", notes)
    return grid.fig


def device_vs_fio(
    df: pd.DataFrame,
    *,
    x: str | None = None,
    y: str | None = None,
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """The device's IOPS (``dev_iops``, from ``/proc/diskstats``) against fio's, per direction.

    Equal lines say every fio I/O reached the device as one request; a device
    line below fio's means page-cache hits or merged requests, above it
    readahead, writeback or split requests (the frame's ``telemetry_note`` says which).

    Parameters
    ----------
    df
        A tidy frame with telemetry columns.
    x
        The category along the x axis (default: the main axis).
    y, hue
        Fixed (fio's and the device's IOPS, the direction); giving either is an error.
    col, row
        Categories whose values get a column, a row of panels each; other
        axes that vary get columns too.
    ax
        An Axes to draw into; then no other axis may vary.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        ``y`` or ``hue`` given, or a column does not fit its role.
    ResultsError
        No ok point has ``dev_iops``.
    """
    figure = "device_vs_fio"
    options.fixed(figure, {"y": y, "hue": hue}, {"y": "fio's and the device's IOPS", "hue": "the direction"})
    totals = dt.totals_for(df, figure)
    options.check(df, totals, figure, categories={"x": x, "col": col, "row": row})
    if "dev_iops" not in totals or totals["dev_iops"].isna().all():
        raise ResultsError(
            "device_vs_fio: no ok point has a `dev_iops` value (no block device under the targets, "
            "or telemetry: false?)"
        )
    axes = [a for a in dt.splitting_axes(totals, ["direction"]) if a != "point"]
    x, rows, cols = _layout(axes, x, col, row)
    panel_columns = [*rows, *cols]
    if ax is not None:
        dt.one_panel(figure, panel_columns)
    by = list(dict.fromkeys([x, *panel_columns, "direction"]))
    summary = dt.over_repeats(totals, by, ["iops", "dev_iops"])
    every_x = _x_labels(summary, x)
    xs = limits.first(every_x)
    note = limits.shown(len(xs), len(every_x), f"values of {x}", "the first")
    summary = limits.keep(summary, [x], [(v,) for v in xs])
    at = {dt.key(v): i for i, v in enumerate(xs)}
    directions = dt.ordered("direction", summary["direction"])
    colours = st.palette(["direction"], [(d,) for d in directions])

    def draw(axis: Axes, part: pd.DataFrame) -> None:
        for colour, direction in zip(colours, directions, strict=True):
            rows = dt.select(part, ["direction"], [direction])
            positions = np.array([at[dt.key(v)] for v in rows[x]], dtype=float)
            order = np.argsort(positions)
            for metric, style, name in (("iops", "-", "fio"), ("dev_iops", "--", "device")):
                ys = rows[metric].to_numpy(dtype=float)[order]
                axis.plot(
                    positions[order],
                    ys,
                    linestyle=style,
                    marker="o" if metric == "iops" else "s",
                    color=colour,
                    label=f"{name} {direction}",
                )
                spread = rows[f"{metric}_ci95"].to_numpy(dtype=float)[order]
                if np.isfinite(spread).any():
                    axis.errorbar(
                        positions[order],
                        ys,
                        yerr=st.error_bars(ys, spread),
                        fmt="none",
                        ecolor=colour,
                        capsize=3,
                    )
        axis.set_xticks(range(len(xs)), [format_value(x, v) for v in xs])
        axis.set_xlabel(st.label(x))
        axis.set_ylabel("IOPS")
        st.metric_ticks(axis.yaxis, "iops")
        axis.set_ylim(0, axis.get_ylim()[1] * 1.05)
        axis.grid(True, alpha=0.3)

    if ax is not None:
        draw(ax, summary)
        ax.legend(fontsize=st.SMALL)
        return st.root_figure(ax)
    grid = st.panel_grid(dt.combos(summary, panel_columns), panel_columns, rows=len(rows), max_cols=MAX_COLS)
    for panel, (axis,) in zip(grid.panels, grid.stacks, strict=True):
        draw(axis, dt.select(summary, panel_columns, panel))
    st.share_y([axis for (axis,) in grid.stacks])
    st.finish(
        grid.fig,
        df,
        f"Device vs fio IOPS vs {st.in_sentence(st.short_label(x))}",
        [st.repeats_note(summary, ["iops"]), note, grid.note],
    )
    return grid.fig


_THREADS_FIXED = {
    "x": "the point",
    "y": "the thread",
    "hue": "the CPU share",
    "col": "one panel",
    "row": "one panel",
}


def busiest_threads(
    df: pd.DataFrame,
    samples: pd.DataFrame,
    *,
    x: str | None = None,
    y: str | None = None,
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
    top: int = 8,
    ax: Axes | None = None,
) -> Figure:
    """The busiest threads of each point (processes and kernel threads), as a grid of CPU shares.

    A row per thread name (the ``top`` busiest over the run), a column per
    point; a cell is the name's CPU share over the point's window (% of one
    CPU: 250 = two and a half CPUs), summed over the threads of that name, the
    mean of the point's repeats. Past :data:`~iobench.plots.limits.MAX_CATEGORIES`
    points the figure keeps those whose threads are busiest, and the caption says so.

    Parameters
    ----------
    df
        The run's tidy frame.
    samples
        The run's telemetry (:func:`iobench.telemetry`).
    x, y, hue, col, row
        Fixed (the point, the thread, the share, one panel); giving any is an error.
    top
        How many thread names to show (at most :data:`~iobench.plots.limits.MAX_CATEGORIES`).
    ax
        An Axes to draw into.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        A role was given.
    ResultsError
        No ok point, or no thread telemetry for them.
    """
    given = {"x": x, "y": y, "hue": hue, "col": col, "row": row}
    options.fixed("busiest_threads", given, _THREADS_FIXED)
    points, axes = _points(df, "busiest_threads", {})
    shares = thread_shares(samples, top=min(top, limits.MAX_CATEGORIES))
    data = shares.merge(points, on=["point", "repeat"], how="inner") if not shares.empty else shares
    if data.empty:
        raise ResultsError(
            "busiest_threads: the run has no thread telemetry for its ok points (telemetry: false?)"
        )
    columns = axes or ["point"]
    summary = dt.over_repeats(data, [*columns, "thread"], ["cpu_pct"])
    combos = limits.top(summary, columns, "cpu_pct", limits.MAX_CATEGORIES)
    note = limits.shown(
        len(combos), dt.distinct(summary, columns), "points", "those whose threads are busiest"
    )
    summary = limits.keep(summary, columns, combos)
    threads = list(summary.groupby("thread")["cpu_pct"].max().sort_values(ascending=False).index)
    cells = np.full((len(threads), len(combos)), np.nan)
    spread = np.full((len(threads), len(combos)), np.nan)
    row_of = {name: i for i, name in enumerate(threads)}
    col_of = {tuple(dt.key(v) for v in combo): i for i, combo in enumerate(combos)}
    for values in summary[[*columns, "thread", "cpu_pct", "cpu_pct_ci95"]].itertuples(index=False, name=None):
        at = row_of[values[-3]], col_of[tuple(dt.key(v) for v in values[:-3])]
        cells[at], spread[at] = values[-2], values[-1]
    if ax is None:
        fig = st.new_figure(max(5.0, 1.6 + 0.75 * len(combos)), max(2.6, 1.4 + 0.38 * len(threads)))
        axis = fig.add_subplot()
    else:
        axis, fig = ax, st.root_figure(ax)
    image = axis.imshow(np.nan_to_num(cells), aspect="auto", cmap="Reds", vmin=0)
    for (i, j), value in np.ndenumerate(cells):
        if np.isfinite(value):
            ci = f"±{spread[i, j]:.0f}" if np.isfinite(spread[i, j]) else ""
            axis.text(j, i, f"{value:.0f}{ci}", ha="center", va="center", fontsize=st.SMALL)
    axis.set_yticks(range(len(threads)), threads, fontsize=st.SMALL)
    axis.set_xticks(
        range(len(combos)),
        [st.describe(columns, combo) for combo in combos],
        rotation=30,
        ha="right",
        fontsize=st.SMALL,
    )
    bar = fig.colorbar(image, ax=axis)
    bar.set_label("CPU share (% of one CPU)", fontsize=st.SMALL)
    if ax is None:
        shown = "± 95 % CI" if summary["cpu_pct_ci95"].notna().any() else ""
        notes = ["summed over the threads of each name", st.repeats_note(summary, ["cpu_pct"], bars=False)]
        st.finish(fig, df, "Busiest threads per point", [*notes, shown, note])
    return fig

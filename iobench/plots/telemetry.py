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
from iobench.plots import _data as dt
from iobench.plots import _style as st
from iobench.plots._lines import main_axis
from iobench.results.telemetry import cpu_by_node, thread_shares

#: The kinds of CPU time stacked in :func:`cpu_where`, bottom first, with their colours.
CPU_KINDS: dict[str, str] = {
    "user": "#1f77b4",
    "system": "#d62728",
    "irq": "#ff7f0e",
    "softirq": "#bcbd22",
}
MAX_COLS = 3


def _points(df: pd.DataFrame, figure: str) -> tuple[pd.DataFrame, list[str]]:
    """Each ok point × repeat with its parameters, and the axes that tell the points apart."""
    totals = dt.totals_for(df, figure)
    params = dt.splitting_axes(totals.drop(columns=["direction"], errors="ignore"), [])
    keep = list(dict.fromkeys(c for c in ("point", "repeat", *params) if c in totals))
    return totals[keep].drop_duplicates(["point", "repeat"]), params


def _layout(axes: Sequence[str], x: str | None, figure: str) -> tuple[str, list[str]]:
    chosen = x or main_axis(axes) or "point"
    if x is not None and x not in axes and x != "point":
        raise ResultsError(
            f"{figure}: `{x}` does not tell these points apart (axes that vary: {', '.join(axes) or 'none'})"
        )
    return chosen, [a for a in axes if a != chosen]


def _x_labels(summary: pd.DataFrame, x: str) -> list[object]:
    return dt.ordered(x, summary[x]) if x in summary else []


def cpu_where(
    df: pd.DataFrame, samples: pd.DataFrame, *, x: str | None = None, ax: Axes | None = None
) -> Figure:
    """Where the CPU went: user, system, irq and softirq time per NUMA node, stacked, against the main axis.

    A bar is one node of one point: its CPUs' time over the point's measured
    window, summed over the node's CPUs (in CPUs: 1.5 = one and a half CPUs
    busy), the mean of the point's repeats. Idle and iowait are left out.

    Parameters
    ----------
    df
        The run's tidy frame (which points ran ok, and their parameters).
    samples
        The run's telemetry (:func:`iobench.telemetry`).
    x
        The parameter along the x axis (default: the main axis, iodepth first).
    ax
        An Axes to draw into; then no other axis may vary.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        No ok point, or no CPU telemetry for them.
    """
    points, axes = _points(df, "cpu_where")
    x, others = _layout(axes, x, "cpu_where")
    if ax is not None:
        dt.one_panel("cpu_where", others)
    cpu = cpu_by_node(samples)
    data = cpu.merge(points, on=["point", "repeat"], how="inner") if not cpu.empty else cpu
    if data.empty:
        raise ResultsError("cpu_where: the run has no CPU telemetry for its ok points (telemetry: false?)")
    data = data.assign(node=data["node"].astype("Float64"))
    kinds = list(CPU_KINDS)
    summary = dt.over_repeats(data, [x, *others, "node"], kinds)
    xs = _x_labels(summary, x)
    nodes = list(dt.ordered("node", summary["node"]))
    panels = dt.combos(summary, others)

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
    fig, stacks = st.panel_grid(
        panels, others, max_cols=MAX_COLS, width=max(4.5, 1.5 + 0.9 * len(xs) * len(nodes))
    )
    for panel, (axis,) in zip(panels, stacks, strict=True):
        draw(axis, dt.select(summary, others, panel))
    note = "bars per NUMA node, summed over its CPUs; idle and iowait left out"
    st.finish(fig, df, f"Where the CPU went vs {st.in_sentence(st.short_label(x))}", note)
    return fig


def device_vs_fio(df: pd.DataFrame, *, x: str | None = None, ax: Axes | None = None) -> Figure:
    """The device's IOPS (``dev_iops``, from ``/proc/diskstats``) against fio's, per direction.

    Equal lines say every fio I/O reached the device as one request; a device
    line below fio's means page-cache hits or merged requests, above it
    readahead, writeback or split requests (the frame's ``telemetry_note`` says which).

    Parameters
    ----------
    df
        A tidy frame with telemetry columns.
    x
        The parameter along the x axis (default: the main axis).
    ax
        An Axes to draw into; then no other axis may vary.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        No ok point has ``dev_iops``.
    """
    totals = dt.totals_for(
        df, "device_vs_fio", ["dev_iops"], "the run recorded no telemetry (telemetry: false?)"
    )
    if totals["dev_iops"].isna().all():
        raise ResultsError(
            "device_vs_fio: no ok point has a `dev_iops` value (no block device under the targets?)"
        )
    axes = [a for a in dt.splitting_axes(totals, ["direction"]) if a != "point"]
    x, others = _layout(axes, x, "device_vs_fio")
    if ax is not None:
        dt.one_panel("device_vs_fio", others)
    by = list(dict.fromkeys([x, *others, "direction"]))
    summary = dt.over_repeats(totals, by, ["iops", "dev_iops"])
    xs = _x_labels(summary, x)
    at = {dt.key(v): i for i, v in enumerate(xs)}
    directions = dt.ordered("direction", summary["direction"])
    colours = st.palette(["direction"], [(d,) for d in directions])

    def draw(axis: Axes, part: pd.DataFrame) -> None:
        for colour, direction in zip(colours, directions, strict=True):
            rows = dt.select(part, ["direction"], [direction])
            positions = np.array([at[dt.key(v)] for v in rows[x]], dtype=float)
            order = np.argsort(positions)
            for metric, style, name in (("iops", "-", "fio"), ("dev_iops", "--", "device")):
                axis.plot(
                    positions[order],
                    rows[metric].to_numpy(dtype=float)[order],
                    linestyle=style,
                    marker="o" if metric == "iops" else "s",
                    color=colour,
                    label=f"{name} {direction}",
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
    fig, stacks = st.panel_grid(panels := dt.combos(summary, others), others, max_cols=MAX_COLS)
    for panel, (axis,) in zip(panels, stacks, strict=True):
        draw(axis, dt.select(summary, others, panel))
    st.finish(
        fig,
        df,
        f"Device vs fio IOPS vs {st.in_sentence(st.short_label(x))}",
        st.repeats_note(summary, ["iops"], bars=False),
    )
    return fig


def busiest_threads(
    df: pd.DataFrame, samples: pd.DataFrame, *, top: int = 8, ax: Axes | None = None
) -> Figure:
    """The busiest threads of each point (processes and kernel threads), as a grid of CPU shares.

    A row per thread name (the ``top`` busiest over the run), a column per
    point; a cell is the name's CPU share over the point's window (% of one
    CPU: 250 = two and a half CPUs), summed over the threads of that name, the
    mean of the point's repeats.

    Parameters
    ----------
    df
        The run's tidy frame.
    samples
        The run's telemetry (:func:`iobench.telemetry`).
    top
        How many thread names to show.
    ax
        An Axes to draw into.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        No ok point, or no thread telemetry for them.
    """
    points, axes = _points(df, "busiest_threads")
    shares = thread_shares(samples, top=top)
    data = shares.merge(points, on=["point", "repeat"], how="inner") if not shares.empty else shares
    if data.empty:
        raise ResultsError(
            "busiest_threads: the run has no thread telemetry for its ok points (telemetry: false?)"
        )
    columns = axes or ["point"]
    summary = dt.over_repeats(data, [*columns, "thread"], ["cpu_pct"])
    combos = dt.combos(summary, columns)
    threads = list(summary.groupby("thread")["cpu_pct"].max().sort_values(ascending=False).index)
    cells = np.full((len(threads), len(combos)), np.nan)
    row = {name: i for i, name in enumerate(threads)}
    col = {tuple(dt.key(v) for v in combo): i for i, combo in enumerate(combos)}
    for values in summary[[*columns, "thread", "cpu_pct"]].itertuples(index=False, name=None):
        cells[row[values[-2]], col[tuple(dt.key(v) for v in values[:-2])]] = values[-1]
    if ax is None:
        fig = Figure(
            figsize=(max(5.0, 1.6 + 0.75 * len(combos)), max(2.6, 1.4 + 0.38 * len(threads))),
            dpi=st.DPI,
            layout="constrained",
        )
        axis = fig.add_subplot()
    else:
        axis, fig = ax, st.root_figure(ax)
    image = axis.imshow(np.nan_to_num(cells), aspect="auto", cmap="Reds", vmin=0)
    for (i, j), value in np.ndenumerate(cells):
        if np.isfinite(value):
            axis.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=st.SMALL)
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
        st.finish(fig, df, "Busiest threads per point", "summed over the threads of each name")
    return fig

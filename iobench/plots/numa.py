"""The seeds' NUMA and SMT figures: throughput and latency, a line per binding or placement."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from iobench.errors import ResultsError
from iobench.plots import options
from iobench.plots import plotdata as dt
from iobench.plots import plotstyle as st
from iobench.plots.lineplots import layout_for, lines_figure

#: Legend text of each SMT placement: what the jobs share.
SMT_LABELS = {
    "same-core": "same core (all jobs on one core's threads)",
    "diff-cores": "different cores (one job per core)",
    "node": "node (any CPU of the node)",
}


def _checked(
    figure: str,
    df: pd.DataFrame,
    roles: dict[str, str | None],
    metrics: dict[str, str],
    hints: dict[str, str],
) -> pd.DataFrame:
    """The point totals of ``df``, once every role's column fits it."""
    totals = dt.totals_for(df, figure)
    metric_roles = {role: [m] for role, m in metrics.items()}
    options.check(df, totals, figure, categories=roles, metrics=metric_roles, hints=hints)
    return totals


def _compare(
    df: pd.DataFrame,
    totals: pd.DataFrame,
    roles: dict[str, str | None],
    metrics: list[str],
    ax: Axes | None,
    *,
    title: str,
    names: Mapping[str, str] | None = None,
) -> Figure:
    """``metrics`` against ``x``, a colour per ``hue``; the first other axis gets panels, the rest dashes."""
    x, hue = roles["x"] or "", roles["hue"]
    layout = layout_for(totals, x, hue=hue, col=roles["col"], row=roles["row"], auto_col=True)
    title = f"{title}: {st.headline(metrics, x if x != hue else '')}"
    legend = st.label(hue) if hue else None
    return lines_figure(df, totals, layout, metrics, ax=ax, title=title, legend_title=legend, names=names)


def local_vs_remote(
    df: pd.DataFrame,
    x: str = "iodepth",
    *,
    y: str = "iops",
    hue: str = "binding",
    col: str | None = None,
    row: str | None = None,
    latency: str = "lat_mean_us",
    ax: Axes | None = None,
) -> Figure:
    """Throughput and latency against ``x``, one line per NUMA binding.

    Lines are coloured the same in every figure: local blue, remote red, none
    grey, ``node:N`` from a fixed cycle, in that order. Each point is the mean
    over its repeats; with two repeats or more, bars show the 95 % confidence
    interval. Other axes that vary are never averaged: the first gets a panel
    per value, the rest a line style per value.

    Parameters
    ----------
    df
        A tidy frame with a ``binding`` column (a matrix with a ``binding`` axis).
    x
        The parameter on the horizontal axis (log2 for iodepth, numjobs and bs).
    y
        The throughput metric of the top panel: ``iops`` or ``bw_bytes`` (MiB/s).
    hue
        What gets a line colour each: the binding.
    col, row
        What gets a column, a row of panels each; by default the first other
        axis that varies gets the columns.
    latency
        The latency metric of the bottom panel, e.g. ``lat_mean_us`` or ``clat_p99_us``.
    ax
        An Axes to draw into; only ``y`` is drawn there (pass ``y=latency`` for
        the latency panel), other axes that vary get line styles.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        A column does not fit its role (no ``binding`` column, say).
    ResultsError
        No point finished ``ok``.
    """
    hint = "local_vs_remote needs a run whose matrix has a `binding` axis (binding: [local, remote])"
    roles: dict[str, str | None] = {"x": x, "hue": hue, "col": col, "row": row}
    totals = _checked("local_vs_remote", df, roles, {"y": y, "latency": latency}, {"binding": hint})
    return _compare(df, totals, roles, [y, latency], ax, title="NUMA binding")


def smt(
    df: pd.DataFrame,
    x: str = "numjobs",
    *,
    y: str = "iops",
    hue: str = "placement",
    col: str | None = None,
    row: str | None = None,
    latency: str = "lat_mean_us",
    ax: Axes | None = None,
) -> Figure:
    """Throughput and latency against the number of jobs: same core vs different cores.

    As in the VESNIN SMT graphs, the x axis is the number of jobs, not jobs
    per core. With ``same-core`` every job runs on a hardware thread of one
    physical core, so jobs per core equals ``numjobs``; with ``diff-cores`` each
    job has a core of its own (one job per core). At the same x the two lines
    therefore do the same work with 1 and with ``numjobs`` cores, and the gap
    between them is what sharing a core costs. ``node`` points, when present,
    get a third line. Error bars and panels as in :func:`local_vs_remote`.

    Parameters
    ----------
    df
        A tidy frame with a ``placement`` column holding ``same-core`` and/or ``diff-cores``.
    x
        The horizontal axis; ``numjobs`` unless the run varied something else.
    y
        Throughput metric of the top panel (``iops`` or ``bw_bytes``).
    hue
        What gets a line colour each: the placement.
    col, row
        As in :func:`local_vs_remote`.
    latency
        Latency metric of the bottom panel.
    ax
        An Axes to draw ``y`` into.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        A column does not fit its role (no ``placement`` column, say).
    ResultsError
        No same-core/diff-cores points, or no point finished ``ok``.
    """
    hint = "smt needs a run whose matrix has `placement: [same-core, diff-cores]`"
    roles: dict[str, str | None] = {"x": x, "hue": hue, "col": col, "row": row}
    totals = _checked("smt", df, roles, {"y": y, "latency": latency}, {"placement": hint})
    placements = set(totals["placement"].dropna().astype(str)) if "placement" in totals else set()
    if not placements & {"same-core", "diff-cores"}:
        found = ", ".join(sorted(placements)) or "none"
        raise ResultsError(f"smt: no same-core or diff-cores points (placements found: {found}); {hint}")
    title = "SMT, same core vs different cores"
    names = SMT_LABELS if hue == "placement" else None
    return _compare(df, totals, roles, [y, latency], ax, title=title, names=names)

"""The seeds' NUMA and SMT figures: throughput and latency, a line per binding or placement."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from iobench.errors import ResultsError
from iobench.plots import _style as st
from iobench.plots._data import ok_rows, point_totals, require, splitting_axes
from iobench.plots._lines import Layout, lines_figure

#: Legend text of each SMT placement: what the jobs share.
SMT_LABELS = {
    "same-core": "same core (all jobs on one core's threads)",
    "diff-cores": "different cores (one job per core)",
    "node": "node (any CPU of the node)",
}


def _compare(
    df: pd.DataFrame,
    totals: pd.DataFrame,
    *,
    by: str,
    x: str,
    metrics: list[str],
    ax: Axes | None,
    title: str,
    names: Mapping[str, str] | None = None,
) -> Figure:
    others = splitting_axes(totals, [x, by])
    if ax is not None:
        layout = Layout(x, colour=(by,), style=tuple(others))
    else:
        layout = Layout(x, colour=(by,), panel=tuple(others[:1]), style=tuple(others[1:]))
    return lines_figure(
        df, totals, layout, metrics, ax=ax, title=title, legend_title=st.label(by), names=names
    )


def _title(y: str, latency: str) -> str:
    return f"{st.short_label(y)} and {st.in_sentence(st.short_label(latency))}"


def _metrics(y: str, latency: str, ax: Axes | None) -> list[str]:
    return [y] if ax is not None else [y, latency]


def local_vs_remote(
    df: pd.DataFrame,
    x: str = "iodepth",
    *,
    y: str = "iops",
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
    latency
        The latency metric of the bottom panel, e.g. ``lat_mean_us`` or ``clat_p99_us``.
    ax
        An Axes to draw into; only ``y`` is drawn there (pass ``y=latency`` for
        the latency panel).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        No ``binding`` or ``x`` column, or no point finished ``ok``.
    """
    hint = "local_vs_remote needs a run whose matrix has a `binding` axis (binding: [local, remote])"
    require(df, ["binding"], "local_vs_remote", hint)
    require(df, [x], "local_vs_remote", "pass x= one of the parameter columns")
    totals = point_totals(ok_rows(df, "local_vs_remote"))
    title = "" if ax is not None else f"NUMA binding: {_title(y, latency)} vs {st.short_label(x)}"
    return _compare(df, totals, by="binding", x=x, metrics=_metrics(y, latency, ax), ax=ax, title=title)


def smt(
    df: pd.DataFrame,
    x: str = "numjobs",
    *,
    y: str = "iops",
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
    latency
        Latency metric of the bottom panel.
    ax
        An Axes to draw ``y`` into.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        No ``placement`` column or no same-core/diff-cores points, or no point finished ``ok``.
    """
    hint = "smt needs a run whose matrix has `placement: [same-core, diff-cores]`"
    require(df, ["placement"], "smt", hint)
    require(df, [x], "smt", "pass x= one of the parameter columns")
    totals = point_totals(ok_rows(df, "smt"))
    placements = set(totals["placement"].dropna().astype(str))
    if not placements & {"same-core", "diff-cores"}:
        found = ", ".join(sorted(placements)) or "none"
        raise ResultsError(f"smt: no same-core or diff-cores points (placements found: {found}); {hint}")
    title = "" if ax is not None else f"SMT: {_title(y, latency)} vs jobs, same core vs different cores"
    return _compare(
        df,
        totals,
        by="placement",
        x=x,
        metrics=_metrics(y, latency, ax),
        ax=ax,
        title=title,
        names=SMT_LABELS,
    )

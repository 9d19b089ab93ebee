"""Latency against load for an ``slo:`` run: each group's probes, the limit, the knee (docs/slo.md).

Two panels sharing a log latency axis: the offered load on the left (the
total ``rate_iops``; ``iodepth`` for a closed-loop search), the achieved IOPS
on the right. Each group of the other axes is a colour; p50 dotted, p99
solid, p99.9 dashed. Probes that fell behind their offered load (validity
``behind``) are hollow: their latency is not valid. The limit is a grey line;
the knee of each group's p99 (Kneedle, ``kneed``) is a star, and the first
load whose p99 reached twice its lowest-load value a triangle.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from iobench.answers.slo import COLUMNS, slo
from iobench.errors import ResultsError
from iobench.plots import plotstyle as st
from iobench.results.loading import load
from iobench.results.points import point_totals

#: The percentiles drawn, each with its line style.
LINES: dict[str, str] = {"clat_p50_us": ":", "clat_p99_us": "-", "clat_p99_9_us": "--"}
#: The knee's second rule: the first load whose p99 reaches this multiple of its lowest-load p99.
KNEE_FACTOR = 2.0


def knee(loads: np.ndarray, p99: np.ndarray) -> float | None:
    """The knee of a convex, rising latency curve (Kneedle); None with fewer than three loads or none found."""
    from kneed import KneeLocator

    if len(loads) < 3 or len(np.unique(loads)) < 3:
        return None
    found = KneeLocator(loads, p99, curve="convex", direction="increasing").knee
    return None if found is None else float(found)


def doubled(loads: np.ndarray, p99: np.ndarray) -> float | None:
    """The first load whose p99 reached :data:`KNEE_FACTOR` × the p99 at the lowest load."""
    if len(loads) < 2:
        return None
    hits = np.flatnonzero(p99 >= KNEE_FACTOR * p99[0])
    return float(loads[hits[0]]) if len(hits) else None


def _probes(run: str | os.PathLike[str]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    answers = slo(run)
    frame = load(run)
    totals = point_totals(frame)
    if totals.empty:
        raise ResultsError(f"{run}: no probe finished ok: nothing to draw")
    groups = [c for c in answers.columns if c not in (*COLUMNS, "sentence") and c in totals]
    summed = totals.groupby(["point", "repeat", *groups], dropna=False, sort=False).agg(
        iops=("iops", "sum"),
        jobs=("jobs", "max"),
        **{c: (c, "max") for c in LINES if c in totals},
        **{c: (c, "first") for c in ("rate_iops", "iodepth") if c in totals},
    )
    summed = summed.reset_index()
    if "validity" in frame:
        flagged = frame.assign(behind=frame["validity"].astype("string").str.contains("behind").fillna(False))
        behind = flagged.groupby(["point", "repeat"])["behind"].any().reset_index()
        summed = summed.merge(behind, on=["point", "repeat"], how="left")
    else:
        summed["behind"] = False
    return summed, answers, groups


def latency_load(run: str | os.PathLike[str] | Any, **roles: str) -> Figure:
    """The latency–load figure of an ``slo:`` run (``iobench plot RUN latency-load``).

    Raises
    ------
    ResultsError
        A role was given (the figure fixes them), the run has no ``slo:``
        answers, or no probe finished.
    """
    if roles:
        raise ResultsError(f"latency-load fixes its axes; drop --{' --'.join(roles)}")
    path = getattr(run, "run_dir", run)
    probes, answers, groups = _probes(path)
    load_kind = str(answers["load"].iloc[0]) if len(answers) else "rate_iops"
    limit_us = float(answers["limit_us"].iloc[0])
    if load_kind == "rate_iops":
        probes["offered"] = probes["rate_iops"].astype(float) * probes["jobs"].astype(float)
    else:
        probes["offered"] = probes["iodepth"].astype(float)
    fig = st.new_figure(11.0, 4.5)
    left, right = fig.subplots(1, 2, sharey=True)
    combos = (
        list(dict.fromkeys(tuple(row) for row in probes[groups].itertuples(index=False))) if groups else [()]
    )
    colours = st.palette(groups, combos) if groups else [st.CYCLE[0]]
    for colour, combo in zip(colours, combos, strict=True):
        mask = np.ones(len(probes), dtype=bool)
        for name, value in zip(groups, combo, strict=True):
            mask &= (probes[name] == value).fillna(False).to_numpy()
        data = probes[mask].sort_values("offered")
        name = st.describe(groups, combo) if groups else "the run"
        for axis, x in ((left, "offered"), (right, "iops")):
            xs = data[x].to_numpy(dtype=float)
            hollow = data["behind"].fillna(False).to_numpy(dtype=bool)
            for column, style in LINES.items():
                if column not in data:
                    continue
                ys = data[column].to_numpy(dtype=float)
                label = f"{name} {column.split('_')[1]}" if axis is left else None
                axis.plot(xs, ys, linestyle=style, color=colour, label=label)
                axis.scatter(xs[~hollow], ys[~hollow], color=colour, s=18)
                axis.scatter(xs[hollow], ys[hollow], facecolors="none", edgecolors=colour, s=30)
        valid = data[~data["behind"].fillna(False).astype(bool)]
        if "clat_p99_us" in valid and len(valid):
            xs, p99 = valid["offered"].to_numpy(dtype=float), valid["clat_p99_us"].to_numpy(dtype=float)
            for where, marker in ((knee(xs, p99), "*"), (doubled(xs, p99), "^")):
                if where is not None:
                    left.scatter([where], [p99[xs == where][0]], marker=marker, s=120, color=colour, zorder=5)
    for axis in (left, right):
        axis.axhline(limit_us, color="grey", linewidth=1)
        axis.set_yscale("log")
        axis.set_xscale("log")
    left.set_xlabel("offered IOPS" if load_kind == "rate_iops" else "iodepth per job")
    right.set_xlabel("achieved IOPS")
    left.set_ylabel("completion latency (µs)")
    left.legend(fontsize="small")
    fig.suptitle(f"latency against load (limit {limit_us:,.0f} µs; ★ knee, ▲ p99 twice its unloaded value)")
    return fig

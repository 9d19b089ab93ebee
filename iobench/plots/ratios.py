"""Run B against run A: each point's ratio B/A with its 95 % CI, coloured by verdict."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from iobench.errors import ResultsError
from iobench.plots import limits, options
from iobench.plots import plotstyle as st
from iobench.results.compare import key_columns

#: Marker colour per verdict; an untested point (NA) is drawn hollow in :data:`UNTESTED`.
VERDICT_COLOURS = {"better": "#2ca02c", "worse": "#d62728", "no change": "#7f7f7f"}
UNTESTED = "#b0b0b0"
#: What a row whose interval has no bounds reads as, beside its hollow marker and the dashed arrow across the panel.
UNBOUNDED = "CI unbounded"
#: Ratios the x axis may label (log scale), nicest first: each is used unless a nicer one is too close.
_TICKS = (1.0, 2.0, 0.5, 4.0, 0.25, 10.0, 0.1, 1.5, 0.8, 1.25, 0.9, 1.1, 0.95, 1.05, 0.98, 1.02, 0.99, 1.01)


def _labels(rows: pd.DataFrame, keys: Sequence[str]) -> list[str]:
    shown = [k for k in keys if rows[k].astype("string").nunique(dropna=False) > 1] or list(keys[:1])
    return [st.describe(shown, [row[k] for k in shown]) if shown else "all" for _, row in rows.iterrows()]


def _ticks(low: float, high: float) -> list[float]:
    """Up to about eight of :data:`_TICKS` inside ``[low, high]``, spread evenly enough to read."""
    gap = math.log(high / low) / 8
    kept: list[float] = []
    for tick in _TICKS:
        if low <= tick <= high and all(abs(math.log(tick / k)) >= gap for k in kept):
            kept.append(tick)
    return sorted(kept) or [1.0]


def _draw(axis: Axes, rows: pd.DataFrame, labels: Sequence[str], metric: str, min_effect: float) -> bool:
    """Draw one metric's rows; whether any of them has an unbounded interval (the caption then says how it looks)."""
    ratio = rows["ratio"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    low = rows["ratio_ci_low"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    high = rows["ratio_ci_high"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    verdicts = rows["verdict"].astype("string").fillna("").tolist()
    y = np.arange(len(rows))[::-1]
    band = (1 / (1 + min_effect), 1 + min_effect)
    axis.axvspan(*band, color="0.88", zorder=0, label=f"within ±{min_effect:.0%} (minimum effect)")
    axis.axvline(1.0, color="0.35", linewidth=1, zorder=1)
    finite = [v for v in (*ratio, *low, *high, *band) if math.isfinite(v) and v > 0]
    lo, hi = min(finite), max(finite)
    wide = hi / lo > 1.5
    left, right = lo / 1.08 ** (1 + wide), hi * 1.08 ** (2 + wide)
    axis.set_xscale("log")
    axis.set_xlim(left, right)
    unbounded = False
    for index in range(len(rows)):
        if not math.isfinite(ratio[index]) or ratio[index] <= 0:
            continue
        colour = VERDICT_COLOURS.get(verdicts[index], UNTESTED)
        bounded = math.isfinite(low[index]) and math.isfinite(high[index])
        if verdicts[index] and not bounded:
            # Tested, but the interval has no ends: a bare dot would read as the most precise row.
            unbounded = True
            axis.annotate(
                "",
                xy=(left, y[index]),
                xytext=(right, y[index]),
                arrowprops={"arrowstyle": "<|-|>", "linestyle": "--", "color": colour, "linewidth": 1.2},
                zorder=2,
            )
            axis.plot(
                ratio[index],
                y[index],
                "o",
                color=colour,
                markerfacecolor="white",
                markersize=7,
                zorder=3,
                label=f"{verdicts[index]}, {UNBOUNDED}",
            )
            axis.annotate(
                f"{ratio[index]:.3f}, {UNBOUNDED}",
                (ratio[index], y[index]),
                xytext=(5, 3),
                textcoords="offset points",
                fontsize=st.SMALL,
                va="bottom",
            )
            continue
        # a lower end at 0 cannot sit on a log axis: the bar runs off the left edge
        start = max(low[index], left) if bounded else ratio[index]
        axis.errorbar(
            ratio[index],
            y[index],
            xerr=[[ratio[index] - start], [high[index] - ratio[index]]] if bounded else None,
            fmt="o",
            color=colour,
            markerfacecolor=colour if verdicts[index] else "white",
            ecolor=colour,
            elinewidth=1.6,
            capsize=4,
            markersize=6,
            zorder=3,
            label=verdicts[index] or "not tested",
        )
        axis.annotate(
            f"{ratio[index]:.3f}",
            (high[index] if bounded else ratio[index], y[index]),
            xytext=(5, 3),
            textcoords="offset points",
            fontsize=st.SMALL,
            va="bottom",
        )
    axis.xaxis.set_major_locator(FixedLocator(_ticks(*axis.get_xlim())))
    axis.xaxis.set_minor_locator(NullLocator())
    axis.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_yticks(y, labels)
    axis.set_ylim(-0.7, len(rows) - 0.3)
    axis.set_xlabel(f"{st.short_label(metric)}: B / A")
    axis.grid(True, axis="x", alpha=0.3)
    axis.set_axisbelow(True)
    axis.set_title(st.label(metric), fontsize=st.MEDIUM)
    return unbounded


#: The roles the figure fixes, and what each is.
FIXED = {
    "x": "the ratio B / A",
    "hue": "the verdict",
    "col": "the metric",
    "row": "the point",
}


def _largest(rows: pd.DataFrame, limit: int) -> pd.DataFrame:
    """The ``limit`` rows whose ratio is furthest from 1 (on a log scale), in their order."""
    if len(rows) <= limit:
        return rows
    ratio = rows["ratio"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    change = np.abs(np.log(np.where(ratio > 0, ratio, np.nan)))
    order = np.argsort(-np.nan_to_num(change, nan=-1.0), kind="stable")[:limit]
    return rows.iloc[np.sort(order)]


def ratios(
    comparison: pd.DataFrame,
    *,
    x: str | None = None,
    y: str | Sequence[str] | None = None,
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Each point's ratio B/A with its 95 % CI, one panel per metric, coloured by verdict.

    Points sit on a log scale (×2 and ×½ equally far from 1; an interval reaching 0
    runs off the left edge; a tested row whose interval has no bounds is a
    hollow marker on a dashed arrow across the panel, labelled ``CI unbounded``); the grey band is
    the minimum effect around 1, inside which no change counts. Green: better,
    red: worse, grey: no change, hollow: not tested (fewer than two repeats).
    Points that ran on one side only are left out. Past
    :data:`~iobench.plots.limits.MAX_CATEGORIES` points a panel keeps those
    that changed most, and the caption says so (the comparison frame holds them all).

    Parameters
    ----------
    comparison
        A frame from :func:`iobench.compare`.
    y
        The metric, or metrics, to draw (default: every metric of the comparison).
    x, hue, col, row
        Fixed (the ratio, the verdict, the metric, the point); giving any is an error.
    ax
        An Axes to draw into; then exactly one metric.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        ``x``, ``hue``, ``col`` or ``row`` given.
    ResultsError
        Not a comparison, no matched point with a ratio, a metric it lacks,
        or several metrics for one ``ax``.
    """
    options.fixed("ratios", {"x": x, "hue": hue, "col": col, "row": row}, FIXED)
    keys = key_columns(comparison)
    present = list(dict.fromkeys(comparison["metric"].dropna()))
    chosen = present if y is None else [y] if isinstance(y, str) else list(y)
    unknown = [m for m in chosen if m not in present]
    if unknown or not chosen:
        raise ResultsError(
            f"ratios: no {unknown[0] if unknown else 'metric'!r} in the comparison (it has {', '.join(present)})"
        )
    matched = comparison[comparison["match"].eq("both").fillna(False) & comparison["ratio"].notna()]
    if matched.empty:
        raise ResultsError("ratios: no point of the comparison ran in both runs with a ratio")
    if ax is not None and len(chosen) != 1:
        raise ResultsError(f"ratios: one Axes draws one metric; pass y= one of {', '.join(chosen)}")
    min_effect = float(comparison.attrs.get("min_effect", 0.01))
    if ax is not None:
        rows = _largest(matched[matched["metric"] == chosen[0]], limits.MAX_CATEGORIES)
        _draw(ax, rows, _labels(rows, keys), chosen[0], min_effect)
        return st.root_figure(ax)
    unbounded = False
    panels = [(m,) for m in chosen if (matched["metric"] == m).any()]
    counts = [int((matched["metric"] == m).sum()) for (m,) in panels]
    shown = min(max(counts), limits.MAX_CATEGORIES)
    grid = st.panel_grid(panels, [], max_cols=2, width=5.6, height=0.9 + 0.38 * shown)
    for (metric,), (axis,) in zip(grid.panels, grid.stacks, strict=True):
        rows = _largest(matched[matched["metric"] == metric], limits.MAX_CATEGORIES)
        unbounded |= _draw(axis, rows, _labels(rows, keys), str(metric), min_effect)
    a, b = comparison.attrs.get("a", "A"), comparison.attrs.get("b", "B")
    note = f"bars: 95 % CI of the ratio (Fieller); verdict: Welch's t-test at 5 % and a change of at least {min_effect:.0%}"
    kept = limits.shown(shown, max(counts), "points", "the largest changes")
    if unbounded:
        note += (
            f"; hollow marker and dashed arrow across the panel: {UNBOUNDED} (A's mean not clear of zero: "
            "the repeats cannot bound the ratio)"
        )
    st.finish(grid.fig, comparison, f"{b} against {a}: ratio B / A", [note, kept, grid.note])
    return grid.fig

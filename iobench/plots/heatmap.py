"""A metric over two parameters as annotated cells (iodepth × numjobs by default)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import Colormap, LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from iobench.errors import ResultsError
from iobench.matrix.display import format_value
from iobench.plots import limits, options
from iobench.plots import plotdata as dt
from iobench.plots import plotstyle as st

#: Panels per row before the figure wraps.
MAX_COLS = 2
#: Every panel shares one colour scale; past this factor between the largest and smallest value it is logarithmic.
LOG_RATIO = 20.0
_LOWER_IS_BETTER = ("lat", "clat", "slat", "cpu_us_per_io")

Cells = np.ndarray[tuple[int, int], np.dtype[np.float64]]


def _cells(
    data: pd.DataFrame, metric: str, x: str, y: str, xs: list[object], ys: list[object], column: str = ""
) -> Cells:
    """``metric`` (scaled; or ``column``, in its unit) of ``data`` in a grid: a row per ``ys``, a column
    per ``xs`` value; NaN where none."""
    cells = np.full((len(ys), len(xs)), math.nan)
    col = {dt.key(v): i for i, v in enumerate(xs)}
    row = {dt.key(v): i for i, v in enumerate(ys)}
    for xv, yv, value in zip(data[x], data[y], data[column or metric], strict=True):
        cells[row[dt.key(yv)], col[dt.key(xv)]] = value * st.scale(metric)
    return cells


def _norm(grids: Sequence[Cells]) -> Normalize:
    """One colour scale for every panel (they show one metric), logarithmic past :data:`LOG_RATIO`-fold."""
    everything = np.concatenate([g[np.isfinite(g)] for g in grids])
    if not everything.size:
        return Normalize(0, 1)
    low, high = float(everything.min()), float(everything.max())
    if low > 0 and high / low > LOG_RATIO:
        return LogNorm(low, high)
    return Normalize(low, high)


def _cell_text(metric: str, value: float, ci: float) -> str:
    """A cell's mean, and under it ``± half-width`` of its 95 % CI when there is one."""
    text = st.metric_text(metric, value)
    return f"{text}\n± {st.metric_text(metric, ci)}" if math.isfinite(value) and math.isfinite(ci) else text


def _draw_cells(
    axis: Axes,
    cells: Cells,
    cis: Cells,
    norm: Normalize,
    cmap: Colormap,
    *,
    metric: str,
    x: str,
    y: str,
    xs: list[object],
    ys: list[object],
) -> AxesImage:
    """The cells as an image, each with its value (± its CI) in a colour that reads on it; a dash where there is none."""
    image = axis.imshow(np.ma.masked_invalid(cells), origin="lower", aspect="auto", cmap=cmap, norm=norm)
    for (i, j), value in np.ndenumerate(cells):
        r, g, b, _ = cmap(norm(value))
        colour = (
            "0.4" if math.isnan(value) else "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"
        )
        axis.text(
            j,
            i,
            _cell_text(metric, value, float(cis[i, j])),
            ha="center",
            va="center",
            fontsize=st.SMALL,
            color=colour,
        )
    axis.set_xticks(range(len(xs)), [format_value(x, v) for v in xs])
    axis.set_yticks(range(len(ys)), [format_value(y, v) for v in ys])
    axis.set_xlabel(st.label(x))
    axis.set_ylabel(st.label(y))
    axis.tick_params(length=0)
    for spine in axis.spines.values():
        spine.set_visible(False)
    return image


def _colorbar(image: AxesImage, axes: list[Axes], metric: str) -> None:
    bar = st.root_figure(axes[0]).colorbar(image, ax=axes, label=st.label(metric), shrink=0.9)
    st.metric_ticks(bar.ax.yaxis, metric)
    bar.ax.tick_params(labelsize=st.SMALL)
    bar.ax.yaxis.label.set_fontsize(st.MEDIUM)


def heatmap(
    df: pd.DataFrame,
    y: str = "iops",
    *,
    x: str = "iodepth",
    hue: str = "numjobs",
    col: str | None = None,
    row: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """``y`` (mean over repeats) over two parameters, one annotated cell per combination.

    Cells hold the value with a k/M suffix; a combination that has no ``ok``
    point shows a dash, and points without a value of ``x`` or ``hue`` get an
    ``n/a`` column or row. Other axes that vary get a panel each (beside
    ``col`` and ``row``), all on one colour scale so panels compare — linear unless
    the values span more than :data:`LOG_RATIO`-fold (4k vs 1M blocks), when
    that one scale is logarithmic. With two repeats or more a cell also says
    ``± `` the half-width of its mean's 95 % confidence interval. Lower-is-better metrics (latencies,
    CPU per I/O) use a reversed colour map, so the best cell is always the
    light one. Past :data:`~iobench.plots.limits.MAX_CATEGORIES` values of
    ``x`` or ``hue`` the first are kept, and the caption says so.

    Parameters
    ----------
    df
        A tidy frame.
    y
        The metric of each cell (``iops``, ``bw_bytes``, ``lat_mean_us``, ``cpu_us_per_io`` ...).
    x
        The category along the columns of cells.
    hue
        The category along the rows of cells.
    col, row
        Categories whose values get a column, a row of panels each.
    ax
        An Axes to draw into; then no other axis may vary (filter the frame first).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        A column does not fit its role.
    ResultsError
        Another axis varies while ``ax`` is given, no point has a value of
        ``y``, or no point finished ``ok``.
    """
    totals = dt.totals_for(df, "heatmap")
    roles = {"x": x, "hue": hue, "col": col, "row": row}
    options.check(df, totals, "heatmap", categories=roles, metrics={"y": [y]})
    others = dt.splitting_axes(totals, [x, hue, *(c for c in (col, row) if c)])
    rows, cols = [row] if row else [], [*([col] if col else []), *others]
    if ax is not None:
        dt.one_panel("heatmap", [*rows, *cols])
    summary = dt.over_repeats(totals, [x, hue, *rows, *cols], [y])
    notes = []
    xs, ys = dt.ordered(x, summary[x]), dt.ordered(hue, summary[hue])
    for column, values in ((x, xs), (hue, ys)):
        notes.append(limits.shown(limits.MAX_CATEGORIES, len(values), f"values of {column}", "the first"))
    xs, ys = limits.first(xs), limits.first(ys)
    summary = limits.keep(summary, [x, hue], [(a, b) for a in xs for b in ys])
    if summary[y].isna().all():
        raise ResultsError(f"heatmap: no ok point has a `{y}` value")
    panel_columns = [*rows, *cols]
    cmap = colormaps["viridis_r" if y.startswith(_LOWER_IS_BETTER) else "viridis"].with_extremes(bad="0.92")
    draw = partial(_draw_cells, cmap=cmap, metric=y, x=x, y=hue, xs=xs, ys=ys)

    def grids(part: pd.DataFrame) -> tuple[Cells, Cells]:
        return _cells(part, y, x, hue, xs, ys), _cells(part, y, x, hue, xs, ys, f"{y}_ci95")

    if ax is not None:
        cells, cis = grids(summary)
        _colorbar(draw(ax, cells, cis, _norm([cells])), [ax], y)
        return st.root_figure(ax)
    width = max(4.0, 0.9 * len(xs) + 1.8)
    height = max(2.6, 0.6 * len(ys) + 1.4)
    panels = dt.combos(summary, panel_columns)
    grid = st.panel_grid(panels, panel_columns, rows=len(rows), max_cols=MAX_COLS, width=width, height=height)
    shown = [grids(dt.select(summary, panel_columns, p)) for p in grid.panels]
    norm = _norm([cells for cells, _ in shown])
    axes = [axis for (axis,) in grid.stacks]
    images = [draw(axis, cells, cis, norm) for axis, (cells, cis) in zip(axes, shown, strict=True)]
    _colorbar(images[0], axes, y)
    title = f"{st.short_label(y)} by {st.in_sentence(st.short_label(x))} and {st.in_sentence(st.short_label(hue))}"
    spread = "± 95 % CI" if summary[f"{y}_ci95"].notna().any() else ""
    st.finish(grid.fig, df, title, [st.repeats_note(summary, [y], bars=False), spread, *notes, grid.note])
    return grid.fig

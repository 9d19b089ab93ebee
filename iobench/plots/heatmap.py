"""A metric over two parameters as annotated cells (iodepth × numjobs by default)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import Colormap, Normalize
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from iobench.errors import ResultsError
from iobench.matrix.display import format_value
from iobench.plots import _data as dt
from iobench.plots import _style as st

#: Panels per row before the figure wraps.
MAX_COLS = 2
#: Panels share one colour scale while their largest values are within this factor.
SHARE_RATIO = 2.5
_LOWER_IS_BETTER = ("lat", "clat", "slat", "cpu_us_per_io")

Cells = np.ndarray[tuple[int, int], np.dtype[np.float64]]


def _cells(data: pd.DataFrame, metric: str, x: str, y: str, xs: list[object], ys: list[object]) -> Cells:
    """``metric`` (scaled) of ``data`` in a grid: a row per ``ys`` value, a column per ``xs``; NaN where none."""
    cells = np.full((len(ys), len(xs)), math.nan)
    col = {dt.key(v): i for i, v in enumerate(xs)}
    row = {dt.key(v): i for i, v in enumerate(ys)}
    for xv, yv, value in zip(data[x], data[y], data[metric], strict=True):
        cells[row[dt.key(yv)], col[dt.key(xv)]] = value * st.scale(metric)
    return cells


def _norms(grids: Sequence[Cells]) -> list[Normalize]:
    """One colour scale for every panel, unless their largest values differ more than :data:`SHARE_RATIO`-fold."""
    finite = [g[np.isfinite(g)] for g in grids]
    tops = [float(f.max()) for f in finite if f.size]
    if min(tops) > 0 and max(tops) / min(tops) <= SHARE_RATIO:
        everything = np.concatenate(finite)
        return [Normalize(float(everything.min()), float(everything.max()))] * len(grids)
    return [Normalize(float(f.min()), float(f.max())) if f.size else Normalize(0, 1) for f in finite]


def _draw_cells(
    axis: Axes,
    cells: Cells,
    norm: Normalize,
    cmap: Colormap,
    *,
    metric: str,
    x: str,
    y: str,
    xs: list[object],
    ys: list[object],
) -> AxesImage:
    """The cells as an image, each with its value written in a colour that reads on it; a dash where there is none."""
    image = axis.imshow(np.ma.masked_invalid(cells), origin="lower", aspect="auto", cmap=cmap, norm=norm)
    for (i, j), value in np.ndenumerate(cells):
        r, g, b, _ = cmap(norm(value))
        colour = (
            "0.4" if math.isnan(value) else "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"
        )
        axis.text(
            j, i, st.metric_text(metric, value), ha="center", va="center", fontsize=st.SMALL, color=colour
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
    metric: str = "iops",
    x: str = "iodepth",
    y: str = "numjobs",
    *,
    ax: Axes | None = None,
) -> Figure:
    """``metric`` (mean over repeats) over two parameters, one annotated cell per combination.

    Cells hold the value with a k/M suffix; a combination that has no ``ok``
    point shows a dash, and points without a value of ``x`` or ``y`` get an
    ``n/a`` column or row. Other axes that vary get a panel each, all on one
    colour scale so panels compare — unless their largest values differ more
    than :data:`SHARE_RATIO`-fold (4k vs 1M blocks), when each panel gets its
    own. Lower-is-better metrics (latencies, CPU per I/O) use a reversed colour
    map, so the best cell is always the light one.

    Parameters
    ----------
    df
        A tidy frame.
    metric
        The value of each cell (``iops``, ``bw_bytes``, ``lat_mean_us``, ``cpu_us_per_io`` ...).
    x, y
        The parameters along the columns and the rows.
    ax
        An Axes to draw into; then no other axis may vary (filter the frame first).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ResultsError
        A column or the metric is missing, another axis varies while ``ax`` is
        given, or no point finished ``ok``.
    """
    totals = dt.totals_for(df, "heatmap", [x, y], "pass x= and y= two parameter columns")
    dt.require_metrics(totals, [metric], "heatmap")
    others = dt.splitting_axes(totals, [x, y])
    if ax is not None:
        dt.one_panel("heatmap", others)
    summary = dt.over_repeats(totals, [x, y, *others], [metric])
    xs, ys = dt.ordered(x, summary[x]), dt.ordered(y, summary[y])
    panels = dt.combos(summary, others)
    grids = [_cells(dt.select(summary, others, p), metric, x, y, xs, ys) for p in panels]
    if not any(np.isfinite(g).any() for g in grids):
        raise ResultsError(f"heatmap: no ok point has a `{metric}` value")
    norms = _norms(grids)
    cmap = colormaps["viridis_r" if metric.startswith(_LOWER_IS_BETTER) else "viridis"].with_extremes(
        bad="0.92"
    )
    draw = partial(_draw_cells, cmap=cmap, metric=metric, x=x, y=y, xs=xs, ys=ys)
    if ax is not None:
        _colorbar(draw(ax, grids[0], norms[0]), [ax], metric)
        return st.root_figure(ax)
    width = max(4.0, 0.9 * len(xs) + 1.8)
    height = max(2.6, 0.45 * len(ys) + 1.4)
    fig, stacks = st.panel_grid(panels, others, max_cols=MAX_COLS, width=width, height=height)
    axes = [axis for (axis,) in stacks]
    images = [draw(axis, cells, norm) for axis, cells, norm in zip(axes, grids, norms, strict=True)]
    if all(norm is norms[0] for norm in norms):
        _colorbar(images[0], axes, metric)
    else:
        for image, axis in zip(images, axes, strict=True):
            _colorbar(image, [axis], metric)
    title = f"{st.short_label(metric)} by {st.in_sentence(st.short_label(x))} and {st.in_sentence(st.short_label(y))}"
    st.finish(fig, df, title, st.repeats_note(summary, [metric], bars=False))
    return fig

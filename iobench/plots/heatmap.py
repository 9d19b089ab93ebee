"""A metric over two parameters as annotated cells (iodepth × numjobs by default)."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import Colormap, Normalize
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.ticker import FuncFormatter

from iobench.errors import ResultsError
from iobench.plots import _style as st
from iobench.plots._data import ok_rows, over_repeats, point_totals, require, splitting_axes
from iobench.plots._lines import combos, panel_title, select

#: Panels per row before the figure wraps.
MAX_COLS = 2
#: Panels share one colour scale while their largest values are within this factor.
SHARE_RATIO = 2.5
_LOWER_IS_BETTER = ("lat", "clat", "slat", "cpu_us_per_io")


def _cells(
    data: pd.DataFrame, metric: str, x: str, y: str, xs: list[object], ys: list[object]
) -> np.ndarray[tuple[int, int], np.dtype[np.float64]]:
    cells = np.full((len(ys), len(xs)), math.nan)
    col = {st.key(v): i for i, v in enumerate(xs)}
    row = {st.key(v): i for i, v in enumerate(ys)}
    for xv, yv, value in zip(data[x], data[y], data[metric], strict=True):
        cells[row[st.key(yv)], col[st.key(xv)]] = float(value) * st.scale(metric)
    return cells


def _draw(
    axis: Axes,
    cells: np.ndarray[tuple[int, int], np.dtype[np.float64]],
    *,
    metric: str,
    x: str,
    y: str,
    xs: list[object],
    ys: list[object],
    norm: Normalize,
    cmap: str,
) -> AxesImage:
    colormap = _colormap(cmap)
    image = axis.imshow(np.ma.masked_invalid(cells), origin="lower", aspect="auto", cmap=colormap, norm=norm)
    for (i, j), value in np.ndenumerate(cells):
        if math.isfinite(value):
            shade = colormap(norm(value))
            dark = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] < 0.5
            text = st.metric_text(metric, value)
            axis.text(
                j, i, text, ha="center", va="center", fontsize=st.SMALL, color="white" if dark else "black"
            )
        else:
            axis.text(j, i, "—", ha="center", va="center", fontsize=st.SMALL, color="0.4")
    axis.set_xticks(range(len(xs)), [st.format_value(x, v) for v in xs])
    axis.set_yticks(range(len(ys)), [st.format_value(y, v) for v in ys])
    axis.set_xlabel(st.label(x))
    axis.set_ylabel(st.label(y))
    axis.tick_params(length=0)
    for spine in axis.spines.values():
        spine.set_visible(False)
    return image


def _colormap(name: str) -> Colormap:
    return colormaps[name].with_extremes(bad="0.92")


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
    point shows a dash. Other axes that vary get a panel each, all on one
    colour scale so panels compare — unless their largest values differ more
    than :data:`SHARE_RATIO`-fold (4k vs 1M blocks), when each panel gets its own. Lower-is-better metrics (latencies, CPU
    per I/O) use a reversed colour map, so the best cell is always the light one.

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
        A column is missing, another axis varies while ``ax`` is given, or no point finished ``ok``.
    """
    require(df, [x, y], "heatmap", "pass x= and y= two parameter columns")
    totals = point_totals(ok_rows(df, "heatmap"))
    require(totals, [metric], "heatmap", "pick a metric column of the frame")
    others = splitting_axes(totals, [x, y])
    if ax is not None and others:
        raise ResultsError(
            f"heatmap: {', '.join(others)} also var{'y' if len(others) > 1 else 'ies'}; "
            "one Axes shows one panel — filter the frame to one value, or omit ax= to get a panel each"
        )
    summary = over_repeats(totals, [x, y, *others], [metric])
    xs = st.ordered(x, summary[x].dropna().tolist())
    ys = st.ordered(y, summary[y].dropna().tolist())
    panels = combos(summary, others)
    grids = [_cells(select(summary, others, p), metric, x, y, xs, ys) for p in panels]
    if not any(np.isfinite(g).any() for g in grids):
        raise ResultsError(f"heatmap: no `{metric}` values in the ok points")
    norms = _norms(grids)
    cmap = "viridis_r" if metric.startswith(_LOWER_IS_BETTER) else "viridis"
    draw = partial(_draw, metric=metric, x=x, y=y, xs=xs, ys=ys, cmap=cmap)
    if ax is not None:
        fig = st.root_figure(ax)
        _colorbar(fig, draw(ax, grids[0], norm=norms[0]), [ax], metric)
        return fig
    cols = min(len(panels), MAX_COLS)
    rows = math.ceil(len(panels) / cols)
    width = max(4.0, 0.9 * len(xs) + 1.8)
    height = max(2.6, 0.45 * len(ys) + 1.4)
    fig, grid = st.new_figure(rows, cols, width=width, height=height)
    drawn: list[Axes] = []
    images = []
    for index, (panel, cells, norm) in enumerate(zip(panels, grids, norms, strict=True)):
        axis: Axes = grid.flat[index]
        images.append(draw(axis, cells, norm=norm))
        if others:
            axis.set_title(panel_title(others, panel), fontsize=st.MEDIUM)
        drawn.append(axis)
    for axis in grid.flat[len(drawn) :]:
        axis.set_visible(False)
    if len({id(n) for n in norms}) == 1:
        _colorbar(fig, images[0], drawn, metric)
    else:
        for image, axis in zip(images, drawn, strict=True):
            _colorbar(fig, image, [axis], metric)
    fig.suptitle(
        f"{st.short_label(metric)} by {st.in_sentence(st.short_label(x))} and "
        f"{st.in_sentence(st.short_label(y))}",
        fontsize=st.LARGE,
    )
    st.add_caption(fig, st.caption(df, notes=[st.repeats_note(summary, [metric], bars=False)]))
    return fig


def _norms(grids: list[np.ndarray[tuple[int, int], np.dtype[np.float64]]]) -> list[Normalize]:
    """One colour scale for every panel, unless their largest values differ more than :data:`SHARE_RATIO`-fold."""
    finite = [g[np.isfinite(g)] for g in grids]
    tops = [float(f.max()) for f in finite if f.size]
    if min(tops) > 0 and max(tops) / min(tops) <= SHARE_RATIO:
        everything = np.concatenate(finite)
        shared = Normalize(float(everything.min()), float(everything.max()))
        return [shared] * len(grids)
    return [Normalize(float(f.min()), float(f.max())) if f.size else Normalize(0, 1) for f in finite]


def _colorbar(fig: Figure, image: AxesImage, axes: list[Axes], metric: str) -> None:
    formatter = FuncFormatter(lambda v, _pos: st.metric_text(metric, float(v)))
    bar = fig.colorbar(image, ax=axes, label=st.label(metric), format=formatter, shrink=0.9)
    bar.ax.tick_params(labelsize=st.SMALL)
    bar.ax.yaxis.label.set_fontsize(st.MEDIUM)

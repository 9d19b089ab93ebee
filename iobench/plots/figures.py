"""Which figures fit a run, and writing them to files."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure

from iobench.errors import ResultsError
from iobench.plots import plotdata as dt
from iobench.plots import plotstyle as st
from iobench.plots.cpu import cpu_per_io
from iobench.plots.heatmap import heatmap
from iobench.plots.hostvalues import host_totals, hosts
from iobench.plots.latency import latency_percentiles, percentile_layout
from iobench.plots.latheatmap import lat_heatmap
from iobench.plots.lineplots import main_axis, plot, sweep
from iobench.plots.loadcurve import latency_load
from iobench.plots.numa import local_vs_remote, smt
from iobench.plots.resources import busiest_threads, cpu_where, device_vs_fio
from iobench.plots.scaleout import scale_out
from iobench.plots.timeline import timeline

#: ``iobench plot RESULTS KIND``: each kind's function.
KINDS: dict[str, Callable[..., Figure]] = {
    "local-vs-remote": local_vs_remote,
    "smt": smt,
    "heatmap": heatmap,
    "latency": latency_percentiles,
    "cpu-per-io": cpu_per_io,
    "sweep": sweep,
    "line": plot,
    "timeline": timeline,
    "lat-heatmap": lat_heatmap,
    "hosts": hosts,
    "scale-out": scale_out,
    "latency-load": latency_load,
}
#: Kinds drawn from a run directory itself (fio's logs), not from its frame: ``draw`` takes the directory.
RUN_KINDS = frozenset({"timeline", "lat-heatmap", "latency-load"})
#: Settings that get a CPU-per-I/O figure when they vary.
CPU_SETTINGS = ("scheduler", "readahead_kb", "direct")
#: A percentile figure with more curves than this in one panel is left out of :func:`figures_for`.
MAX_CURVES = 12
FORMATS = ("png", "svg", "pdf")


def _slug(text: str) -> str:
    """A file-name-safe form of ``text``: ``readahead_kb`` → ``readahead-kb``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _x(axes: Sequence[str], by: str = "", preferred: str = "iodepth") -> str:
    """The x axis for a line figure comparing ``by``: ``preferred`` when it varies, else another that does."""
    return main_axis([a for a in axes if a != by], preferred) or by


def _curves_per_panel(totals: pd.DataFrame) -> int:
    panels, lines = percentile_layout(totals)
    return max(dt.distinct(dt.select(totals, panels, panel), lines) for panel in dt.combos(totals, panels))


def figures_for(df: pd.DataFrame, telemetry: pd.DataFrame | None = None) -> dict[str, Figure]:
    """Every figure that fits the run's axes, keyed by a short name usable as a file name.

    ================================  ==================================================
    name                              drawn when
    ================================  ==================================================
    ``local-vs-remote``               ``binding`` and another axis vary
    ``smt``                           ``placement`` has same-core or diff-cores points
                                      and another axis varies
    ``sweep-<x>``                     something varies and neither of the above is drawn
    ``heatmap-iops``                  ``iodepth`` and ``numjobs`` both vary
                                      (``heatmap-bw-bytes`` for large I/O)
    ``latency-percentiles``           ``clat_p*_us`` hold data (at most
                                      :data:`MAX_CURVES` curves a panel)
    ``cpu-per-io-<setting>``          scheduler, readahead_kb or direct varies
    ``cpu-where``                     ``telemetry`` is given and holds CPU samples
    ``device-vs-fio``                 ``telemetry`` is given and points have ``dev_iops``
    ``busiest-threads``               ``telemetry`` is given and holds thread samples
    ``scale-out``                     ``host_count`` varies
    ``hosts``                         some point ran on several hosts at once
    ================================  ==================================================

    Parameters
    ----------
    df
        A tidy frame.
    telemetry
        The run's :func:`iobench.telemetry`, for the figures that explain the
        points (``iobench report`` passes it; the figures drawn at the end of a
        run leave it out, to keep the run short).

    Returns
    -------
    dict of str to matplotlib.figure.Figure
        Empty when no point finished ``ok``.
    """
    return {name: build() for name, build in figure_builders(df, telemetry).items()}


def figure_builders(
    df: pd.DataFrame, telemetry: pd.DataFrame | None = None
) -> dict[str, Callable[[], Figure]]:
    """The figures :func:`figures_for` draws, each as a function that draws it when called.

    Deciding which figures fit is cheap; drawing is not, and this lets a caller
    draw them where it likes (:func:`iobench.plots.files.write_figures` draws
    them into files). The point totals are computed once for all of them.
    """
    if dt.data_rows(df).empty:
        return {}
    with dt.shared_totals() as memo:
        chosen = _chosen(df, telemetry)

    def builder(draw: Callable[[], Figure]) -> Callable[[], Figure]:
        def build() -> Figure:
            with dt.shared_totals(memo):
                return draw()

        return build

    return {name: builder(draw) for name, draw in chosen.items()}


def _chosen(df: pd.DataFrame, telemetry: pd.DataFrame | None) -> dict[str, Callable[[], Figure]]:
    totals = dt.point_totals(df)
    axes = dt.splitting_axes(totals, [])
    figures: dict[str, Callable[[], Figure]] = {}
    y = dt.throughput_metric(totals)
    # Lines per binding (placement) need an x of their own: when it is the only axis, the sweep draws it.
    if dt.varies(totals, "binding") and (x := _x(axes, "binding")) != "binding":
        figures["local-vs-remote"] = functools.partial(local_vs_remote, df, x=x, y=y)
    placements = set(totals["placement"].dropna().astype(str)) if "placement" in totals else set()
    if placements & {"same-core", "diff-cores"} and (x := _x(axes, "placement", "numjobs")) != "placement":
        figures["smt"] = functools.partial(smt, df, x=x, y=y)
    if dt.varies(totals, "host_count"):
        figures["scale-out"] = functools.partial(scale_out, df)
    if axes and not figures:
        figures[f"sweep-{_slug(_x(axes))}"] = functools.partial(sweep, df)
    if dt.varies(totals, "iodepth") and dt.varies(totals, "numjobs"):
        figures[f"heatmap-{_slug(y)}"] = functools.partial(heatmap, df, y)
    if dt.percentile_columns(totals) and _curves_per_panel(totals) <= MAX_CURVES:
        figures["latency-percentiles"] = functools.partial(latency_percentiles, df)
    setting = next((c for c in CPU_SETTINGS if c in axes), None)
    if setting and "cpu_us_per_io" in totals and totals["cpu_us_per_io"].notna().any():
        figures[f"cpu-per-io-{_slug(setting)}"] = functools.partial(cpu_per_io, df, setting)
    if "hosts" in totals and totals["hosts"].fillna(1).gt(1).any() and not host_totals(df).empty:
        figures["hosts"] = functools.partial(hosts, df)
    if telemetry is not None and not telemetry.empty:
        figures.update(_telemetry_figures(df, telemetry, totals))
    return figures


def _telemetry_figures(
    df: pd.DataFrame, telemetry: pd.DataFrame, totals: pd.DataFrame
) -> dict[str, Callable[[], Figure]]:
    figures: dict[str, Callable[[], Figure]] = {}
    sources = set(telemetry["source"].dropna())
    if "cpu" in sources:
        figures["cpu-where"] = functools.partial(cpu_where, df, telemetry)
    if "dev_iops" in totals and totals["dev_iops"].notna().any():
        figures["device-vs-fio"] = functools.partial(device_vs_fio, df)
    if "thread" in sources:
        figures["busiest-threads"] = functools.partial(busiest_threads, df, telemetry)
    return figures


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` in the format its suffix names, without a creation date (same run, same bytes).

    Parameters
    ----------
    fig
        The figure.
    path
        Where to write it: a ``.png`` (at 150 dpi), ``.svg`` or ``.pdf`` file.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    ResultsError
        The suffix is not one of :data:`FORMATS`.
    """
    target = Path(path)
    fmt = target.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ResultsError(f"{target}: cannot tell the figure format; name the file .png, .svg or .pdf")
    metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(fmt, {})
    with rc_context({"svg.hashsalt": "iobench"}):  # fixed SVG element ids
        fig.savefig(target, dpi=st.DPI, metadata=metadata)
    return target


def draw(
    kind: str,
    df: pd.DataFrame | str | os.PathLike[str],
    *,
    x: str | None = None,
    y: str | None = None,
    hue: str | None = None,
    col: str | None = None,
    row: str | None = None,
) -> Figure:
    """One figure of ``kind``, the roles passed through as they are (``iobench plot``).

    Parameters
    ----------
    kind
        A key of :data:`KINDS`.
    df
        A tidy frame; for the kinds of :data:`RUN_KINDS` (``timeline``), the run directory.
    x, y, hue, col, row
        The figure's roles (docs/figures.md); None leaves a role to the figure.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    PlotOptionError
        A column does not fit its role, or the kind fixes a role that was given.
    ResultsError
        Unknown kind, or a frame kind given a run directory.
    """
    if kind not in KINDS:
        raise ResultsError(f"unknown figure kind {kind!r}; use one of {', '.join(KINDS)}")
    if kind not in RUN_KINDS and not isinstance(df, pd.DataFrame):
        raise ResultsError(f"figure kind {kind!r} draws a frame: load the run first (iobench.load)")
    given = {"x": x, "y": y, "hue": hue, "col": col, "row": row}
    return KINDS[kind](df, **{role: value for role, value in given.items() if value is not None})

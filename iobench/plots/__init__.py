"""Figures from tidy frames.

Every figure takes the tidy frame of :func:`iobench.load`, the same five roles
— ``x`` (the horizontal axis, a category), ``y`` (the metric), ``hue`` (a
colour per value), ``col`` and ``row`` (a column, a row of panels per value) —
an optional ``ax=`` to draw into, and returns a
:class:`matplotlib.figure.Figure`; pyplot is never imported, so figures work
headless and in notebooks alike. A role a figure fixes (the percentile on the
latency figure's x) cannot be chosen; a column that does not fit its role is
refused before anything is drawn (:mod:`iobench.plots.options`). Only rows
with status ``ok`` become data. A point's jobs and targets are combined first,
as everywhere in iobench (:func:`iobench.point_totals`: fio's group
definition), then its repeats: the mean, with 95 % confidence bars when there
are two repeats or more. Axes that vary but have no role get panels or line
styles of their own; nothing but repeats is averaged. No figure is larger
than :data:`~iobench.plots.limits.MAX_PIXELS` a side: past a number of lines,
values or panels it keeps some and says which in its caption
(:mod:`iobench.plots.limits`).

:func:`timeline` draws a run's points over time from fio's logs (:func:`iobench.timeseries`).
:func:`figures_for` picks the figures that fit a run, :func:`default_figures`
writes them, and :data:`KINDS` maps the names ``iobench plot`` takes to the
functions. docs/figures.md describes every figure and how to add one.

>>> import iobench
>>> df = iobench.load("results/numa-20240101-120000")   # doctest: +SKIP
>>> iobench.plots.local_vs_remote(df)                    # doctest: +SKIP
>>> for name, fig in iobench.plots.figures_for(df).items():   # doctest: +SKIP
...     fig.savefig(f"{name}.svg")
"""

from __future__ import annotations

from iobench.plots.cpu import cpu_per_io
from iobench.plots.figures import KINDS, draw, figures_for, save_figure
from iobench.plots.files import default_figures
from iobench.plots.heatmap import heatmap
from iobench.plots.hostvalues import hosts
from iobench.plots.latency import latency_percentiles
from iobench.plots.lineplots import plot, sweep
from iobench.plots.numa import local_vs_remote, smt
from iobench.plots.options import ROLES
from iobench.plots.plotdata import over_repeats, throughput_metric
from iobench.plots.plotstyle import LABELS, SCALES, caption
from iobench.plots.ratios import ratios
from iobench.plots.resources import busiest_threads, cpu_where, device_vs_fio
from iobench.plots.scaleout import scale_out
from iobench.plots.timeline import timeline
from iobench.results.points import parameter_columns, point_totals

__all__ = [
    "KINDS",
    "LABELS",
    "ROLES",
    "SCALES",
    "busiest_threads",
    "caption",
    "cpu_per_io",
    "cpu_where",
    "default_figures",
    "device_vs_fio",
    "draw",
    "figures_for",
    "heatmap",
    "hosts",
    "latency_percentiles",
    "local_vs_remote",
    "over_repeats",
    "parameter_columns",
    "plot",
    "point_totals",
    "ratios",
    "save_figure",
    "scale_out",
    "smt",
    "sweep",
    "throughput_metric",
    "timeline",
]

"""What every figure shares: labels with units, value texts, colours, the panel grid, legend and caption."""

from __future__ import annotations

import itertools
import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter

from iobench.matrix.display import format_value
from iobench.plots.limits import MAX_PANELS, MAX_PIXELS
from iobench.plots.plotdata import as_number, key, percentile_of
from iobench.results.points import outcomes
from iobench.words import counted

#: Width and height of one panel, in inches; figures are saved at :data:`DPI`.
PANEL_WIDTH = 6.5
PANEL_HEIGHT = 3.3
DPI = 150
#: Font sizes in points: nothing drawn is smaller than ``SMALL``.
SMALL = 9.0
MEDIUM = 10.0
LARGE = 11.5

#: Axis labels with units; ``clat_p<N>_us`` columns are labelled by :func:`label` from their name.
LABELS: dict[str, str] = {
    "iops": "IOPS",
    "bw_bytes": "Throughput (MiB/s)",
    "io_bytes": "Data transferred (GiB)",
    "runtime_ms": "Runtime (ms)",
    "lat_mean_us": "Mean latency (µs)",
    "clat_mean_us": "Mean completion latency (µs)",
    "slat_mean_us": "Mean submission latency (µs)",
    "usr_cpu": "User CPU (%)",
    "sys_cpu": "System CPU (%)",
    "ctx": "Context switches",
    "cpu_us_per_io": "CPU per I/O (µs)",
    "inflight": "I/Os in flight (Little's law)",
    "iodepth": "I/O depth",
    "numjobs": "Jobs",
    "bs": "Block size",
    "binding": "NUMA binding",
    "placement": "CPU placement",
    "scheduler": "I/O scheduler",
    "readahead_kb": "Readahead",
    "direct": "I/O mode",
    "direction": "Direction",
    "target": "Target",
    "run_id": "Run",
    "source": "fio output",
}
#: Factor from a metric's frame unit to its axis unit.
SCALES: dict[str, float] = {"bw_bytes": 1 / 2**20, "io_bytes": 1 / 2**30}
#: Metrics whose values read best with k/M suffixes.
COMPACT = frozenset({"iops", "ctx"})
#: Axes whose values say what they are even in a title (``buffered``, ``O_DIRECT``).
SELF_EXPLAINING = frozenset({"direct", "source"})
#: Axes whose values read on their own in a legend (``local``, not ``binding=local``).
BARE = frozenset({"binding", "placement", "scheduler", "direct", "direction", "target", "run_id", "source"})

BINDING_COLOURS = {"local": "#1f77b4", "remote": "#d62728", "none": "#7f7f7f"}
PLACEMENT_COLOURS = {"same-core": "#ff7f0e", "diff-cores": "#2ca02c", "node": "#7f7f7f"}
#: tab10 with its grey last: grey means "no binding".
CYCLE = tuple("#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b #e377c2 #17becf #bcbd22 #7f7f7f".split())
_NODE_CYCLE = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def label(column: str) -> str:
    """The axis label of ``column``, with its unit."""
    percentile = percentile_of(column)
    if percentile is not None:
        return f"p{percentile:g} completion latency (µs)"
    return LABELS.get(column, column)


def short_label(column: str) -> str:
    """The label of ``column`` without its unit, for titles (``Mean latency``)."""
    return label(column).split(" (")[0]


def in_sentence(text: str) -> str:
    """``text`` lower-cased for the middle of a sentence, acronyms kept (``Jobs`` → ``jobs``, ``I/O depth`` stays)."""
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        return text[0].lower() + text[1:]
    return text


def headline(metrics: Sequence[str], x: str = "") -> str:
    """A figure's title from what it draws: ``IOPS and mean latency vs I/O depth``."""
    names = [short_label(m) for m in metrics]
    text = " and ".join([names[0], *map(in_sentence, names[1:])])
    return f"{text} vs {in_sentence(short_label(x))}" if x else text


def scale(column: str) -> float:
    """The factor from ``column``'s unit in the frame to its unit on an axis."""
    return SCALES.get(column, 1.0)


def metric_text(column: str, value: float) -> str:
    """A metric value (already scaled) as written on a tick, cell or bar: ``123k`` for IOPS, ``1,953`` or ``4.1`` else."""
    if not math.isfinite(value):
        return "—"
    if column in COMPACT:
        for divisor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(value) >= divisor * 0.9995:
                return f"{value / divisor:.3g}{suffix}"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def metric_ticks(axis: Any, column: str) -> None:
    """Format the ticks of ``axis`` (an x or y axis object) with :func:`metric_text`."""
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: metric_text(column, float(v))))


def describe(
    columns: Sequence[str],
    values: Sequence[object],
    *,
    bare: frozenset[str] = BARE,
    names: Mapping[str, str] | None = None,
) -> str:
    """``local · bs=64k``: a legend entry or (with ``bare=SELF_EXPLAINING``) a panel title.

    ``names`` replaces value texts (``same-core`` → a longer explanation).
    """
    parts = []
    for column, value in zip(columns, values, strict=True):
        text = format_value(column, value)
        text = (names or {}).get(text, text)
        parts.append(text if column in bare else f"{column}={text}")
    return " · ".join(parts)


def is_numeric(values: Sequence[object]) -> bool:
    """Whether every value is a number (an ordered axis: lines between its points mean something)."""
    return all(as_number(v) is not None for v in values)


def palette(columns: Sequence[str], combos: Sequence[tuple[object, ...]]) -> list[str]:
    """One colour per combination of ``columns``: fixed ones for bindings and placements, the tab10 cycle otherwise."""
    column = columns[0] if len(columns) == 1 else ""
    fixed = {"binding": BINDING_COLOURS, "placement": PLACEMENT_COLOURS}.get(column, {})
    nodes = itertools.cycle(_NODE_CYCLE)
    out = []
    for i, combo in enumerate(combos):
        text = str(combo[0]) if column else ""
        if text in fixed:
            out.append(fixed[text])
        elif column == "binding" and text.startswith("node:"):
            out.append(next(nodes))
        else:
            out.append(CYCLE[i % len(CYCLE)])
    return out


def error_bars(values: Any, half_widths: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
    """``yerr`` of 95 % CI bars around ``values``: below, never past zero (no count, rate or time is
    negative; an interval reaching zero is clipped there); NaN half-widths draw no bar."""
    ys = np.asarray(values, dtype=float)
    ci = np.nan_to_num(np.asarray(half_widths, dtype=float))
    return np.vstack([np.minimum(ci, np.clip(ys, 0, None)), ci])


def share_y(axes: Sequence[Axes]) -> None:
    """Give ``axes`` (panels compared with one another: one metric) one y range, the union of theirs."""
    if len(axes) > 1:
        low = min(axis.get_ylim()[0] for axis in axes)
        high = max(axis.get_ylim()[1] for axis in axes)
        for axis in axes:
            axis.set_ylim(low, high)


def root_figure(axis: Axes) -> Figure:
    """The Figure ``axis`` belongs to."""
    fig = axis.get_figure(root=True)
    if not isinstance(fig, Figure):
        raise TypeError("the Axes is not part of a Figure")
    return fig


class PlainTextFigure(Figure):
    """A Figure whose texts are drawn as written, never as TeX.

    Its texts come from run directories (a parameter's value, a target's
    path, a host's name): a ``$…$`` in one would be parsed by mathtext, which
    fails on what it cannot parse or draws something other than what was
    written. Every text, those made while drawing (tick labels) included, is
    drawn with ``text.parse_math`` off.
    """

    def draw(self, renderer: Any) -> None:
        with rc_context({"text.parse_math": False}):
            for text in self.findobj(Text):
                text.set_parse_math(False)
            super().draw(renderer)


def new_figure(width: float, height: float) -> Figure:
    """A Figure of ``width`` × ``height`` inches, no side over :data:`~iobench.plots.limits.MAX_PIXELS` at :data:`DPI`."""
    limit = MAX_PIXELS / DPI
    return PlainTextFigure(figsize=(min(width, limit), min(height, limit)), dpi=DPI, layout="constrained")


@dataclass(frozen=True)
class Grid:
    """The panels of a figure: its Figure, per panel shown its Axes (top to bottom) and values, what was
    left out, and the index in the given panels of each shown."""

    fig: Figure
    stacks: list[list[Axes]]
    panels: list[tuple[object, ...]]
    note: str
    indices: list[int]


#: Room for the title, the legend and the caption, in inches, beside the panels.
FRAME_HEIGHT = 0.9


def panel_grid(
    panels: Sequence[tuple[object, ...]],
    columns: Sequence[str],
    *,
    rows: int = 0,
    max_cols: int,
    rows_each: int = 1,
    width: float = PANEL_WIDTH,
    height: float = PANEL_HEIGHT,
) -> Grid:
    """A Figure with a column of ``rows_each`` Axes per panel.

    ``panels`` are combinations of ``columns`` in reading order; the first
    ``rows`` columns are the ``row`` facet: with them each of their values gets
    a row of panels and the other columns a column each (a grid); without, the
    panels wrap after ``max_cols`` a row. Each panel is titled with its values.
    Panels past :data:`~iobench.plots.limits.MAX_PANELS`, or that would take
    the figure past :data:`~iobench.plots.limits.MAX_PIXELS`, are left out
    (the first are kept) and :attr:`Grid.note` says so. The Axes
    sit in a subfigure, so that the legend above them (:func:`_legend_outside`)
    and the Figure's title each get their own room.
    """
    limit = MAX_PIXELS / DPI
    fit_cols = max(1, int(limit // width))
    fit_rows = max(1, int((limit - FRAME_HEIGHT) // (height * rows_each)))
    keyed = [tuple(key(v) for v in panel) for panel in panels]
    if rows:
        col_keys = list(dict.fromkeys(k[rows:] for k in keyed))[: min(fit_cols, MAX_PANELS)]
        row_keys = list(dict.fromkeys(k[:rows] for k in keyed))[: min(fit_rows, MAX_PANELS // len(col_keys))]
        where = {
            k: (row_keys.index(k[:rows]), col_keys.index(k[rows:]))
            for k in keyed
            if k[:rows] in row_keys and k[rows:] in col_keys
        }
        shown = [i for i, k in enumerate(keyed) if k in where]
        n_rows, n_cols = len(row_keys), len(col_keys)
        places = [where[keyed[i]] for i in shown]
    else:
        n_cols = max(1, min(len(panels), max_cols, fit_cols))
        shown = list(range(min(len(panels), n_cols * fit_rows, MAX_PANELS)))
        n_rows = max(1, math.ceil(len(shown) / n_cols))
        places = [divmod(i, n_cols) for i in shown]
    fig = new_figure(width * n_cols, height * n_rows * rows_each + FRAME_HEIGHT)
    grid = fig.subfigures(1, 1, squeeze=False)[0][0].subplots(n_rows * rows_each, n_cols, squeeze=False)
    for axis in grid.flat:
        axis.tick_params(labelsize=SMALL)
        axis.xaxis.label.set_size(MEDIUM)
        axis.yaxis.label.set_size(MEDIUM)
        axis.set_visible(False)
    stacks = []
    for index, (row, col) in zip(shown, places, strict=True):
        stack = [grid[row * rows_each + r][col] for r in range(rows_each)]
        for axis in stack:
            axis.set_visible(True)
        if columns:
            stack[0].set_title(describe(columns, panels[index], bare=SELF_EXPLAINING), fontsize=MEDIUM)
        stacks.append(stack)
    note = ""
    if len(shown) < len(panels):
        note = f"{len(shown)} of {len(panels)} panels shown (the first by {', '.join(columns)})"
    return Grid(fig, stacks, [panels[i] for i in shown], note, shown)


def finish(fig: Figure, df: pd.DataFrame, title: str, notes: str | Sequence[str]) -> None:
    """Title ``fig``, put one legend above its panels and the caption (:func:`caption` plus ``notes``) below."""
    fig.suptitle(title, fontsize=LARGE)
    _legend_outside(fig)
    text = caption(df, notes=["; ".join(n for n in ([notes] if isinstance(notes, str) else notes) if n)])
    width_chars = max(40, int(fig.get_figwidth() * 72 / (SMALL * 0.55)))
    wrapped = "\n".join(textwrap.wrap(text, width_chars, break_on_hyphens=False))
    fig.supxlabel(wrapped, x=0.01, ha="left", fontsize=SMALL, color="0.3")


def _legend_outside(fig: Figure) -> None:
    """One legend for every panel, above them (under the title), so it never covers data."""
    entries: dict[str, Any] = {}
    for axis in fig.axes:
        for handle, text in zip(*axis.get_legend_handles_labels(), strict=True):
            entries.setdefault(text, handle)
    if not entries:
        return
    entry_points = SMALL * (0.65 * max(map(len, entries)) + 6)
    per_row = max(1, int(fig.get_figwidth() * 72 / entry_points))
    panels = fig.subfigs[0] if fig.subfigs else fig
    panels.legend(
        list(entries.values()),
        list(entries),
        loc="outside upper center",
        ncols=min(len(entries), per_row),
        fontsize=SMALL,
        frameon=False,
    )


def repeats_note(summary: pd.DataFrame, metrics: Sequence[str], *, bars: bool = True) -> str:
    """``mean of 3 repeats, bars: 95 % CI`` (or ``1 run per point``) for the caption."""
    counts = sorted(
        {int(n) for m in metrics if f"{m}_n" in summary for n in summary[f"{m}_n"].dropna() if n > 0}
    )
    if counts in ([], [1]):
        return "1 run per point"
    span = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    return f"mean of {span} repeats" + (", bars: 95 % CI" if bars else "")


def _distinct_text(df: pd.DataFrame, column: str, fallback: object) -> list[str]:
    found = sorted({str(v) for v in df[column].dropna().unique()}) if column in df else []
    return found or ([str(fallback)] if fallback else [])


def caption(df: pd.DataFrame, *, notes: Sequence[str] = ()) -> str:
    """The machine line of a figure: host, CPU model, kernel, fio version, then ``notes``.

    Facts come from the frame (``host``, ``fio_version``) and, when present, from
    ``df.attrs["machine"]``, where :func:`iobench.load` puts them (``cpu_model``, ``kernel``). Several hosts or fio versions are all named: a frame mixing
    them should say so. Runs that did not finish ``ok`` are counted.

    Parameters
    ----------
    df
        A tidy frame.
    notes
        Further parts, e.g. how many repeats each point is the mean of.

    Returns
    -------
    str
        The parts joined with `` · ``; empty when nothing is known.
    """
    machine = df.attrs.get("machine") or {}
    parts = [
        ", ".join(_distinct_text(df, "host", machine.get("host"))),
        str(machine.get("cpu_model") or ""),
        f"Linux {machine['kernel']}" if machine.get("kernel") else "",
        ", ".join(_distinct_text(df, "fio_version", machine.get("fio_version"))),
    ]
    counts = outcomes(df)
    failed = sum(n for status, n in counts.items() if status not in ("ok", "skipped", "same"))
    if failed:
        parts.append(f"{counted(failed, 'run')} failed (not shown)")
    if counts.get("skipped"):
        parts.append(f"{counted(counts['skipped'], 'point')} skipped")
    if counts.get("same"):
        parts.append(f"{counted(counts['same'], 'point')} the same as another here (run once)")
    parts.append(validity_note(df))
    return " · ".join(p for p in (*parts, *notes) if p)


def validity_note(df: pd.DataFrame) -> str:
    """The caption's mark of points a validity check doubts: ``⚠ validity: point 3 page-cache; …``.

    Empty when the frame has no ``validity`` column or nothing was found
    (docs/validity.md). At most four points are named, then how many more.
    """
    if "validity" not in df or "point" not in df:
        return ""
    found = df[df["validity"].fillna("").ne("")]
    if found.empty:
        return ""
    per_point: dict[object, list[str]] = {}
    for point, codes in zip(found["point"], found["validity"], strict=True):
        known = per_point.setdefault(point, [])
        known += [c for c in str(codes).split() if c not in known]
    ordered = sorted(per_point.items(), key=lambda item: (str(item[0]).isdigit(), str(item[0]).zfill(12)))
    shown = [f"point {p} {' '.join(c)}" for p, c in ordered]
    more = f"; {len(shown) - 4} more points" if len(shown) > 4 else ""
    return "⚠ validity: " + "; ".join(shown[:4]) + more

"""Labels with units, value formatting, colours, axis scales and the caption shared by every figure."""

from __future__ import annotations

import math
import numbers
import re
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import PurePath
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator

from iobench.units import format_size

#: Width and height of one panel, in inches; figures are saved at :data:`DPI`.
PANEL_WIDTH = 6.5
PANEL_HEIGHT = 3.3
DPI = 150
#: Font sizes in points: nothing drawn is smaller than ``SMALL``.
SMALL = 9.0
MEDIUM = 10.0
LARGE = 11.5

LABELS: dict[str, str] = {
    "iops": "IOPS",
    "bw_bytes": "Throughput (MiB/s)",
    "io_bytes": "Data transferred (GiB)",
    "runtime_ms": "Runtime (ms)",
    "lat_mean_us": "Mean latency (µs)",
    "clat_mean_us": "Mean completion latency (µs)",
    "slat_mean_us": "Mean submission latency (µs)",
    "clat_p50_us": "p50 completion latency (µs)",
    "clat_p90_us": "p90 completion latency (µs)",
    "clat_p99_us": "p99 completion latency (µs)",
    "clat_p99_9_us": "p99.9 completion latency (µs)",
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
#: Metrics whose ticks and cell values read best with k/M suffixes.
COMPACT = frozenset({"iops", "ctx"})
#: Axes drawn on a log2 scale with their values as ticks.
LOG2 = frozenset({"iodepth", "numjobs", "bs"})
#: Numeric axes drawn evenly spaced, as categories (0 does not fit a log scale; 0/1 are modes).
CATEGORICAL = frozenset({"readahead_kb", "direct"})
#: Axes whose values say what they are even in a title (``buffered``, ``O_DIRECT``).
SELF_EXPLAINING = frozenset({"direct", "source"})
#: Axes whose values read on their own in a legend (``local``, not ``binding=local``).
BARE = frozenset({"binding", "placement", "scheduler", "direct", "direction", "target", "run_id", "source"})

BINDING_COLOURS = {"local": "#1f77b4", "remote": "#d62728", "none": "#7f7f7f"}
PLACEMENT_COLOURS = {"same-core": "#ff7f0e", "diff-cores": "#2ca02c", "node": "#7f7f7f"}
CYCLE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)
_NODE_CYCLE = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_PERCENTILE_LABEL = re.compile(r"^clat_p(\d+)(?:_(\d+))?_us$")


def label(column: str) -> str:
    """The axis label of ``column``, with its unit."""
    if column in LABELS:
        return LABELS[column]
    match = _PERCENTILE_LABEL.match(column)
    if match:
        whole, fraction = match.groups()
        return f"p{whole}{'.' + fraction if fraction else ''} completion latency (µs)"
    return column


def short_label(column: str) -> str:
    """The label of ``column`` without its unit, for titles (``Mean latency``)."""
    return re.sub(r" \([^)]*\)$", "", label(column))


def in_sentence(text: str) -> str:
    """``text`` lower-cased for the middle of a sentence, acronyms kept (``Jobs`` → ``jobs``, ``I/O depth`` stays)."""
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        return text[0].lower() + text[1:]
    return text


def scale(column: str) -> float:
    """The factor from ``column``'s unit in the frame to its unit on an axis."""
    return SCALES.get(column, 1.0)


def compact(value: float) -> str:
    """``value`` in three significant digits with a k, M or G suffix (``123456`` → ``"123k"``)."""
    if not math.isfinite(value):
        return "—"
    size = abs(value)
    for divisor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if size >= divisor * 0.9995:
            return f"{value / divisor:.3g}{suffix}"
    return f"{value:.3g}"


def plain(value: float) -> str:
    """``value`` with thousands separators when large, shortest form when small."""
    if not math.isfinite(value):
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def metric_text(column: str, value: float) -> str:
    """A metric value (already scaled) as written on a tick, a cell or a bar."""
    return compact(value) if column in COMPACT else plain(value)


def metric_ticks(axis: Any, column: str) -> None:
    """Format the ticks of ``axis`` (an x or y axis object) for the metric ``column``."""
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: metric_text(column, float(v))))


def is_missing(value: object) -> bool:
    """Whether ``value`` is NA/None/NaN."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float | np.floating) and math.isnan(value)


def format_value(column: str, value: object) -> str:
    """A parameter value as a reader knows it: ``bs`` 4096 → ``4k``, ``direct`` 1 → ``O_DIRECT``."""
    if is_missing(value):
        return "n/a"
    number = _as_number(value)
    if column == "bs" and number is not None and number == int(number):
        return format_size(int(number))
    if column == "direct" and number in (0, 1):
        return "O_DIRECT" if number == 1 else "buffered"
    if column == "readahead_kb" and number is not None:
        return f"{number / 1024:g} MiB" if number >= 1024 and number % 1024 == 0 else f"{number:g} KiB"
    if column == "source":
        return PurePath(str(value)).name
    if number is not None and not isinstance(value, bool):
        return f"{int(number)}" if number == int(number) else f"{number:g}"
    return str(value)


def _as_number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def series_label(columns: Sequence[str], values: Sequence[object]) -> str:
    """The legend text of one line: ``local · bs=64k``."""
    parts = [
        format_value(c, v) if c in BARE else f"{c}={format_value(c, v)}"
        for c, v in zip(columns, values, strict=True)
    ]
    return " · ".join(parts)


def key(value: object) -> object:
    """A hashable stand-in for ``value`` that equal values share (``np.int64(4)``, ``4`` and ``4.0`` alike)."""
    if is_missing(value):
        return ("<NA>",)
    number = _as_number(value)
    return number if number is not None else str(value)


def _order_key(column: str, value: object) -> tuple[int, float, str]:
    if is_missing(value):
        return (9, 0.0, "")
    text = str(value)
    if column == "binding":
        fixed = {"local": 0, "remote": 1, "none": 2}
        if text in fixed:
            return (fixed[text], 0.0, "")
        node = re.fullmatch(r"node:(\d+)", text)
        return (3, float(node.group(1)), "") if node else (4, 0.0, text)
    if column == "placement":
        return ({"same-core": 0, "diff-cores": 1, "node": 2}.get(text, 3), 0.0, text)
    if column == "scheduler" and text == "none":
        return (0, 0.0, "")
    number = _as_number(value)
    if number is not None:
        return (1, number, "")
    return (1, 0.0, text)


def ordered(column: str, values: Iterable[object]) -> list[object]:
    """The distinct ``values`` of ``column`` in reading order (local, remote, none, node:N; numbers ascending)."""
    seen: dict[object, object] = {}
    for value in values:
        seen.setdefault(key(value), value)
    return sorted(seen.values(), key=lambda v: _order_key(column, v))


def colours(column: str | None, values: Sequence[object]) -> list[str]:
    """One colour per value: fixed ones for bindings and placements, the tab10 cycle otherwise."""
    out: list[str] = []
    nodes = 0
    for i, value in enumerate(values):
        text = str(value)
        if column == "binding" and text in BINDING_COLOURS:
            out.append(BINDING_COLOURS[text])
        elif column == "binding" and text.startswith("node:"):
            out.append(_NODE_CYCLE[nodes % len(_NODE_CYCLE)])
            nodes += 1
        elif column == "placement" and text in PLACEMENT_COLOURS:
            out.append(PLACEMENT_COLOURS[text])
        else:
            out.append(CYCLE[i % len(CYCLE)])
    return out


def is_numeric(values: Sequence[object]) -> bool:
    """Whether every value is a number (an ordered axis: lines between its points mean something)."""
    return all(_as_number(v) is not None for v in values)


def x_positions(column: str, values: Sequence[object]) -> dict[object, float] | None:
    """Evenly spaced positions for a categorical x axis, keyed by :func:`key`; None for a numeric one."""
    if is_numeric(values) and column not in CATEGORICAL:
        return None
    return {key(v): float(i) for i, v in enumerate(values)}


def setup_x(axis: Axes, column: str, values: Sequence[object], positions: dict[object, float] | None) -> None:
    """Label the x axis, log2-scale iodepth/numjobs/bs, and put a tick on every value drawn."""
    axis.set_xlabel(label(column))
    names = [format_value(column, v) for v in values]
    if positions is not None:
        axis.set_xticks([positions[key(v)] for v in values], names)
        axis.set_xlim(-0.5, len(values) - 0.5)
        return
    numbers_ = [n for v in values if (n := _as_number(v)) is not None]
    if column in LOG2 and numbers_ and min(numbers_) > 0:
        axis.set_xscale("log", base=2)
        if len(numbers_) == 1:
            axis.set_xlim(numbers_[0] / 2, numbers_[0] * 2)
    if len(numbers_) <= 16:
        axis.set_xticks(numbers_, names)
        axis.xaxis.set_minor_locator(NullLocator())


def x_value(value: object, positions: dict[object, float] | None) -> float:
    """Where ``value`` goes on the x axis."""
    if positions is not None:
        return positions[key(value)]
    number = _as_number(value)
    return math.nan if number is None else number


def root_figure(axis: Axes) -> Figure:
    """The Figure ``axis`` belongs to."""
    fig = axis.get_figure(root=True)
    if not isinstance(fig, Figure):
        raise TypeError("the Axes is not part of a Figure")
    return fig


def new_figure(
    rows: int, cols: int, *, width: float = PANEL_WIDTH, height: float = PANEL_HEIGHT
) -> tuple[Figure, np.ndarray[Any, Any]]:
    """A constrained-layout Figure with a ``rows`` × ``cols`` grid of Axes (always 2-D).

    The Axes sit in a subfigure, so that a legend above them (see
    :func:`legend_outside`) and the Figure's title each get their own room.
    """
    fig = Figure(figsize=(width * cols, height * rows + 0.9), dpi=DPI, layout="constrained")
    panels = fig.subfigures(1, 1, squeeze=False)[0][0]
    grid = panels.subplots(rows, cols, squeeze=False)
    for axis in grid.flat:
        axis.tick_params(labelsize=SMALL)
        axis.xaxis.label.set_size(MEDIUM)
        axis.yaxis.label.set_size(MEDIUM)
    return fig, grid


def machine_info(df: pd.DataFrame) -> dict[str, Any]:
    """The run's machine facts from ``df.attrs`` (``machine``, or a ``manifest`` holding one)."""
    attrs = df.attrs
    machine = attrs.get("machine")
    if not isinstance(machine, dict):
        manifest = attrs.get("manifest")
        machine = manifest.get("machine") if isinstance(manifest, dict) else None
    return dict(machine) if isinstance(machine, dict) else {}


def _distinct_text(df: pd.DataFrame, column: str) -> list[str]:
    if column not in df:
        return []
    return sorted({str(v) for v in df[column].dropna().unique()})


def caption(df: pd.DataFrame, *, notes: Sequence[str] = ()) -> str:
    """The machine line of a figure: host, CPU model, kernel, fio version, then ``notes``.

    Facts come from the frame (``host``, ``fio_version``) and, when present, from
    ``df.attrs["machine"]`` or ``df.attrs["manifest"]["machine"]`` (``cpu_model``,
    ``kernel``). Several hosts or fio versions are all named: a frame mixing
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
    machine = machine_info(df)
    hosts = _distinct_text(df, "host") or ([str(machine["host"])] if machine.get("host") else [])
    versions = _distinct_text(df, "fio_version") or (
        [str(machine["fio_version"])] if machine.get("fio_version") else []
    )
    parts = [", ".join(hosts)] if hosts else []
    if machine.get("cpu_model"):
        parts.append(str(machine["cpu_model"]))
    if machine.get("kernel"):
        parts.append(f"Linux {machine['kernel']}")
    if versions:
        parts.append(", ".join(versions))
    if "status" in df:
        bad = df[df["status"] != "ok"]
        keys = [c for c in ("run_id", "point", "repeat") if c in bad]
        failed = len(bad[keys].drop_duplicates()) if keys else len(bad)
        if failed:
            parts.append(f"{failed} run{'s' if failed != 1 else ''} not ok (not shown)")
    return " · ".join([*parts, *notes])


def add_caption(fig: Figure, text: str) -> None:
    """Write ``text`` under the panels, wrapped to the figure's width, where the layout keeps room for it."""
    if not text:
        return
    width_chars = max(40, int(fig.get_figwidth() * 72 / (SMALL * 0.55)))
    wrapped = "\n".join(textwrap.wrap(text, width_chars, break_on_hyphens=False))
    fig.supxlabel(wrapped, x=0.01, ha="left", fontsize=SMALL, color="0.3")


def repeats_note(summary: pd.DataFrame, metrics: Sequence[str], *, bars: bool = True) -> str:
    """``mean of 3 repeats, bars: 95 % CI`` (or ``1 run per point``) for the caption."""
    counts = sorted(
        {int(n) for m in metrics if f"{m}_n" in summary for n in summary[f"{m}_n"].dropna() if n > 0}
    )
    if not counts or counts == [1]:
        return "1 run per point"
    span = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    return f"mean of {span} repeats" + (", bars: 95 % CI" if bars else "")


def legend_outside(fig: Figure, axes: Sequence[Axes]) -> None:
    """One legend for every panel, above them (under the title), so it never covers data."""
    handles: list[Any] = []
    texts: list[str] = []
    for axis in axes:
        for handle, text in zip(*axis.get_legend_handles_labels(), strict=True):
            if text not in texts:
                handles.append(handle)
                texts.append(text)
    if not handles:
        return
    longest = max(len(t) for t in texts)
    entry_points = SMALL * (0.65 * longest + 6)
    per_row = max(1, int(fig.get_figwidth() * 72 / entry_points))
    holder = axes[0].get_figure(root=False) or fig
    holder.legend(
        handles,
        texts,
        loc="outside upper center",
        ncols=min(len(texts), per_row),
        fontsize=SMALL,
        frameon=False,
    )

"""Figures from tidy frames. Each function returns a matplotlib Figure; pyplot is never imported."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from iobench.fioout.frame import FRAME_METRICS
from iobench.results import EXTRA, IDENTITY, PLACEMENT

LABELS = {
    "iops": "IOPS",
    "bw_bytes": "Throughput (MiB/s)",
    "lat_mean_us": "Mean latency (µs)",
    "clat_p99_us": "p99 completion latency (µs)",
    "cpu_us_per_io": "CPU per I/O (µs)",
    "iodepth": "I/O depth",
    "numjobs": "Jobs",
    "bs": "Block size",
}
SCALES = {"bw_bytes": 1 / 2**20}
SERIES = "series"


def parameter_columns(df: pd.DataFrame) -> list[str]:
    """The matrix axes present in ``df`` (every column that is not identity, placement or metric)."""
    fixed = {*IDENTITY, *PLACEMENT, *FRAME_METRICS, *EXTRA, "source"}
    return [c for c in df.columns if c not in fixed]


def point_totals(df: pd.DataFrame) -> pd.DataFrame:
    """One row per point × repeat × direction: IOPS and bandwidth summed over jobs, latency IOPS-weighted."""
    ok = df[df["status"] == "ok"] if "status" in df else df
    keys = [c for c in ("run_id", "point", "repeat", "direction") if c in ok]
    params = [c for c in parameter_columns(ok) if ok[c].notna().any()]
    weighted = ok.assign(
        _w=ok["iops"].astype("Float64"),
        _lat=ok["lat_mean_us"].astype("Float64") * ok["iops"].astype("Float64"),
    )
    grouped = weighted.groupby(keys + params, dropna=False, sort=True)
    totals = grouped.agg(
        iops=("iops", "sum"), bw_bytes=("bw_bytes", "sum"), _lat=("_lat", "sum"), _w=("_w", "sum")
    )
    totals["lat_mean_us"] = totals["_lat"] / totals["_w"]
    return totals.drop(columns=["_lat", "_w"]).reset_index()


def _label(column: str) -> str:
    return LABELS.get(column, column)


def _format_value(column: str, value: Any) -> str:
    if column == "bs" and isinstance(value, numbers.Real):
        from iobench.units import format_size

        return format_size(int(float(value)))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return str(value)


def _draw(axis: Any, data: pd.DataFrame, *, x: str, y: str, hue: str | None) -> None:
    """One panel: ``y`` (mean over repeats) against ``x``, a line per ``hue`` value."""
    from matplotlib.ticker import StrMethodFormatter

    scale = SCALES.get(y, 1.0)
    groups = [(None, data)] if hue is None else list(data.groupby(hue, sort=True))
    for key, group in groups:
        means = group.groupby(x, sort=True)[y].mean()
        label = None if hue is None else str(key) if hue == SERIES else f"{hue}={_format_value(hue, key)}"
        axis.plot(list(means.index), [float(v) * scale for v in means.to_numpy()], marker="o", label=label)
    axis.set_xlabel(_label(x))
    axis.set_ylabel(_label(y))
    axis.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    axis.set_ylim(bottom=0)
    if x in ("iodepth", "numjobs", "bs"):
        axis.set_xscale("log", base=2)
        ticks = sorted(data[x].dropna().unique())
        axis.set_xticks([float(t) for t in ticks], [_format_value(x, t) for t in ticks])
    if hue is not None:
        axis.legend(title=None, fontsize="small")
    axis.grid(True, alpha=0.3)


def _panels(totals: pd.DataFrame, col: str | None) -> list[Any]:
    return [None] if col is None else sorted(totals[col].dropna().unique())


def plot(
    df: pd.DataFrame,
    *,
    x: str,
    y: str | Sequence[str] = "iops",
    hue: str | None = None,
    col: str | None = None,
    ax: Any = None,
) -> Any:
    """Draw ``y`` (mean over repeats of the point totals) against ``x``, one line per ``hue``.

    Parameters
    ----------
    df
        A tidy frame (from :func:`iobench.load` or :func:`iobench.run`).
    x
        Column for the horizontal axis.
    y
        Metric column, or several (a row of panels each). IOPS and bandwidth are
        summed over a point's jobs; latencies are IOPS-weighted.
    hue
        Column whose values get a line each.
    col
        Column whose values get a panel each (ignored when ``ax`` is given).
    ax
        A matplotlib Axes to draw into (one ``y`` only); a new Figure is made when omitted.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.figure import Figure

    totals = point_totals(df)
    metrics = [y] if isinstance(y, str) else list(y)
    if ax is not None:
        _draw(ax, totals, x=x, y=metrics[0], hue=hue)
        return ax.figure
    panels = _panels(totals, col)
    fig = Figure(figsize=(5.5 * len(panels), 3.6 * len(metrics)), layout="constrained")
    grid = fig.subplots(len(metrics), len(panels), squeeze=False, sharex="col")
    for row, metric in enumerate(metrics):
        for column, panel in enumerate(panels):
            axis = grid[row][column]
            data = totals if panel is None else totals[totals[col] == panel]
            _draw(axis, data, x=x, y=metric, hue=hue)
            if panel is not None and row == 0:
                axis.set_title(f"{col}={_format_value(str(col), panel)}")
            if row < len(metrics) - 1:
                axis.set_xlabel("")
    return fig


def _caption(df: pd.DataFrame) -> str:
    parts = []
    for column in ("host", "fio_version"):
        if column in df and df[column].notna().any():
            parts.append(str(df[column].dropna().iloc[0]))
    return " · ".join(parts)


def sweep(df: pd.DataFrame) -> Any:
    """IOPS and mean latency against the run's main axis, a line per combination of the others.

    The x axis is iodepth, numjobs or bs (the first that varies); a second
    varying axis makes the panels; every remaining axis gets its own lines, so
    no axis is silently averaged away. Returns None when nothing varies.
    """
    params = [c for c in parameter_columns(df) if df[c].nunique() > 1]
    x = next((c for c in ("iodepth", "numjobs", "bs") if c in params), params[0] if params else None)
    if x is None:
        return None
    others = [c for c in params if c != x]
    col = others[1] if len(others) > 1 else None
    series = [c for c in others if c != col]
    hue = series[0] if len(series) == 1 else None
    if len(series) > 1:
        hue = SERIES
        labels = [
            " ".join(f"{c}={_format_value(c, v)}" for c, v in zip(series, row, strict=True))
            for row in df[series].itertuples(index=False)
        ]
        df = df.assign(**{SERIES: labels})
    fig = plot(df, x=x, y=["iops", "lat_mean_us"], hue=hue, col=col)
    fig.suptitle(f"IOPS and mean latency vs {_label(x)}", fontsize="medium")
    caption = _caption(df)
    if caption:
        fig.text(0.99, 0.002, caption, ha="right", va="bottom", fontsize="x-small", color="0.4")
    return fig


def default_figures(df: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Draw the figures that fit the run's axes into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig = sweep(df)
    if fig is None:
        return []
    x = fig.axes[-1].get_xlabel()
    name = next((k for k, v in LABELS.items() if v == x), x)
    path = out / f"sweep-{name}.png"
    fig.savefig(path, dpi=110)
    return [path]

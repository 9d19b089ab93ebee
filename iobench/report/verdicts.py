"""The report's bottleneck section: a table per group of points, each point × repeat with its verdict and why.

A group is the points that share every varying parameter but the main axis
(iodepth first, as in the figures), so a table reads along a sweep. The
numbers are the frame's telemetry summary (docs/telemetry.md) beside fio's
IOPS from :func:`iobench.point_totals`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from iobench.matrix.display import format_value
from iobench.plots import _data as dt
from iobench.plots import _style as st
from iobench.plots._lines import main_axis
from iobench.results.points import point_totals

HEADER = (
    "repeat",
    "fio IOPS",
    "device IOPS",
    "device util",
    "CPUs busy",
    "system",
    "busiest CPU",
    "remote IRQs",
    "busiest thread",
    "bottleneck",
    "why",
)


def _number(value: object, fmt: str) -> str:
    return "–" if dt.is_missing(value) else format(float(value), fmt)  # type: ignore[arg-type]


def _percent(value: object) -> str:
    return "–" if dt.is_missing(value) else f"{float(value):.0f} %"  # type: ignore[arg-type]


def verdict_groups(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The section's tables: ``[{"title", "x", "rows": [{"label", "cells", "verdict"}]}]``; empty without telemetry.

    Parameters
    ----------
    frame
        A run's tidy frame.
    """
    if "bottleneck" not in frame or dt.data_rows(frame).empty:
        return []
    totals = point_totals(frame)
    if totals.empty or totals["bottleneck"].isna().all() and totals["bottleneck_reason"].isna().all():
        return []
    iops = totals.groupby(["point", "repeat"], sort=False)["iops"].sum(min_count=1)
    dev = totals.groupby(["point", "repeat"], sort=False)["dev_iops"].sum(min_count=1)
    points = totals.drop_duplicates(["point", "repeat"]).set_index(["point", "repeat"])
    points = points.assign(iops=iops, dev_iops=dev).reset_index()
    axes = [a for a in dt.splitting_axes(points.drop(columns=["direction"]), []) if a != "repeat"]
    x = main_axis([a for a in axes if a != "point"]) or "point"
    others = [a for a in axes if a not in (x, "point")]
    groups = []
    for combo in dt.combos(points, others):
        part = dt.select(points, others, combo)
        ordered = [
            row
            for value in dt.ordered(x, part[x])
            for _, row in dt.select(part, [x], [value]).sort_values("repeat").iterrows()
        ]
        rows = []
        for row in ordered:
            cells = [
                str(row["repeat"]),
                st.metric_text("iops", float(row["iops"])) if not dt.is_missing(row["iops"]) else "–",
                st.metric_text("iops", float(row["dev_iops"])) if not dt.is_missing(row["dev_iops"]) else "–",
                _percent(row.get("dev_util_pct")),
                _percent(row.get("cpu_busy_pct")),
                _percent(row.get("cpu_sys_pct")),
                _percent(row.get("cpu_busy_max_pct")),
                _percent(row.get("irq_remote_pct")),
                "–"
                if dt.is_missing(row.get("top_thread"))
                else f"{row['top_thread']} ({_number(row.get('top_thread_pct'), '.0f')} %)",
            ]
            verdict = None if dt.is_missing(row.get("bottleneck")) else str(row["bottleneck"])
            reason = "" if dt.is_missing(row.get("bottleneck_reason")) else str(row["bottleneck_reason"])
            note = "" if dt.is_missing(row.get("telemetry_note")) else str(row["telemetry_note"])
            rows.append(
                {
                    "label": format_value(x, row[x]),
                    "cells": cells,
                    "verdict": verdict or "–",
                    "why": reason + (f" (note: {note})" if note else ""),
                }
            )
        groups.append(
            {"title": st.describe(others, combo) if others else "all points", "x": st.label(x), "rows": rows}
        )
    return groups

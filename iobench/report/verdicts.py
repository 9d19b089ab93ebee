"""The report's bottleneck section: a table per group of points, each point × repeat with its verdict and why.

A group is the points that share every varying parameter but the main axis
(iodepth first, as in the figures), so a table reads along a sweep. The
numbers are the frame's telemetry summary (docs/telemetry.md) beside fio's
IOPS from :func:`iobench.point_totals`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from iobench.matrix.display import format_value
from iobench.plots import plotdata as dt
from iobench.plots import plotstyle as st
from iobench.plots.lineplots import main_axis
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


def _ranks(column: str, values: pd.Series) -> list[int]:
    """Each value's place in ``column``'s reading order (:func:`iobench.plots.plotdata.ordered`)."""
    place = {dt.key(v): i for i, v in enumerate(dt.ordered(column, values))}
    return [place[dt.key(v)] for v in values.tolist()]


def verdict_groups(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The section's tables: ``[{"title", "x", "rows": [{"label", "cells", "verdict", "why", "note"}]}]``.

    Empty without telemetry. ``why`` is the verdict's reason, ``note`` what the
    telemetry noted about the point (often the same for every point of a run:
    :func:`folded` writes each once).

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
    # One sort in reading order (each axis' own order, then the repeat) and one pass over the rows:
    # a filter per group and per value would cost groups × rows.
    ranks = pd.DataFrame({c: _ranks(c, points[c]) for c in (*others, x)})
    ranks["_repeat"] = points["repeat"].to_numpy()
    order = ranks.sort_values([*others, x, "_repeat"], kind="stable").index
    points = points.iloc[order].reset_index(drop=True)
    keys = list(zip(*(ranks[c].to_numpy()[order] for c in others), strict=True)) if others else []
    starts = [0] + [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]]
    groups = []
    for begin, end in zip(starts, [*starts[1:], len(points)], strict=True):
        part = points.iloc[begin:end]
        combo = tuple(part.iloc[0][c] for c in others)
        ordered = [row for _, row in part.iterrows()]
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
                    "why": reason,
                    "note": note,
                }
            )
        groups.append(
            {"title": st.describe(others, combo) if others else "all points", "x": st.label(x), "rows": rows}
        )
    return groups


def folded(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """The section as the page folds it: verdicts counted, each distinct note once, a group per fold.

    Returns
    -------
    dict
        ``counts``: ``(verdict, points × repeats, groups)`` most frequent first;
        ``notes``: the distinct notes, numbered on the page from 1; ``groups``:
        each group with ``summary`` (its verdicts counted) and each row's
        ``note`` replaced by its number (0 for none).
    """
    notes: dict[str, int] = {}
    counts: Counter[str] = Counter()
    where: dict[str, set[int]] = {}
    shown = []
    for index, group in enumerate(groups):
        mine = Counter(str(r["verdict"]) for r in group["rows"])
        counts.update(mine)
        for verdict in mine:
            where.setdefault(verdict, set()).add(index)
        rows = [
            {**r, "note": notes.setdefault(r["note"], len(notes) + 1) if r["note"] else 0}
            for r in group["rows"]
        ]
        summary = ", ".join(f"{verdict} × {n}" for verdict, n in mine.most_common())
        shown.append({**group, "rows": rows, "summary": summary})
    return {
        "counts": [(verdict, n, len(where[verdict])) for verdict, n in counts.most_common()],
        "notes": list(notes),
        "groups": shown,
    }

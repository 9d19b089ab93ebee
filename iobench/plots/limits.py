"""Figures that stay figures: how much one shows, and what it keeps when a run has more.

A figure is at most :data:`MAX_PIXELS` a side, so that any image viewer opens
it. Past :data:`MAX_SERIES` lines (or bar groups, or curves) a figure keeps
those with the highest mean of its metric; past :data:`MAX_CATEGORIES` values
along an axis it keeps the first in reading order; past what fits, it keeps the
first :data:`MAX_PANELS` panels (:func:`iobench.plots.plotstyle.panel_grid`). Each figure says what it
kept in its caption (:func:`shown`); nothing is averaged to make room.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from iobench.plots import plotdata as dt

#: The largest width or height of a saved figure, in pixels.
MAX_PIXELS = 5000
#: Lines (bar groups, curves) a figure draws at most; past this it keeps the highest.
MAX_SERIES = 12
#: Values along one axis of a figure (categorical ticks, heatmap cells, bars, ratio rows) at most.
MAX_CATEGORIES = 40
#: Panels a figure draws at most, fewer when they would not fit in :data:`MAX_PIXELS`.
MAX_PANELS = 12

Combo = tuple[object, ...]


def keep(frame: pd.DataFrame, columns: Sequence[str], combos: Sequence[Combo]) -> pd.DataFrame:
    """The rows of ``frame`` whose values of ``columns`` are one of ``combos`` (NA matching NA)."""
    found = dt.positions(frame, columns)
    rows = sorted(at for combo in combos for at in found.get(tuple(dt.key(v) for v in combo), []))
    return frame if len(rows) == len(frame) else frame.iloc[rows]


def top(frame: pd.DataFrame, columns: Sequence[str], score: str, limit: int = MAX_SERIES) -> list[Combo]:
    """The combinations of ``columns`` in reading order; only the ``limit`` with the highest mean ``score`` when more.

    A combination without a value of ``score`` comes last.
    """
    combos = dt.combos(frame, columns)
    if len(combos) <= limit:
        return combos
    values = frame[score].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    means = {}
    for key, rows in dt.positions(frame, columns).items():
        found = values[rows][~np.isnan(values[rows])]
        if found.size:
            means[key] = float(found.mean())
    ranked = sorted(
        range(len(combos)),
        key=lambda i: -means.get(tuple(dt.key(v) for v in combos[i]), -math.inf),
    )
    chosen = set(ranked[:limit])
    return [combo for i, combo in enumerate(combos) if i in chosen]


def first(values: Sequence[object], limit: int = MAX_CATEGORIES) -> list[object]:
    """The first ``limit`` of ``values`` (already in reading order)."""
    return list(values[:limit])


def shown(count: int, total: int, what: str, rule: str = "") -> str:
    """The caption's note on what a figure kept: ``12 of 40 lines shown (the highest mean IOPS)``; empty when all."""
    if count >= total:
        return ""
    return f"{count} of {total} {what} shown" + (f" ({rule})" if rule else "")

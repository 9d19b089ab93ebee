"""Marks on points that a reader should doubt: a ring around each point one of whose repeats is flagged.

A :class:`Mark` reads one column of the point totals and says which point ×
repeat it flags; a figure's point (the mean of its repeats) gets the mark's
ring when any of its repeats is flagged, and the legend names the mark once.
Today one mark exists, a repeat judged not steady (``steady`` false,
:mod:`iobench.results.steady`). Another (a validity finding, say) is one more
entry in :data:`MARKS`: every line figure draws it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from numpy.typing import ArrayLike


@dataclass(frozen=True)
class Mark:
    """A ring drawn around flagged points.

    ``flagged`` takes the column ``column`` of the point totals and returns a
    boolean Series: True where that point × repeat is flagged.
    """

    label: str
    column: str
    flagged: Callable[[pd.Series], pd.Series]
    colour: str = "#d62728"
    marker: str = "o"
    size: float = 12.0


def _not_steady(values: pd.Series) -> pd.Series:
    return values.astype("boolean").eq(False).fillna(False).astype(bool)


#: Every mark a figure draws, in legend order.
MARKS: tuple[Mark, ...] = (Mark("not steady (a repeat)", "steady", _not_steady),)


def with_marks(totals: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[Mark, str]]]:
    """``totals`` with a 0/1 column per mark that flags some point × repeat, and those marks with their columns.

    The columns are metrics to average over repeats like any other: a mean
    above 0 says some repeat of the point was flagged.
    """
    added: dict[str, pd.Series] = {}
    marks = []
    for index, mark in enumerate(MARKS):
        if mark.column not in totals:
            continue
        flags = mark.flagged(totals[mark.column])
        if flags.any():
            column = f"_mark{index}"
            added[column] = flags.astype(float)
            marks.append((mark, column))
    return (totals.assign(**added) if added else totals), marks


def annotate(
    axis: Axes,
    xs: ArrayLike,
    ys: ArrayLike,
    rows: pd.DataFrame,
    marks: Sequence[tuple[Mark, str]],
) -> None:
    """Ring the points at ``xs``, ``ys`` whose row of ``rows`` (same order) a mark flags; label each mark once an Axes."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    labelled = {str(line.get_label()) for line in axis.lines}
    for mark, column in marks:
        hit = rows[column].to_numpy(dtype=float, na_value=0.0) > 0
        if not hit.any():
            continue
        axis.plot(
            x[hit],
            y[hit],
            linestyle="none",
            marker=mark.marker,
            markersize=mark.size,
            markerfacecolor="none",
            markeredgecolor=mark.colour,
            markeredgewidth=1.5,
            label="_nolegend_" if mark.label in labelled else mark.label,
            gid="mark",
            zorder=4,
        )
        labelled.add(mark.label)

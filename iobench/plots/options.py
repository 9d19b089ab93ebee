"""A figure's options checked like a matrix: each names a column that fits its role, before anything is drawn.

Every figure takes the same five roles (docs/figures.md): ``x``, ``hue``,
``col`` and ``row`` name a *category*, a column that tells points apart (a
matrix axis, the host, the target, the direction ...); ``y`` names a *metric*,
a number measured at each point (``iops``, ``clat_p99_us``, ``dev_iops`` ...).
A role a figure fixes (the percentile on the latency figure's x) cannot be
chosen. A column that does not fit raises :class:`iobench.errors.PlotOptionError`
naming the column and the columns that would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from iobench.errors import PlotOptionError
from iobench.plots import plotdata as dt

#: The roles every figure takes, in the order they are written.
ROLES = ("x", "y", "hue", "col", "row")


def _category_problem(df: pd.DataFrame, totals: pd.DataFrame, column: str) -> str | None:
    categories = dt.category_columns(totals)
    if column in categories:
        return None
    if dt.is_metric(column) and column in totals:
        return "is a metric, not a category"
    if column in totals or column in df:
        return "is a column of fio's jobs, not of points" if column in dt.JOB_COLUMNS else "is not a category"
    return "is no column of these points"


def _metric_problem(df: pd.DataFrame, totals: pd.DataFrame, column: str) -> str | None:
    if column in dt.metric_columns(totals):
        return None
    if column in dt.category_columns(totals):
        return "is a category, not a metric"
    if dt.is_metric(column) and column in totals:
        return "holds no value at any point"
    if column in totals or column in df:
        return "is not a metric"
    return "is no column of these points"


def category_fits(totals: pd.DataFrame) -> list[str]:
    """The columns a category role can take: the matrix axes, then the other categories that vary."""
    params = dt.parameter_columns(totals)
    return list(dict.fromkeys([*params, *(c for c in dt.category_columns(totals) if dt.varies(totals, c))]))


def check(
    df: pd.DataFrame,
    totals: pd.DataFrame,
    figure: str,
    *,
    categories: Mapping[str, str | None] | None = None,
    metrics: Mapping[str, Sequence[str]] | None = None,
    hints: Mapping[str, str] | None = None,
) -> None:
    """Check that each role's column fits it.

    Parameters
    ----------
    df
        The tidy frame the figure was given (to tell a job's column from a missing one).
    totals
        Its point totals (:func:`iobench.plots.plotdata.point_totals`).
    figure
        The figure's name, for the message.
    categories
        Role → column for the roles that take a category (``x``, ``hue``, ``col``, ``row``); None is unset.
    metrics
        Role → metric columns (``y``, and e.g. ``latency``).
    hints
        Column → what the figure needs of it, added to the message when that
        column does not fit (``binding`` → ``a run with a binding axis``).

    Raises
    ------
    PlotOptionError
        The first column that does not fit, or a column given two category roles.
    """
    seen: dict[str, str] = {}
    for role, column in (categories or {}).items():
        if column is None:
            continue
        problem = _category_problem(df, totals, column)
        if problem is None and column in seen:
            problem = f"is {seen[column]} already"
        if problem is not None:
            hint = (hints or {}).get(column, "")
            fits = [c for c in category_fits(totals) if c not in seen]
            raise PlotOptionError(figure, role, column, problem, fits, hint)
        seen[column] = role
    for role, columns in (metrics or {}).items():
        for column in columns:
            problem = _metric_problem(df, totals, column)
            if problem is not None:
                hint = (hints or {}).get(column, "")
                raise PlotOptionError(figure, role, column, problem, dt.metric_columns(totals), hint)


def fixed(figure: str, given: Mapping[str, object], meaning: Mapping[str, str]) -> None:
    """Refuse a value for a role the figure fixes: ``meaning`` says what each such role is here.

    Raises
    ------
    PlotOptionError
        A role of ``meaning`` was given a value.
    """
    for role, what in meaning.items():
        value = given.get(role)
        if value is not None:
            raise PlotOptionError(figure, role, str(value), f"cannot be chosen here: {role} is {what}", [])

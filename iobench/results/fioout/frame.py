"""Rows of job records (:mod:`iobench.results.fioout.rows`) into the tidy frame (docs/frame.md).

The columns, their dtypes and the derived ones are :mod:`~iobench.results.fioout.rows`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeAlias

import pandas as pd
import pyarrow as pa
from pandas.api.extensions import ExtensionArray

from iobench.results.fioout.joboptions import OPTION_DTYPES, PARSED_DTYPES, Options
from iobench.results.fioout.jobstats import JobStats
from iobench.results.fioout.rows import (
    FRAME_COLUMNS,
    FRAME_DTYPES,
    FRAME_HISTOGRAMS,
    FRAME_IDENTITY,
    FRAME_METRICS,
    Row,
    add_job_rows,
    job_rows,
)

__all__ = [
    "FRAME_COLUMNS",
    "FRAME_DTYPES",
    "FRAME_HISTOGRAMS",
    "FRAME_IDENTITY",
    "FRAME_METRICS",
    "FrameBuilder",
    "Row",
    "empty_frame",
    "job_rows",
    "rows_frame",
    "to_frame",
    "with_options",
]


def empty_frame() -> pd.DataFrame:
    """Return a frame with every column and dtype and no rows."""
    return pd.DataFrame({c: pd.Series([], dtype=d) for c, d in FRAME_DTYPES.items()})


# A batch of rows converts into arrow columns in one pyarrow call, in C: no transposing in
# Python, and a number held in 8 bytes instead of a Python object and its pointer.
_ROW_TYPE = pa.struct(
    [
        (column, {"Int64": pa.int64(), "Float64": pa.float64(), "string": pa.large_string()}[dtype])
        for column, dtype in FRAME_DTYPES.items()
    ]
)

Part: TypeAlias = "pa.StructArray | dict[str, ExtensionArray]"
"""Converted rows: arrow columns, or (a batch pyarrow would not convert exactly) pandas arrays."""


class FrameBuilder:
    """Collect rows and build the tidy frame from them.

    Rows wait in a short buffer and convert in batches into arrow columns; the
    frame is made once, from every batch. A batch holding a value pyarrow
    will not convert exactly (an integer beyond 64 bits, a string where a
    number belongs) is converted column by column, pandas deciding where
    pyarrow declines, as a single-file frame would be.

    With ``options``, the frame also has a column per job option fio's
    output states (:mod:`iobench.results.fioout.joboptions`), after the identity.
    """

    _BATCH = 256  # rows still in the CPU cache convert faster: ~5 % over 4096

    def __init__(self, *, options: bool = False) -> None:
        self._rows: list[Row] = []
        self._parts: list[Part] = []
        self._options: list[Options | None] | None = [] if options else None

    def add(self, rows: Iterable[Row], options: Iterable[Options | None] = ()) -> None:
        """Append rows made by :func:`job_rows` (and, with ``options``, each row's job's options)."""
        self._rows.extend(rows)
        if self._options is not None:
            self._options.extend(options)
        if len(self._rows) >= self._BATCH:
            self._flush()

    def add_jobs(self, jobs: Iterable[JobStats], source: str) -> None:
        """Append the rows of one fio output's job records (as :func:`job_rows` makes them)."""
        for job in jobs:
            before = len(self._rows)
            add_job_rows(job, source, self._rows)
            if self._options is not None:
                self._options.extend([job.options] * (len(self._rows) - before))
        if len(self._rows) >= self._BATCH:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        part: Part
        try:
            part = pa.array(self._rows, type=_ROW_TYPE, from_pandas=True)  # from_pandas: NaN is NA
        except (pa.ArrowException, OverflowError):
            part = {
                column: _column(list(values), FRAME_DTYPES[column])
                for column, values in zip(FRAME_COLUMNS, zip(*self._rows, strict=True), strict=True)
            }
        self._parts.append(part)
        self._rows = []

    def frame(self) -> pd.DataFrame:
        """The tidy frame of every row added."""
        self._flush()
        frame = _parts_to_frame(self._parts)
        if self._options is None:
            return frame
        return with_options(frame, self._options)


def with_options(frame: pd.DataFrame, options: list[Options | None]) -> pd.DataFrame:
    """``frame`` with a column per lifted job option (``options``: each row's job's), after the identity."""
    blank: Options = (None,) * len(OPTION_DTYPES)
    cells = list(zip(*(blank if o is None else o for o in options), strict=True)) if options else []
    lifted = {
        column: pd.Series(list(cells[i]) if cells else [], dtype=dtype).array
        for i, (column, dtype) in enumerate(OPTION_DTYPES.items())
    }
    columns = {c: lifted[c] if c in lifted else frame[c].array for c in PARSED_DTYPES}
    return pd.DataFrame(columns, copy=False)


# Integers beyond 64 bits, and values of the wrong type, are left to pandas (which
# keeps every digit or raises); pyarrow converts the rest to the same arrays, faster.
_ARROW_TYPES = {"Float64": pa.float64(), "string": pa.large_string()}


def _column(values: list[Any], dtype: str) -> ExtensionArray:
    arrow_type = _ARROW_TYPES.get(dtype)
    if arrow_type is not None:
        try:
            return pd.array(pa.array(values, type=arrow_type, from_pandas=True), dtype=dtype)
        except pa.ArrowException:
            pass  # a value pyarrow will not convert exactly: pandas decides (or raises)
    return pd.Series(values, dtype=dtype).array


def _parts_to_frame(parts: list[Part]) -> pd.DataFrame:
    if not parts:
        return empty_frame()
    arrays: dict[str, ExtensionArray]
    if all(isinstance(part, pa.StructArray) for part in parts):
        children = [part.flatten() for part in parts]  # type: ignore[union-attr]
        arrays = {
            column: pd.array(pa.chunked_array([child[i] for child in children]), dtype=dtype)
            for i, (column, dtype) in enumerate(FRAME_DTYPES.items())
        }
    else:
        pieces = [
            part
            if isinstance(part, dict)
            else {
                column: pd.array(child, dtype=dtype)
                for (column, dtype), child in zip(FRAME_DTYPES.items(), part.flatten(), strict=True)
            }
            for part in parts
        ]
        arrays = {
            column: pd.concat([pd.Series(piece[column]) for piece in pieces], ignore_index=True).array
            for column in FRAME_COLUMNS
        }
    # Arrays, not Series: no index to align, a third less time.
    return pd.DataFrame(arrays, copy=False)


def to_frame(jobs: Iterable[JobStats], source: str, *, options: bool = False) -> pd.DataFrame:
    """Build the tidy frame from job records.

    Parameters
    ----------
    jobs : iterable of JobStats
        Records from one fio output, in fio's order.
    source : str
        Where they came from; fills the ``source`` column.
    options : bool, default False
        Add a column per job option the output states (:func:`with_options`).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`FRAME_COLUMNS` with dtypes :data:`FRAME_DTYPES`; NA where
        fio did not report a value.
    """
    builder = FrameBuilder(options=options)
    builder.add_jobs(jobs, source)
    return builder.frame()


def rows_frame(*parts: Iterable[Row]) -> pd.DataFrame:
    """The tidy frame of rows made by :func:`job_rows` (one or more outputs' rows, in order)."""
    builder = FrameBuilder()
    for rows in parts:
        builder.add(rows)
    return builder.frame()

"""fio output into the tidy frame (SPEC §6).

>>> from iobench.fioout import parse_fio
>>> df = parse_fio("fio.json")          # doctest: +SKIP

Modules: :mod:`~iobench.fioout.detect` finds results in text,
:mod:`~iobench.fioout.jsonout`, :mod:`~iobench.fioout.terse` and
:mod:`~iobench.fioout.normal` read one format each into
:class:`~iobench.fioout.model.JobStats`, :mod:`~iobench.fioout.bins` keeps json+
latency histograms, and :mod:`~iobench.fioout.frame` builds the frame.
"""

from __future__ import annotations

from iobench.fioout.frame import (
    FRAME_COLUMNS,
    FRAME_DTYPES,
    FRAME_HISTOGRAMS,
    FRAME_IDENTITY,
    FRAME_METRICS,
    empty_frame,
)
from iobench.fioout.parse import parse_fio, parse_fio_text, read_jobs

__all__ = [
    "FRAME_COLUMNS",
    "FRAME_DTYPES",
    "FRAME_HISTOGRAMS",
    "FRAME_IDENTITY",
    "FRAME_METRICS",
    "empty_frame",
    "parse_fio",
    "parse_fio_text",
    "read_jobs",
]

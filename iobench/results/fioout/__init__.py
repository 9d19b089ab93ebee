"""fio output into the tidy frame (SPEC §6).

>>> from iobench.results.fioout import parse_fio
>>> df = parse_fio("fio.json")          # doctest: +SKIP

Modules: :mod:`~iobench.results.fioout.detect` finds results in text,
:mod:`~iobench.results.fioout.jsonout`, :mod:`~iobench.results.fioout.terse` and
:mod:`~iobench.results.fioout.normal` read one format each into
:class:`~iobench.results.fioout.model.JobStats`, :mod:`~iobench.results.fioout.bins` keeps json+
latency histograms, and :mod:`~iobench.results.fioout.frame` builds the frame.
"""

from __future__ import annotations

from iobench.results.fioout.frame import (
    FRAME_COLUMNS,
    FRAME_DTYPES,
    FRAME_HISTOGRAMS,
    FRAME_IDENTITY,
    FRAME_METRICS,
    empty_frame,
)
from iobench.results.fioout.parse import parse_fio, parse_fio_text, read_jobs

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

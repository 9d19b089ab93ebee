"""fio output into the tidy frame (docs/frame.md).

>>> from iobench.results.fioout import parse_fio
>>> df = parse_fio("fio.json")          # doctest: +SKIP

Modules: :mod:`~iobench.results.fioout.detect` finds results in text,
:mod:`~iobench.results.fioout.jsonout`, :mod:`~iobench.results.fioout.terse` and
:mod:`~iobench.results.fioout.normal` read one format each into
:class:`~iobench.results.fioout.jobstats.JobStats` (:mod:`~iobench.results.fioout.jobs`
picks the reader), :mod:`~iobench.results.fioout.bins` keeps json+ latency
histograms, :mod:`~iobench.results.fioout.rows` makes the frame's rows and
:mod:`~iobench.results.fioout.frame` the frame.

Up to the rows nothing imports pandas: the run loop reads each point's output
that way while pandas is still loading. The names below that need it load it
when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from iobench.results.fioout.jobs import read_jobs
from iobench.results.fioout.rows import (
    FRAME_COLUMNS,
    FRAME_DTYPES,
    FRAME_HISTOGRAMS,
    FRAME_IDENTITY,
    FRAME_METRICS,
)

if TYPE_CHECKING:
    from iobench.results.fioout.frame import empty_frame
    from iobench.results.fioout.parse import parse_fio, parse_fio_text

_LATER = {
    "empty_frame": "iobench.results.fioout.frame",
    "parse_fio": "iobench.results.fioout.parse",
    "parse_fio_text": "iobench.results.fioout.parse",
}

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


def __getattr__(name: str) -> Any:
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

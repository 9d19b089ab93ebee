"""fio's job options that a parsed frame carries as columns (``iobench parse``, :func:`parse_fio`).

fio's JSON output repeats the job file: ``global options`` once, each job's own
``job options`` with it. A frame parsed from fio output (a run of another
tool, fio-plot's files) gets one column per option below, the job's own value
over the global one, as fio was given it (``bs`` ``4k``, ``rw`` ``randread``);
the numbers (``iodepth``, ``numjobs``, ``direct``, ``rwmixread``) as integers.
They are what a point of a sweep varies; per-job details that differ between
the jobs of one point (``size``, ``filename``, ``runtime``) are not lifted: they
would split a point whose jobs ran together.
NA where the output does not say (terse and normal output, an option left at
fio's default). A run's frame has no such columns: its matrix axes say it.
No pandas here: parsing workers import it.
"""

from __future__ import annotations

from typing import Any

from iobench.results.fioout.rows import FRAME_COLUMNS, FRAME_DTYPES, FRAME_IDENTITY

#: The options lifted, their columns' dtypes, in column order.
OPTION_DTYPES: dict[str, str] = {
    "rw": "string",
    "bs": "string",
    "iodepth": "Int64",
    "numjobs": "Int64",
    "ioengine": "string",
    "direct": "Int64",
    "rwmixread": "Int64",
}

#: Other names fio takes for them.
ALIASES: dict[str, str] = {"readwrite": "rw", "blocksize": "bs"}

_AT = FRAME_COLUMNS.index(FRAME_IDENTITY[-1]) + 1
#: The columns of a parsed frame and their dtypes: the tidy frame's, the options after its identity.
PARSED_DTYPES: dict[str, str] = {
    **{c: FRAME_DTYPES[c] for c in FRAME_COLUMNS[:_AT]},
    **OPTION_DTYPES,
    **{c: FRAME_DTYPES[c] for c in FRAME_COLUMNS[_AT:]},
}

Options = tuple[Any, ...]
"""A job's lifted options, in :data:`OPTION_DTYPES` order (``None``: not given)."""


def lift(*layers: Any) -> Options | None:
    """The options of a job, later layers over earlier ones (global options, then the job's own).

    A layer is a record with an attribute per name of :data:`OPTION_DTYPES`
    and :data:`ALIASES`, or None. None when no layer gives any of them.
    """
    found: dict[str, Any] = {}
    for layer in layers:
        if layer is None:
            continue
        for name, column in (*ALIASES.items(), *((n, n) for n in OPTION_DTYPES)):
            value = getattr(layer, name, None)
            if value is not None:
                found[column] = value
    if not found:
        return None
    return tuple(_value(found.get(column), dtype) for column, dtype in OPTION_DTYPES.items())


def _value(value: Any, dtype: str) -> Any:
    if value is None or isinstance(value, dict | list):
        return None
    text = str(value).strip()
    if dtype == "Int64":
        return int(text) if text.isdigit() else None  # `$ncpus`, a range: not a number fio states
    return text

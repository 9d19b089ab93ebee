"""Find fio's results in its output, in whichever format, and read them into job records (no pandas)."""

from __future__ import annotations

import re

from iobench.errors import ResultsError
from iobench.results.fioout import detect
from iobench.results.fioout.jobstats import JobStats
from iobench.results.fioout.jsonout import read_json
from iobench.results.fioout.normal import read_normal
from iobench.results.fioout.terse import read_terse

_FIO_MESSAGE = re.compile(r"^fio: .*$", re.MULTILINE)


def read_jobs(text: str, *, origin: str = "<text>") -> list[JobStats]:
    """Find fio results in ``text`` and return them as job records.

    The first form found wins, in the order JSON (json, json+), terse, normal,
    so mixed ``json,normal`` and ``json,terse`` output gives one set of records.

    Raises
    ------
    ResultsError
        ``text`` holds no fio results (naming ``origin`` and quoting fio's
        first ``fio:`` message, if any).
    """
    obj = detect.find_json(text)
    if obj is not None:
        return read_json(obj)
    lines = detect.terse_lines(text)
    if lines:
        return read_terse(lines, origin=origin)
    if detect.has_normal(text):
        return read_normal(text, origin=origin)
    hint = _FIO_MESSAGE.search(text)
    said = f"; fio said: {hint.group(0).strip()!r}" if hint else ""
    raise ResultsError(
        f"{origin}: no fio results found (no JSON results object, no terse lines, "
        f"no normal-format job report){said}"
    )

"""The validity findings of a run as the report shows them: flags beside the numbers, and a section of their own."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from iobench.results.points import VALIDITY
from iobench.results.validity import CODES, findings


def _text(value: object) -> str:
    return (
        "–"
        if value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value))
        else str(value)
    )


def validity_flags(frame: pd.DataFrame) -> dict[object, list[str]]:
    """Per point, the codes found in any of its repeats (for the summary table's flags column)."""
    found = findings(frame)
    flags: dict[object, list[str]] = {}
    for point, codes in zip(found["point"], found["validity"], strict=True):
        known = flags.setdefault(point, [])
        known += [c for c in str(codes).split() if c not in known]
    return flags


#: The columns :func:`with_validity` adds to a summary (``summary.csv``).
VALIDITY_COLUMNS = ("validity", "validity_judged")


def with_validity(summary: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """``summary`` with each point's validity: what the checks found, and over how many repeats they ran.

    ``validity``: the codes found in any repeat of the point, space-separated,
    empty when none was found (docs/validity.md); ``validity_judged``: the
    repeats the checks judged (0 for a frame without validity columns, as from
    ``iobench parse``: nothing was checked, so an empty ``validity`` there
    says nothing).
    """
    if summary.empty or "point" not in summary:
        return summary
    flags = validity_flags(frame)
    judged: dict[object, int] = {}
    if {"validity", "point", "repeat"} <= set(frame.columns):
        rows = frame.drop_duplicates(["point", "repeat"])
        judged = rows[rows["validity"].notna()].groupby("point").size().to_dict()
    return summary.assign(
        validity=[" ".join(flags.get(p, [])) for p in summary["point"]],
        validity_judged=[int(judged.get(p, 0)) for p in summary["point"]],
    )


def validity_section(frame: pd.DataFrame) -> dict[str, Any]:
    """The report's validity section: each point × repeat with a finding, and what could not be checked.

    Returns
    -------
    dict
        ``rows``: ``(point, repeat, parameters, codes, detail)`` per point ×
        repeat with a finding; ``unchecked``: ``(code, points, an example
        reason)`` for each check that could not run on some points; ``judged``:
        how many points × repeats were judged.
    """
    found = findings(frame)
    params = [c for c in found.columns if c not in ("point", "repeat", *VALIDITY)]
    rows = [
        (
            _text(r["point"]),
            _text(r["repeat"]),
            " ".join(f"{c}={_text(r[c])}" for c in params) or "–",
            _text(r["validity"]),
            _text(r["validity_detail"]),
        )
        for _, r in found.iterrows()
    ]
    if "validity_na" not in frame:
        return {"rows": rows, "unchecked": [], "judged": 0}
    judged = frame.drop_duplicates(["point", "repeat"])
    judged = judged[judged["validity"].notna()]
    counts: Counter[str] = Counter()
    example: dict[str, str] = {}
    for notes in judged["validity_na"].fillna(""):
        for code in CODES:
            marker = f"{code}: "
            if marker in notes:
                counts[code] += 1
                reason = notes.split(marker, 1)[1]
                cut = min((reason.find(f" {c}: ") for c in CODES if f" {c}: " in reason), default=len(reason))
                example.setdefault(code, reason[:cut].strip())
    unchecked = [(code, counts[code], example[code]) for code in CODES if counts[code]]
    return {"rows": rows, "unchecked": unchecked, "judged": len(judged)}

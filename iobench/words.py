"""How iobench words a count for people: ``1 run``, ``3 runs``, ``1 repeat could not be judged``.

One helper, so no message says "1 runs": a leaf any floor may use.
"""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``noun`` for one, its plural (``many``, else ``noun`` + ``s``) for any other count."""
    if count == 1:
        return noun
    return many if many is not None else noun + "s"


def counted(count: int, noun: str, many: str | None = None) -> str:
    """``1 run``, ``0 runs``, ``1,234 point-runs``: the count and ``noun`` in the number it takes."""
    return f"{count:,} {plural(count, noun, many)}"

"""Matrix expansion: cartesian product, then exclude, then include (GitHub Actions rules)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from iobench.matrix.values import Value

Combo = dict[str, Value]


def _matches(combo: Mapping[str, Value], pattern: Mapping[str, Value]) -> bool:
    return all(key in combo and combo[key] == value for key, value in pattern.items())


def expand(
    axes: Mapping[str, Sequence[Value]],
    include: Sequence[Mapping[str, Value]] = (),
    exclude: Sequence[Mapping[str, Value]] = (),
) -> list[Combo]:
    """Expand a matrix into its combinations, in a deterministic order.

    The product varies the last axis fastest. ``exclude`` drops every
    combination that matches all keys of an entry. Each ``include`` entry is
    merged into every remaining original combination whose original axis
    values it does not contradict (keys it adds may be overwritten by later
    entries); an entry that fits none becomes a combination of its own.

    Parameters
    ----------
    axes
        Axis name → the values it takes, in order.
    include, exclude
        Entries as in GitHub Actions' ``strategy.matrix``.
    """
    names = list(axes)
    product = [dict(zip(names, values, strict=True)) for values in itertools.product(*axes.values())]
    if not names:
        product = []
    kept: list[Combo] = [c for c in product if not any(_matches(c, e) for e in exclude)]
    originals = [dict(c) for c in kept]
    extra: list[Combo] = []
    for entry in include:
        fitted = False
        for combo, original in zip(kept, originals, strict=True):
            if all(original.get(k, v) == v for k, v in entry.items() if k in axes):
                combo.update(entry)
                fitted = True
        if not fitted:
            extra.append(dict(entry))
    return kept + extra


def matrix_size(axes: Mapping[str, Sequence[Value]], includes: int = 0) -> int:
    """The most points a matrix can expand to, from its axis lengths alone.

    The product of the axis lengths (excludes only remove points) plus one per
    ``include`` entry (an entry either merges into existing points or adds one);
    nothing is materialized, so a matrix of billions is counted in microseconds.
    """
    size = 1
    for values in axes.values():
        size *= len(values)
    return (size if axes else 0) + includes

"""Change points in one metric over a series of runs: E-divisive means with a t-test.

This is Apache Otava's method (Matteson & James's E-divisive, with Otava's t-test in place
of the permutation test), written here for one metric over at most a few thousand runs:

1. **Candidates.** Within each stretch between the change points found so far, the split
   that maximises the energy statistic q̂ — how far the values before and after lie apart
   compared with how far they lie apart among themselves, weighted by how many there are on
   each side — is that stretch's candidate; the stretch with the largest q̂ goes first.
2. **A first pass.** The candidate stands when Welch's t-test between its two sides gives
   p below ten times ``max_pvalue`` (Otava's relaxed first pass); otherwise the search ends.
3. **Merge.** Every change point is then tested against its neighbours (the values from the
   previous change point to it, and from it to the next): while any has p of at least
   ``max_pvalue`` or moves the mean by less than ``min_magnitude``, the weakest of those
   (the largest p) is dropped and the others are tested again.

Each side of a change point holds at least ``min_size`` runs, so a step is found once that
many runs show it. Nothing here knows about runs or stores: it takes an array of numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

MAX_PVALUE = 0.001
MIN_SIZE = 3
# The energy statistic needs every pairwise distance of a stretch: n² floats. Beyond this many
# runs only the latest are analysed (docs/history.md).
MAX_RUNS = 2000


@dataclass(frozen=True)
class ChangePoint:
    """A change at ``index``: the first value after it. ``before``/``after`` are the means of the
    stretches on either side (to the neighbouring change points), ``pvalue`` Welch's test's."""

    index: int
    before: float
    after: float
    pvalue: float

    @property
    def change(self) -> float:
        """The relative move of the mean, ``after / before - 1`` (NaN when ``before`` is 0)."""
        return self.after / self.before - 1 if self.before else math.nan


def noise(values: np.ndarray) -> float:
    """The run-to-run spread of a series relative to its level, robust to steps in it.

    The standard deviation is estimated from successive differences (a step moves only one
    of them): 1.4826 × the median absolute deviation of the differences, over √2. Returns the
    ratio to the median value (NaN with fewer than 3 values or a zero median).
    """
    if len(values) < 3:
        return math.nan
    diffs = np.diff(values)
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    level = float(np.median(values))
    return 1.4826 * mad / math.sqrt(2) / abs(level) if level else math.nan


def _welch(a: np.ndarray, b: np.ndarray) -> float:
    if a.std() == 0 and b.std() == 0:  # no spread on either side: a difference is certain
        return 0.0 if a.mean() != b.mean() else 1.0
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def _candidate(x: np.ndarray, min_size: int) -> tuple[int, float] | None:
    """The split of ``x`` with the largest q̂, and q̂; None when ``x`` is too short to split."""
    n = len(x)
    if n < 2 * min_size:
        return None
    distances = np.abs(x[:, None] - x[None, :])
    prefix = np.zeros((n + 1, n + 1))
    prefix[1:, 1:] = distances.cumsum(axis=0).cumsum(axis=1)

    def block(r1: np.ndarray, r2: np.ndarray | int, c1: np.ndarray | int, c2: np.ndarray | int) -> np.ndarray:
        return prefix[r2, c2] - prefix[r1, c2] - prefix[r2, c1] + prefix[r1, c1]  # type: ignore[no-any-return]

    taus = np.arange(min_size, n - min_size + 1)
    zero = np.zeros_like(taus)
    m, k = taus.astype(float), (n - taus).astype(float)
    between = block(zero, taus, taus, n) / (m * k)
    within_a = block(zero, taus, zero, taus) / (m * (m - 1))
    within_b = block(taus, n, taus, n) / (k * (k - 1))
    qhat = m * k / n * (2 * between - within_a - within_b)
    best = int(np.argmax(qhat))
    return int(taus[best]), float(qhat[best])


def _tested(x: np.ndarray, cuts: list[int]) -> list[ChangePoint]:
    """Each change point against the stretches to its neighbours."""
    edges = [0, *cuts, len(x)]
    found = []
    for i, cut in enumerate(cuts):
        before, after = x[edges[i] : cut], x[cut : edges[i + 2]]
        found.append(ChangePoint(cut, float(before.mean()), float(after.mean()), _welch(before, after)))
    return found


def change_points(
    values: np.ndarray,
    *,
    max_pvalue: float = MAX_PVALUE,
    min_magnitude: float = 0.0,
    min_size: int = MIN_SIZE,
) -> list[ChangePoint]:
    """The change points of ``values`` (in run order), earliest first.

    Parameters
    ----------
    values : numpy.ndarray
        One number per run, oldest first; NaN values are the caller's to drop.
    max_pvalue : float, default 0.001
        Welch's test must give less than this for a change point to stand.
    min_magnitude : float, default 0
        A change point must move the mean by at least this fraction (0.05 = 5 %).
    min_size : int, default 3
        Runs on each side of a change point, at the least.
    """
    x = np.asarray(values, dtype=float)
    offset = max(0, len(x) - MAX_RUNS)
    x = x[offset:]
    cuts: list[int] = []
    while True:
        edges = [0, *cuts, len(x)]
        best: tuple[float, int, int, int] | None = None
        for start, end in zip(edges, edges[1:], strict=False):
            found = _candidate(x[start:end], min_size)
            if found is not None and (best is None or found[1] > best[0]):
                best = (found[1], start + found[0], start, end)
        if best is None:
            break
        _, cut, start, end = best
        if _welch(x[start:cut], x[cut:end]) >= min(1.0, 10 * max_pvalue):
            break
        cuts = sorted([*cuts, cut])
    while cuts:
        tested = _tested(x, cuts)
        weak = [cp for cp in tested if cp.pvalue >= max_pvalue or not abs(cp.change) >= min_magnitude]
        if not weak:
            return [ChangePoint(cp.index + offset, cp.before, cp.after, cp.pvalue) for cp in tested]
        cuts.remove(max(weak, key=lambda cp: cp.pvalue).index)
    return []

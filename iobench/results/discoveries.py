"""Many tests at once: adjusted p-values, and the smallest change a point's repeats could detect.

``iobench compare`` makes one Welch test per point, direction and metric: 16
points × 4 metrics is 64 tests, and at 5 % each, two runs of the same matrix
would show a "change" somewhere most of the time. :func:`adjust` controls that
across all the tests of a comparison:

``holm``
    Holm's step-down method (the default): the chance of *any* false
    "better"/"worse" stays at most ``alpha``, whatever the dependence between
    the tests (metrics of one point are strongly dependent).
``bh``
    Benjamini–Hochberg: the expected share of false ones among the changes
    found stays at most ``alpha`` (``scipy.stats.false_discovery_control``);
    more power when many points really changed.
``none``
    Each test on its own (how compare judged before).

:func:`detectable_change` is the other side: the smallest relative change a
point's repeats could show at that level with 80 % power — when it exceeds the
minimum effect, "no change" says little.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from iobench.errors import ResultsError

#: The corrections :func:`adjust` knows, the default first.
CORRECTIONS: tuple[str, ...] = ("holm", "bh", "none")
#: How each correction reads in a sentence.
CORRECTION_NAMES: dict[str, str] = {"holm": "Holm", "bh": "Benjamini–Hochberg", "none": "no correction"}
#: The power :func:`detectable_change` asks of a test (the chance to see a change of that size).
POWER = 0.8


class _Repeats(Protocol):
    @property
    def n(self) -> int: ...
    @property
    def mean(self) -> float: ...
    @property
    def std(self) -> float: ...


def adjust(p_values: Sequence[float] | np.ndarray, method: str = "holm") -> np.ndarray:
    """Adjusted p-values of a family of tests; NaN (an untested point) stays NaN and is not counted.

    Parameters
    ----------
    p_values
        One per test.
    method
        One of :data:`CORRECTIONS`.

    Returns
    -------
    numpy.ndarray
        In the order given; a test is significant at level ``alpha`` when its
        adjusted p is below ``alpha``.

    Raises
    ------
    ResultsError
        An unknown method.
    """
    if method not in CORRECTIONS:
        raise ResultsError(f"correction {method!r} is not one of {', '.join(CORRECTIONS)}")
    p = np.asarray(p_values, dtype=float)
    out = p.copy()
    tested = np.flatnonzero(~np.isnan(p))
    if method == "none" or not len(tested):
        return out
    if method == "bh":
        from scipy import stats

        out[tested] = stats.false_discovery_control(p[tested], method="bh")
        return out
    order = tested[np.argsort(p[tested], kind="stable")]
    m = len(order)
    steps = p[order] * (m - np.arange(m))
    out[order] = np.minimum(1.0, np.maximum.accumulate(steps))
    return out


def family_alpha(alpha: float, tests: int, method: str) -> float:
    """The level a lone true change must reach among ``tests`` tests: ``alpha / tests`` when corrected.

    Holm's first step, and Benjamini–Hochberg's when one point changed, both
    compare the smallest p with ``alpha / tests``.
    """
    return alpha if method == "none" or tests <= 1 else alpha / tests


def detectable_change(a: _Repeats, b: _Repeats, *, alpha: float, power: float = POWER) -> float:
    """The smallest relative change of the mean Welch's test would show at ``alpha`` with ``power``.

    ``(t(1 − α/2, ν) + t(power, ν)) · √(s_a²/n_a + s_b²/n_b) / |ā|``, with
    Welch–Satterthwaite's degrees of freedom ν: the usual two-sample size
    formula with Student's quantiles, from the spread the repeats showed.

    Parameters
    ----------
    a, b
        The repeats of a point on each side (``n``, ``mean``, ``std``).
    alpha
        The two-sided level of the test (after the family's correction).
    power
        The chance of seeing a change that large.

    Returns
    -------
    float
        A fraction of A's mean (0.05 is ±5 %); NaN with fewer than two repeats
        on a side or a zero mean; 0.0 without spread.
    """
    if a.n < 2 or b.n < 2 or not a.mean or math.isnan(a.mean):
        return math.nan
    va, vb = a.std**2 / a.n, b.std**2 / b.n
    if va + vb == 0:
        return 0.0
    from scipy import stats

    dof = (va + vb) ** 2 / ((va**2 / (a.n - 1) if va else 0.0) + (vb**2 / (b.n - 1) if vb else 0.0))
    spread = float(stats.t.ppf(1 - alpha / 2, dof) + stats.t.ppf(power, dof))
    return spread * math.sqrt(va + vb) / abs(a.mean)

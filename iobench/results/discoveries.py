"""Many tests at once: adjusted p-values, and the smallest change a point's repeats could detect.

``iobench compare`` makes one Welch test per point, direction and metric: 16
points × 4 metrics is up to 64 tests, and at 5 % each, two runs of the same matrix
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

:func:`detectable` is the other side: the smallest drop and the smallest rise
of a point's mean that the test actually made — Welch's, at the level a lone
change faces after the correction, with the repeat counts of both runs —
would find with 80 % power, as ratios B/A (``×0.81`` or ``×1.24``): when they
lie beyond the minimum effect, "no change" says little.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from iobench.errors import ResultsError

#: The corrections :func:`adjust` knows, the default first.
CORRECTIONS: tuple[str, ...] = ("holm", "bh", "none")
#: How each correction reads in a sentence.
CORRECTION_NAMES: dict[str, str] = {"holm": "Holm", "bh": "Benjamini–Hochberg", "none": "no correction"}
#: The power :func:`detectable` asks of a test (the chance to see a change of that size).
POWER = 0.8


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


#: The largest rise :func:`detectable` looks for (×1000), and the deepest drop (to a millionth).
_MOST, _LEAST = 1000.0, 1e-6
#: Bisection steps on ``log(ratio)`` and ``log(noncentrality)``: far finer than the two digits shown.
_STEPS = 40
#: Quantile nodes per side of the repeats' sample variances (:func:`_needed`): 24 × 24 points.
_NODES = 24
#: The shares of the difference's variance that A's may take, where :func:`_needed` is tabulated.
_SHARES = np.linspace(0.0, 1.0, 41)


def detectable(
    n_a: np.ndarray | Sequence[int],
    n_b: np.ndarray | Sequence[int],
    cv_a: np.ndarray | Sequence[float],
    cv_b: np.ndarray | Sequence[float],
    *,
    alpha: float,
    power: float = POWER,
) -> tuple[np.ndarray, np.ndarray]:
    """The smallest drop and rise of the mean, as ratios B/A, that Welch's test finds at ``alpha`` with ``power``.

    Each side keeps the coefficient of variation its repeats showed (a
    throughput's or a latency's spread moves with its level), so B at ``r``
    times A's mean has the standard deviation ``cv_b · r · ā``: a rise widens
    B's spread and a drop narrows it, and the two answers are not mirror
    images. At ``r`` the difference of the means is normal with the standard
    error ``se = ā · √(cv_a²/n_a + cv_b² r²/n_b)``; Welch's test divides it by
    the *sample* standard error and compares it with Student's t at the
    *sample* Welch–Satterthwaite degrees of freedom, both of which vary with
    the repeats — with 2 or 3 repeats a side that costs much of the power the
    textbook formula promises. :func:`_needed` takes the expectation over
    the sample variances (chi-square, quantile nodes) to find how large
    ``|r − 1| · ā / se`` must be; the ratio returned is where it is reached
    (bisection on ``log r``).

    Parameters
    ----------
    n_a, n_b
        Repeats on each side, per row (2 or more).
    cv_a, cv_b
        Their coefficients of variation (``std / mean``).
    alpha
        The two-sided level of the test (after the family's correction:
        :func:`family_alpha`).
    power
        The chance of finding a change that large.

    Returns
    -------
    tuple of numpy.ndarray
        ``(down, up)`` per row: ``down`` below 1 (0.0 when not even a drop to
        nothing would be found), ``up`` above 1 (``inf`` when no rise up to
        ×1000 would be); 1.0 and 1.0 where neither side has any spread; NaN
        below two repeats on a side or for a CV that is NaN.
    """
    na, nb = np.asarray(n_a, dtype=np.int64), np.asarray(n_b, dtype=np.int64)
    va = np.asarray(cv_a, dtype=float) ** 2 / np.maximum(na, 1)
    vb = np.asarray(cv_b, dtype=float) ** 2 / np.maximum(nb, 1)
    down, up = np.full(len(va), np.nan), np.full(len(va), np.nan)
    usable = (na >= 2) & (nb >= 2) & np.isfinite(va) & np.isfinite(vb)
    still = usable & (va + vb == 0)
    down[still] = up[still] = 1.0
    for pair in {(int(a), int(b)) for a, b in zip(na[usable & ~still], nb[usable & ~still], strict=True)}:
        rows = usable & ~still & (na == pair[0]) & (nb == pair[1])
        needed = _needed(*pair, alpha, power)

        def found(ratio: np.ndarray, rows: np.ndarray = rows, needed: np.ndarray = needed) -> np.ndarray:
            spread = va[rows] + vb[rows] * ratio**2
            share = va[rows] / spread
            return np.asarray(np.abs(ratio - 1) / np.sqrt(spread) >= np.interp(share, _SHARES, needed))

        down[rows] = _bisect(found, math.log(_LEAST), rows.sum(), missing=0.0)
        up[rows] = _bisect(found, math.log(_MOST), rows.sum(), missing=math.inf)
    return down, up


def _bisect(
    found: Callable[[np.ndarray], np.ndarray], far: float, count: int, *, missing: float
) -> np.ndarray:
    """Per row, the ratio ``exp(x)`` between ``x = 0`` and ``far`` where ``found`` begins to hold; ``missing`` where
    it does not hold even at ``far``. ``found`` is monotone along the way (the noncentrality grows with ``|x|``).
    """
    near, end = np.zeros(count), np.full(count, far)
    reached = found(np.exp(end))
    for _ in range(_STEPS):
        middle = (near + end) / 2
        hit = found(np.exp(middle))
        end, near = np.where(hit, middle, end), np.where(hit, near, middle)
    return np.where(reached, np.exp(end), missing)


@functools.lru_cache(maxsize=64)
def _needed(n_a: int, n_b: int, alpha: float, power: float) -> np.ndarray:
    """The noncentrality ``|Δ| / se`` Welch's test needs to find Δ with ``power``, at each share of ``_SHARES``.

    ``share`` is A's part of the true variance of the difference. The sample
    variances are ``share · χ²(n_a−1)/(n_a−1)`` and ``(1 − share) ·
    χ²(n_b−1)/(n_b−1)`` (in units of ``se²``), taken at :data:`_NODES`
    quantiles each; at each pair the test rejects when the normal difference
    lies beyond ``t(1 − α/2, ν̂) · ŝe``, and the power is the mean over the
    pairs. Bisection on ``log Δ/se`` between 10⁻³ and 10⁷ (infinite where even
    that is not enough).
    """
    from scipy import special, stats

    quantiles = (np.arange(_NODES) + 0.5) / _NODES
    xa = stats.chi2.ppf(quantiles, n_a - 1) / (n_a - 1)
    xb = stats.chi2.ppf(quantiles, n_b - 1) / (n_b - 1)
    grid_a, grid_b = (g.ravel() for g in np.meshgrid(xa, xb, indexing="ij"))
    share = _SHARES[:, None]
    va, vb = share * grid_a, (1 - share) * grid_b
    dof = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
    reach = special.stdtrit(dof, 1 - alpha / 2) * np.sqrt(va + vb)

    def enough(shift: np.ndarray) -> np.ndarray:
        chance = special.ndtr(shift[:, None] - reach) + special.ndtr(-shift[:, None] - reach)
        return np.asarray(chance.mean(axis=1) >= power)

    low, high = np.full(len(_SHARES), math.log(1e-3)), np.full(len(_SHARES), math.log(1e7))
    reached = enough(np.exp(high))
    for _ in range(_STEPS):
        middle = (low + high) / 2
        hit = enough(np.exp(middle))
        high, low = np.where(hit, middle, high), np.where(hit, low, middle)
    return np.where(reached, np.exp(high), np.inf)

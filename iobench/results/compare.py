"""Two runs side by side: which points changed, by how much, and whether that is more than noise.

:func:`compare` matches the points of run A with those of run B by their
parameters, takes each point's repeats as :func:`~iobench.results.points.point_totals`
gives them (the one aggregation of a point's jobs) and, per point, direction
and metric, reports:

=========================  ==================================================================
column                     meaning
=========================  ==================================================================
``a_n``, ``b_n``           repeats with a value on each side
``a_mean``, ``b_mean``     the mean over those repeats; ``a_std``, ``b_std`` their sample std
``ratio``                  ``b_mean / a_mean``
``ratio_ci_low/high``      95 % confidence interval of the ratio: Fieller's, with Welch's
                           degrees of freedom, so it excludes 1 exactly when Welch's test
                           is significant at 5 % (the lower end clipped at 0)
``p_value``                Welch's t-test of the repeats (``scipy.stats.ttest_ind``,
                           ``equal_var=False``); NA below two repeats on a side
``p_adjusted``             ``p_value`` adjusted over every test of the comparison
                           (:mod:`iobench.results.discoveries`: Holm by default)
``detectable_down``,       the smallest drop and rise of the mean, as ratios B/A, that
``detectable_up``          Welch's test at the family's level, with these repeat counts
                           and spreads, finds with 80 % power
                           (:func:`~iobench.results.discoveries.detectable`); 0 / inf
                           when no drop / rise would be found; NA when untested
``verdict``                ``better`` / ``worse`` / ``no change`` (:data:`VERDICTS`); NA when
                           nothing can be judged (a point on one side only, a side without
                           a value, fewer than two repeats)
``reason``                 why a verdict is NA or a significant change is ``no change``
                           (a point that ran on different numbers of hosts in A and B is
                           not compared: one side's numbers are a sum over hosts);
                           when the repeats are too few to show the minimum effect;
                           repeats that did not reach steady state (``steady`` false)
=========================  ==================================================================

The verdict rule (docs/compare.md): a change is ``better`` or ``worse`` when
``p_adjusted < 0.05`` *and* the ratio lies at least ``min_effect`` away from 1 on
either side (``ratio >= 1 + m`` or ``ratio <= 1 / (1 + m)``); which of the two
follows :data:`DIRECTION` (more IOPS is better, less latency is better).
Everything else is ``no change``: with tiny variance a 0.3 % difference is
significant and still ``no change`` under the default 1 %.

The machines and settings of the two runs (kernel, fio, CPU, devices with their
model and firmware, scheduler and readahead, ``iobench system show``, iobench,
the matrix's fio options; for runs across hosts, each host's machine and
settings, by its name) are compared too: ``attrs["machines"]`` of the result
lists each fact of both runs and whether it differs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from iobench.errors import ResultsError
from iobench.matrix.display import format_value
from iobench.results.discoveries import (
    CORRECTION_NAMES,
    CORRECTIONS,
    POWER,
    adjust,
    detectable,
    family_alpha,
)
from iobench.results.fioout.jobstats import PERCENTILES
from iobench.results.loading import load, open_run
from iobench.results.points import (
    CONTEXT,
    LATENCY_KINDS,
    TELEMETRY,
    over_repeats,
    parameter_columns,
    percentile_column,
    point_totals,
)
from iobench.results.validity import CONTENTION_MEAN_PCT
from iobench.store.rundir import RunDir
from iobench.store.untrusted import MATRIX, read_text
from iobench.system.stability import setting_facts
from iobench.words import counted

#: Significance level of the test; the CI is the matching 95 %.
ALPHA = 0.05
#: What a verdict can be (NA aside: nothing could be judged).
VERDICTS: tuple[str, ...] = ("better", "worse", "no change")
#: Metrics compared when none are named (those both runs have).
DEFAULT_METRICS: tuple[str, ...] = ("iops", "bw_bytes", "lat_mean_us", "clat_p99_us")
#: The columns after the key columns, in order.
RESULT_COLUMNS: tuple[str, ...] = (
    "metric",
    "match",
    "a_point",
    "b_point",
    "a_n",
    "a_mean",
    "a_std",
    "b_n",
    "b_mean",
    "b_std",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "p_value",
    "p_adjusted",
    "detectable_down",
    "detectable_up",
    "verdict",
    "reason",
)

HIGHER, LOWER = 1, -1
#: A metric whose tested points (at least this many) all moved together is one change of the run.
DRIFT_POINTS = 3
#: ... together: every ratio beyond the minimum effect on one side of 1, within this factor of each other.
DRIFT_SPREAD = 1.25


def _direction_table() -> dict[str, int]:
    table = {
        "iops": HIGHER,
        "bw_bytes": HIGHER,
        "lat_mean_us": LOWER,
        "clat_mean_us": LOWER,
        "slat_mean_us": LOWER,
        "cpu_us_per_io": LOWER,
        "usr_cpu": LOWER,
        "sys_cpu": LOWER,
    }
    table.update({percentile_column(kind, p): LOWER for kind in LATENCY_KINDS for p in PERCENTILES})
    return table


#: Which way is better, per metric: ``+1`` more is better (throughput), ``-1`` less is better
#: (latency and its percentiles, CPU time). The one table the verdict reads; a metric not in it
#: is refused (it has no "better").
DIRECTION: dict[str, int] = _direction_table()

# A side's repeats count as having no spread below this std / |mean|: identical values can
# come out of a mean with a rounding error, which is not variance.
_NO_SPREAD = 1e-9
# Metrics that are one test at a point whose every I/O moved the same number of bytes.
_ONE_TEST = ("iops", "bw_bytes")
# Sides of a comparison, as labels in messages and in ``match``.
_A, _B = "A", "B"

Source = str | os.PathLike[str] | pd.DataFrame


@dataclass
class _Side:
    """One run being compared: its frame, point totals and what its manifest says."""

    name: str
    label: str
    frame: pd.DataFrame
    manifest: Mapping[str, Any] = field(default_factory=dict)
    matrix: Mapping[str, Any] = field(default_factory=dict)
    totals: pd.DataFrame = field(default_factory=pd.DataFrame)
    run: dict[str, Any] | None = None
    """How far the run got (a loaded frame's ``attrs["run"]``, with its ``notes``); None for a frame file."""


@dataclass(frozen=True)
class Judgement:
    """What the repeats of one point and metric say about B against A (see :func:`judge`)."""

    a_n: int
    a_mean: float
    a_std: float
    b_n: int
    b_mean: float
    b_std: float
    ratio: float
    ratio_ci_low: float
    ratio_ci_high: float
    p_value: float
    verdict: str | None
    reason: str


@dataclass(frozen=True)
class Repeats:
    """A point's values of one metric over its repeats, with their mean and sample std.

    In :func:`compare` the mean and std are :func:`~iobench.results.points.over_repeats`'s,
    as for :func:`~iobench.summarize`; :meth:`of` applies the same definitions to an array.
    ``values`` (NaN dropped) feed Welch's test.
    """

    values: np.ndarray
    mean: float
    std: float

    @property
    def n(self) -> int:
        """How many repeats have a value."""
        return len(self.values)

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> Repeats:
        """The repeats of ``values`` (NaN dropped)."""
        x = np.asarray(values, dtype=float)
        x = x[~np.isnan(x)]
        if not len(x):
            return cls(x, math.nan, math.nan)
        # over_repeats' definitions (mean, sample std) without a pandas groupby per call
        return cls(x, float(x.mean()), float(x.std(ddof=1)) if len(x) >= 2 else math.nan)


def compare(
    a: Source,
    b: Source,
    *,
    by: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    min_effect: float = 0.01,
    correction: str = "holm",
) -> pd.DataFrame:
    """Compare run B against run A, point by point: ratio B/A, its 95 % CI, Welch's p and a verdict.

    Parameters
    ----------
    a, b : str, path-like or pandas.DataFrame
        Run directories made by ``iobench run`` (or frame files from
        ``iobench parse -o``, or tidy frames). A is the baseline: ratios are B/A.
    by : sequence of str, optional
        The columns that match a point of A with a point of B. By default the
        parameter columns (matrix axes) both runs have, plus ``scheduler``,
        ``readahead_kb`` or ``target`` where they vary within a run. A column that
        is not a parameter (``target``, ``host``) splits points as in
        :func:`~iobench.results.points.point_totals`. ``direction`` (and fio's
        ``groupid``) always count.
    metrics : sequence of str, optional
        Columns of the point totals to compare, each with a direction in
        :data:`DIRECTION`. Default: those of :data:`DEFAULT_METRICS` both runs have.
    min_effect : float, default 0.01
        The smallest change that counts: a significant ratio within
        ``[1 / (1 + min_effect), 1 + min_effect]`` is still ``no change``.
    correction : {"holm", "bh", "none"}, default "holm"
        How the p-values of all the comparison's tests are adjusted before
        they are judged (:mod:`iobench.results.discoveries`).

    Returns
    -------
    pandas.DataFrame
        One row per matched key (the ``by`` columns, then ``direction``) and
        metric: the key columns, then :data:`RESULT_COLUMNS`. ``a_point``/``b_point``
        are the point numbers on each side. Rows of points that ran on one side
        only have ``match`` ``A only``/``B only`` and no verdict. ``attrs``:
        ``a``, ``b`` (labels), ``keys``, ``metrics``, ``min_effect``, ``alpha``,
        ``correction``, ``tests`` (how many were made), ``power`` and
        ``machines``: a list of ``{"fact", "a", "b", "differs"}`` for the
        machines and settings of both runs, and ``runs``: per side given as a
        run directory (``"A"``, ``"B"``), how far that run got (as a loaded
        frame's ``attrs["run"]``) with its ``notes``; ``conditions``: the
        sentences that say how the runs' conditions differ
        (:func:`conditions`); ``drifts``: per metric whose points all moved
        together, ``{"metric", "points", "ratio", "low", "high"}`` (:func:`_drifts`).

    Raises
    ------
    ResultsError
        ``a`` or ``b`` is not a run directory (or frame), has no point that
        finished ok, a ``by`` column or metric is missing or has no direction,
        the ``by`` columns do not tell a run's points apart, or no point of A
        matches one of B. The message names the fix.

    Examples
    --------
    >>> result = iobench.compare("results/before-20240101-1200", "results/after-20240102-0900")  # doctest: +SKIP
    >>> result[result.metric == "iops"][["iodepth", "ratio", "p_value", "verdict"]]  # doctest: +SKIP
    """
    if not (isinstance(min_effect, int | float) and math.isfinite(min_effect) and min_effect >= 0):
        raise ResultsError(f"min_effect must be a fraction >= 0 (0.01 is 1 %), got {min_effect!r}")
    if correction not in CORRECTIONS:
        raise ResultsError(f"correction {correction!r} is not one of {', '.join(CORRECTIONS)}")
    sides = [_open(a, _A), _open(b, _B)]
    split = list(dict.fromkeys(by or ()))
    for side in sides:
        _check_columns(side, split)
        side.totals = point_totals(_compared_columns(side.frame, metrics), by=split)
        if side.totals.empty:
            raise ResultsError(
                f"{side.name} ({side.label}): no point finished ok, nothing to compare; "
                "give a run with results (`iobench report` shows what failed)"
            )
    if by is None:
        _check_axes(sides)
    keys = _keys(sides, split if by is not None else None)
    chosen = _metrics(sides, metrics)
    groups = [_groups(side, keys, chosen) for side in sides]
    rows = _rows(keys, chosen, groups, min_effect)
    tests = _correct(rows, correction, min_effect)
    if not any(row["match"] == "both" for row in rows):
        raise ResultsError(_no_common_points(sides, keys, groups))
    drifts = _drifts(rows, chosen, min_effect)
    out = _frame(rows, keys)
    labels = [side.label for side in sides]
    if labels[0] == labels[1]:
        labels = [f"{label} ({side.name})" for label, side in zip(labels, sides, strict=True)]
    out.attrs.update(
        a=labels[0],
        b=labels[1],
        keys=list(keys),
        metrics=list(chosen),
        min_effect=float(min_effect),
        alpha=ALPHA,
        correction=correction,
        tests=tests,
        power=POWER,
        machines=[*_machine_facts(sides[0], sides[1]), *_condition_facts(sides[0], sides[1])],
        runs={side.name: side.run for side in sides if side.run is not None},
        drifts=drifts,
    )
    out.attrs["conditions"] = conditions(out.attrs["machines"])
    return out


def _compared_columns(frame: pd.DataFrame, metrics: Sequence[str] | None) -> pd.DataFrame:
    """``frame`` without what no comparison of ``metrics`` reads: the telemetry, the histograms of other latencies.

    Merging histograms is most of what point totals cost; only the kinds whose
    percentiles are compared need it (``clat`` for the default metrics).
    """
    wanted = list(metrics) if metrics is not None else list(DEFAULT_METRICS)
    kinds = {kind for kind in LATENCY_KINDS if any(m.startswith(f"{kind}_p") for m in wanted)}
    unread = [
        c
        for c in frame.columns
        if c in TELEMETRY or (c.endswith("_bins") and c.removesuffix("_bins") not in kinds)
    ]
    return frame.drop(columns=unread) if unread else frame


def judge(
    a: Repeats | Sequence[float] | np.ndarray,
    b: Repeats | Sequence[float] | np.ndarray,
    *,
    direction: int,
    min_effect: float = 0.01,
) -> Judgement:
    """Judge the repeats ``b`` against ``a`` for a metric where ``direction`` (+1/-1) is better.

    NaN values are dropped. The ratio is ``mean(b) / mean(a)``; its 95 % CI is
    Fieller's interval for a ratio of two independent means, with the degrees
    of freedom of Welch's test (Welch–Satterthwaite), NA when A's mean is not
    clear of zero. ``p_value`` is ``scipy.stats.ttest_ind(b, a,
    equal_var=False)``; when neither side has any spread the test is undefined
    and p is its limit: 0 when the means differ, 1 when they are equal.

    Parameters
    ----------
    a, b : Repeats or sequence of float
        A point's values per repeat in run A and run B.
    direction : int
        ``+1``: more is better; ``-1``: less is better (:data:`DIRECTION`).
    min_effect : float, default 0.01
        Below this relative change a significant difference is ``no change``.

    Returns
    -------
    Judgement
        Counts, means, sample stds, ratio with CI, p-value, verdict (None when
        untestable: fewer than two repeats on a side) and the reason for an
        untested or ``no change`` verdict.
    """
    ra = a if isinstance(a, Repeats) else Repeats.of(a)
    rb = b if isinstance(b, Repeats) else Repeats.of(b)
    x, y = ra.values, rb.values
    na, nb = ra.n, rb.n
    am, bm, astd, bstd = ra.mean, rb.mean, ra.std, rb.std
    ratio = bm / am if na and nb and am != 0 else math.nan
    nan = math.nan

    def result(low: float, high: float, p: float, verdict: str | None, reason: str) -> Judgement:
        return Judgement(na, am, astd, nb, bm, bstd, ratio, low, high, p, verdict, reason)

    empty = [name for name, n in ((_A, na), (_B, nb)) if n == 0]
    if empty:
        return result(nan, nan, nan, None, f"no value in {' and '.join(empty)}")
    few = [f"{name} has {n} repeat" for name, n in ((_A, na), (_B, nb)) if n < 2]
    if few:
        return result(
            nan, nan, nan, None, f"not tested: {', '.join(few)}; Welch's t-test needs 2 on each side"
        )
    va, vb = _spread(astd, am) ** 2 / na, _spread(bstd, bm) ** 2 / nb
    notes = []
    if va + vb == 0:
        p = 0.0 if am != bm else 1.0
        low = high = ratio
        notes.append("no spread in either run's repeats: p is the test's limit")
    else:
        p = _welch_p(x, y)
        dof = (va + vb) ** 2 / ((va**2 / (na - 1) if va else 0.0) + (vb**2 / (nb - 1) if vb else 0.0))
        low, high = _fieller(am, bm, va, vb, float(special.stdtrit(dof, 1 - ALPHA / 2)))
        low = max(low, 0.0) if math.isfinite(low) else low  # every judged metric is >= 0, so is the ratio
        if math.isnan(low) and math.isfinite(ratio):
            notes.append("A's mean is not clear of zero: the CI is unbounded")
    effect = _effect(am, bm)
    if am == 0 and bm != 0:
        notes.append("A's mean is 0: no ratio")
    if math.isnan(p):
        return result(low, high, p, None, "; ".join([*notes, "Welch's t-test gave no p-value"]))
    if p >= ALPHA:
        return result(low, high, p, "no change", "; ".join(notes))
    if effect < math.log1p(min_effect):
        change = f"{ratio - 1:+.2%}" if math.isfinite(ratio) else "the change"
        notes.append(f"significant, but {change} is within the minimum effect ±{min_effect:.2%}")
        return result(low, high, p, "no change", "; ".join(notes))
    verdict = "better" if (bm > am) == (direction > 0) else "worse"
    return result(low, high, p, verdict, "; ".join(notes))


def _welch_p(x: np.ndarray, y: np.ndarray) -> float:
    """The two-sided p of Welch's t-test of ``y`` against ``x``: ``scipy.stats.ttest_ind(y, x, equal_var=False)``.

    Its formulas, with scipy's Student t distribution function (``stdtr``)
    called directly: a comparison of thousands of points calls this once per
    point and metric, and ``ttest_ind`` costs a hundred times more per call.
    """
    va, vb = float(np.var(x, ddof=1)) / len(x), float(np.var(y, ddof=1)) / len(y)
    se = math.sqrt(va + vb)
    if se == 0:
        return math.nan
    t = (float(np.mean(y)) - float(np.mean(x))) / se
    dof = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1))
    return float(2 * special.stdtr(dof, -abs(t)))


def _spread(std: float, mean: float) -> float:
    return 0.0 if std <= _NO_SPREAD * abs(mean) else std


def _effect(am: float, bm: float) -> float:
    """How far B is from A as ``|log(B / A)|``: symmetric, so ×2 and ×½ are equally large."""
    if am == bm:
        return 0.0
    if am <= 0 or bm <= 0:
        return math.inf
    return abs(math.log(bm / am))


def _fieller(am: float, bm: float, va: float, vb: float, t: float) -> tuple[float, float]:
    """The ``{R : (b̄ - R ā)² <= t² (v_b + R² v_a)}`` interval; NaN when it is not bounded."""
    q = am * am - t * t * va
    if q <= 0:
        return math.nan, math.nan
    root = math.sqrt(max(t * t * (am * am * vb + bm * bm * va) - t**4 * va * vb, 0.0))
    return (am * bm - root) / q, (am * bm + root) / q


# --- the two runs ---------------------------------------------------------------------------


def _open(source: Source, name: str) -> _Side:
    if isinstance(source, pd.DataFrame):
        ids = list(source["run_id"].dropna().unique()) if "run_id" in source else []
        label = str(ids[0]) if len(ids) == 1 else name
        return _Side(name, label, source, {"machine": source.attrs.get("machine") or {}})
    path = Path(source)
    if path.is_dir():
        try:
            run = RunDir.open(path)
        except ResultsError as exc:
            raise ResultsError(
                f"{name}: {exc}; give a directory made by `iobench run` (or a frame file from `iobench parse -o`)"
            ) from None
        loaded = open_run(path)
        facts = {**loaded.state.facts(), "notes": list(loaded.notes)}
        return _Side(name, path.name, loaded.frame, _manifest(run), _matrix_data(run), run=facts)
    if path.is_file():
        frame = load(path)
        return _Side(name, path.name, frame, {"machine": frame.attrs.get("machine") or {}})
    raise ResultsError(
        f"{name}: {path}: no such directory; give a run directory made by `iobench run` "
        "(its path is printed at the end of the run)"
    )


def _manifest(run: RunDir) -> Mapping[str, Any]:
    """The manifest as a mapping: the one place this module reads it."""
    return run.manifest().model_dump(mode="json")


def _matrix_data(run: RunDir) -> Mapping[str, Any]:
    """The run's ``matrix.yaml`` as written (for its fio options); empty when unreadable."""
    from iobench.matrix.yamlsource import YamlSyntaxError, load_yaml

    try:
        data, _ = load_yaml(read_text(run.path / "matrix.yaml", MATRIX, run.path))
    except (OSError, YamlSyntaxError):
        return {}
    return data if isinstance(data, dict) else {}


def _check_columns(side: _Side, split: Sequence[str]) -> None:
    missing = [c for c in split if c not in side.frame.columns]
    if missing:
        params = [c for c in parameter_columns(side.frame) if c != "run_id"]
        raise ResultsError(
            f"--by {','.join(missing)}: no such column in {side.name} ({side.label}); its parameters: "
            f"{', '.join(params) or 'none'} (also: {', '.join(c for c in CONTEXT if c in side.frame)})"
        )


def _varies(totals: pd.DataFrame, column: str) -> bool:
    return column in totals and totals[column].astype("string").nunique(dropna=False) > 1


def _check_axes(sides: Sequence[_Side]) -> None:
    """A run whose points differ in an axis the other run lacks cannot be matched by default."""
    params = [[c for c in parameter_columns(s.totals) if s.totals[c].notna().any()] for s in sides]
    for side, own, other, theirs in (
        (sides[0], params[0], sides[1], params[1]),
        (sides[1], params[1], sides[0], params[0]),
    ):
        lone = [c for c in own if c not in theirs and _varies(side.totals, c)]
        if lone:
            raise ResultsError(
                f"{side.name} ({side.label}) has points that differ in {', '.join(lone)}, an axis "
                f"{other.name} ({other.label}) does not have: compare runs of the same matrix axes, or "
                f"name the columns to match on with --by (by=) and pass a frame filtered to one {lone[0]}"
            )


def _keys(sides: Sequence[_Side], by: Sequence[str] | None) -> list[str]:
    """The columns that match points: ``by`` (else the shared parameters and varying settings), then ``direction``."""
    a, b = (side.totals for side in sides)
    if by is not None:
        chosen = list(by)
    else:
        params = [[c for c in parameter_columns(t) if t[c].notna().any()] for t in (a, b)]
        chosen = [c for c in params[0] if c in params[1]]
        chosen += [c for c in CONTEXT if c in a and c in b and (_varies(a, c) or _varies(b, c))]
    group = ["groupid"] if all("groupid" in t and t["groupid"].notna().any() for t in (a, b)) else []
    tail = [c for c in (*group, "direction") if all(c in t for t in (a, b))]
    return list(dict.fromkeys([*chosen, *tail]))


def _metrics(sides: Sequence[_Side], metrics: Sequence[str] | None) -> list[str]:
    a, b = (side.totals for side in sides)
    if metrics is None:
        found = [m for m in DEFAULT_METRICS if all(m in t and t[m].notna().any() for t in (a, b))]
        if not found:
            raise ResultsError(
                f"A and B share none of the metrics {', '.join(DEFAULT_METRICS)}; name one with --metric"
            )
        return found
    chosen = list(dict.fromkeys(metrics))
    if not chosen:
        raise ResultsError("no metric to compare; name one with --metric (e.g. iops)")
    unknown = [m for m in chosen if m not in DIRECTION]
    if unknown:
        raise ResultsError(
            f"metric {unknown[0]!r} has no better direction to judge by; use one of "
            f"{', '.join(m for m in DIRECTION if m in a and m in b)}"
        )
    for side in sides:
        absent = [m for m in chosen if m not in side.totals or side.totals[m].isna().all()]
        if absent:
            raise ResultsError(
                f"{side.name} ({side.label}) has no {absent[0]!r} values; "
                f"drop --metric {absent[0]} or give runs that measured it"
            )
    return chosen


def _key_text(value: object) -> str:
    """A key value as text that matches across dtypes: ``4096``, ``4096.0`` and ``"4096"`` alike."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "<NA>"
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    text = str(value)
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() and "." not in text else text


@dataclass
class _Group:
    """One key's repeats on one side."""

    values: dict[str, object]
    points: list[object]
    repeats: dict[str, Repeats]
    unsteady: int = 0
    counted: int = 0
    hosts: int | None = None
    """How many hosts the point's numbers sum (the most over its repeats); None: not known."""
    total: int = 0
    """Its repeats, judged for steady state or not (``counted``: those judged)."""


def _groups(side: _Side, keys: Sequence[str], metrics: Sequence[str]) -> dict[tuple[str, ...], _Group]:
    """Each key's point and its repeats per metric: means and stds from ``over_repeats`` (as ``summarize``).

    One grouping of the point totals, in the order ``over_repeats`` groups
    them; each group's rows are a slice of the totals sorted by group (no
    filter of the whole frame per group).
    """
    totals = side.totals.reset_index(drop=True)
    if totals.empty:
        return {}
    point = "point" if "point" in totals else "source" if "source" in totals else None
    ids = totals.groupby(list(keys), dropna=False, sort=True).ngroup().to_numpy()
    summary = over_repeats(totals, keys, metrics)
    count = len(summary)
    order = np.argsort(ids, kind="stable")
    bounds = np.searchsorted(ids[order], np.arange(count + 1))
    first = order[bounds[:-1]]
    if point is not None:
        points = _point_ids(totals, point)
        several = pd.Series(points).groupby(ids).nunique().to_numpy() > 1
        if several.any():
            index = int(np.flatnonzero(several)[0])
            raise ResultsError(_ambiguous(side, keys, totals[ids == index], totals.iloc[first[index]]))
    texts = list(zip(*(map(_key_text, totals[k].to_numpy(dtype=object)[first]) for k in keys), strict=True))
    values = {
        metric: np.split(
            totals[metric].astype("Float64").to_numpy(dtype=float, na_value=np.nan)[order], bounds[1:-1]
        )
        for metric in metrics
    }
    means = {m: summary[f"{m}_mean"].to_numpy(dtype=float) for m in metrics}
    stds = {m: summary[f"{m}_std"].to_numpy(dtype=float) for m in metrics}
    steady = (
        totals["steady"].astype("boolean") if "steady" in totals else pd.Series(pd.NA, index=totals.index)
    )
    unsteady = np.bincount(ids, weights=steady.eq(False).fillna(False).to_numpy(dtype=float), minlength=count)
    judged = np.bincount(ids, weights=steady.notna().to_numpy(dtype=float), minlength=count)
    sizes = np.bincount(ids, minlength=count)
    key_values = [
        {str(k): v for k, v in r.items()} for r in totals[list(keys)].iloc[first].to_dict("records")
    ]
    number = totals[point].to_numpy(dtype=object)[first] if point is not None else [None] * count
    hosts: list[int | None] = [None] * count
    if "hosts" in totals:
        most = np.zeros(count, dtype=np.int64)
        np.maximum.at(most, ids, totals["hosts"].fillna(0).to_numpy(dtype=np.int64))
        hosts = [int(h) if h > 0 else None for h in most]
    out: dict[tuple[str, ...], _Group] = {}
    for index in range(count):
        repeats = {}
        for metric in metrics:
            group = values[metric][index]
            repeats[metric] = Repeats(
                group[~np.isnan(group)], float(means[metric][index]), float(stds[metric][index])
            )
        out[texts[index]] = _Group(
            key_values[index],
            [number[index]],
            repeats,
            int(unsteady[index]),
            int(judged[index]),
            hosts[index],
            int(sizes[index]),
        )
    return out


def _point_ids(rows: pd.DataFrame, point: str) -> list[object]:
    """Each row's point, told apart across runs (a frame may hold several): ``(run_id, point)``."""
    if "run_id" in rows:
        return list(zip(rows["run_id"].astype("string"), rows[point], strict=True))
    return list(rows[point])


def _ambiguous(side: _Side, keys: Sequence[str], rows: pd.DataFrame, first: pd.Series) -> str:
    candidates = [c for c in (*parameter_columns(rows), *CONTEXT) if c in rows]
    differing = [c for c in dict.fromkeys(candidates) if c not in keys and _varies(rows, c)]
    where = ", ".join(f"{k}={first[k]}" for k in keys) or "the whole run"
    hint = f"they differ in {', '.join(differing)}; add " + (differing[0] if differing else "a column")
    return (
        f"{side.name} ({side.label}) has several points at {where} and cannot tell which to compare: "
        f"{hint} to --by (by=)"
    )


def _rows(
    keys: Sequence[str],
    metrics: Sequence[str],
    groups: Sequence[dict[tuple[str, ...], _Group]],
    min_effect: float,
) -> list[dict[str, Any]]:
    a_groups, b_groups = groups
    order = [*a_groups, *(k for k in b_groups if k not in a_groups)]
    rows = []
    for text in order:
        ga, gb = a_groups.get(text), b_groups.get(text)
        shown = ga or gb
        assert shown is not None
        match = "both" if ga and gb else "A only" if ga else "B only"
        size = _fixed_size(ga, gb) if ga and gb else None
        for metric in metrics:
            row: dict[str, Any] = dict(shown.values)
            row.update(
                metric=metric,
                match=match,
                a_point=_point_number(ga),
                b_point=_point_number(gb),
            )
            if ga is None or gb is None:
                only = ga or gb
                assert only is not None
                side = "a" if ga else "b"
                repeats = only.repeats[metric]
                row.update(
                    {
                        f"{side}_n": repeats.n,
                        f"{side}_mean": repeats.mean,
                        f"{side}_std": repeats.std,
                        "verdict": None,
                        "reason": f"ran in {match.split()[0]} only",
                    }
                )
            elif _apart(ga, gb):
                row.update(_unjudged_hosts(ga, gb, metric))
            else:
                judged = judge(
                    ga.repeats[metric], gb.repeats[metric], direction=DIRECTION[metric], min_effect=min_effect
                )
                row.update({c: getattr(judged, c) for c in RESULT_COLUMNS if hasattr(judged, c)})
                row.update(_repeats=(ga.repeats[metric], gb.repeats[metric]), _key=text, _size=size)
                settling = [_settling(name, g) for name, g in ((_A, ga), (_B, gb))]
                row["reason"] = "; ".join(filter(None, [row["reason"], *settling]))
            rows.append(row)
    return rows


def _settling(name: str, group: _Group) -> str:
    """``1 of 3 repeats of A not steady (1 could not be judged)``; empty when every repeat judged was steady.

    A repeat the steady-state check could not judge (too short, no log) is said
    once some repeats of the point were judged: it is neither steady nor not.
    """
    unjudged = group.total - group.counted if group.counted else 0
    of = f"of {counted(group.total, 'repeat')} of {name}"
    if group.unsteady:
        tail = f" ({unjudged} could not be judged)" if unjudged else ""
        return f"{group.unsteady} {of} not steady{tail}"
    if unjudged:
        return f"{unjudged} {of} could not be judged steady or not"
    return ""


def _fixed_size(a: _Group, b: _Group) -> float | None:
    """The bytes per I/O of every repeat of both sides when it is one number (a fixed ``bs``), else None."""
    sizes = []
    for group in (a, b):
        iops, bw = group.repeats.get("iops"), group.repeats.get("bw_bytes")
        if iops is None or bw is None or iops.n != bw.n or not iops.n or not (iops.values > 0).all():
            return None
        sizes.append(bw.values / iops.values)
    every = np.concatenate(sizes)
    size = float(every[0])
    return size if np.allclose(every, size, rtol=1e-6, atol=0.0) else None


def _apart(a: _Group, b: _Group) -> bool:
    """Whether the two sides of a point ran on different numbers of hosts (known on both)."""
    return a.hosts is not None and b.hosts is not None and a.hosts != b.hosts


def _hosts_text(count: int | None) -> str:
    return "this machine or one host" if count == 1 else f"{count} hosts at once (their sum)"


def _unjudged_hosts(a: _Group, b: _Group, metric: str) -> dict[str, Any]:
    """A point that ran on different numbers of hosts in A and B: the means side by side, no test, no verdict."""
    ra, rb = a.repeats[metric], b.repeats[metric]
    return {
        "a_n": ra.n,
        "a_mean": ra.mean,
        "a_std": ra.std,
        "b_n": rb.n,
        "b_mean": rb.mean,
        "b_std": rb.std,
        "ratio": math.nan,  # the ratio of a sum to one host's number is no change of anything
        "verdict": None,
        "reason": (
            f"not compared: A ran on {_hosts_text(a.hosts)}, B on {_hosts_text(b.hosts)}; a sum over "
            "hosts is not one host's number. Compare runs on as many hosts (each host with --by host, "
            "or the host_count axis in one run)"
        ),
    }


def _correct(rows: list[dict[str, Any]], correction: str, min_effect: float) -> int:
    """Adjust the p-values of every test made, judge by them, say what each point could detect.

    Returns the number of tests: :func:`_one_test` rows (``iops`` and
    ``bw_bytes`` of a point whose block size is fixed) are one test, counted
    once and sharing its adjusted p. A ``better``/``worse`` whose adjusted p
    is not below :data:`ALPHA` becomes ``no change`` with the reason; a ``no
    change`` whose repeats could not show the minimum effect says so.
    """
    tested = [row for row in rows if "_repeats" in row and _finite(row.get("p_value"))]
    ids: dict[tuple[Any, ...], int] = {}
    test_of = []
    for index, row in enumerate(tested):
        shared = _one_test(row)
        test_of.append(ids.setdefault(shared if shared is not None else ("row", index), len(ids)))
    p_of: dict[int, float] = {}
    for t, row in zip(test_of, tested, strict=True):
        p_of.setdefault(t, float(row["p_value"]))
    tests = len(p_of)
    adjusted_of = adjust([p_of[t] for t in range(tests)], correction).tolist()
    name = CORRECTION_NAMES[correction]
    level = family_alpha(ALPHA, tests, correction)
    after = "" if correction == "none" or tests < 2 else f", after {name} over {tests} tests"
    repeats = [row["_repeats"] for row in tested]
    down, up = detectable(
        [a.n for a, _ in repeats],
        [b.n for _, b in repeats],
        [_cv(a) for a, _ in repeats],
        [_cv(b, a.mean) for a, b in repeats],
        alpha=level,
    )
    for index, (row, t) in enumerate(zip(tested, test_of, strict=True)):
        p = adjusted_of[t]
        row["p_adjusted"] = p
        notes = [row["reason"]] if row.get("reason") else []
        if row["verdict"] in ("better", "worse") and p >= ALPHA:
            notes.insert(
                0,
                f"p = {float(row['p_value']):.3f} is not significant after {name}'s correction over "
                f"{tests} tests (adjusted p {p:.3f})",
            )
            row["verdict"] = "no change"
        a, b = row["_repeats"]
        row["detectable_down"], row["detectable_up"] = float(down[index]), float(up[index])
        known = not (math.isnan(row["detectable_down"]) or math.isnan(row["detectable_up"]))
        if (
            row["verdict"] == "no change"
            and known
            and not (
                row["detectable_down"] >= 1 / (1 + min_effect) and row["detectable_up"] <= 1 + min_effect
            )
        ):
            notes.append(
                f"too few repeats for the minimum effect: {a.n} and {b.n} repeats could detect "
                f"{detectable_text(row['detectable_down'], row['detectable_up'])} ({POWER:.0%} power{after}), "
                f"not ±{min_effect:.1%}"
            )
        row["reason"] = "; ".join(notes)
    for row in rows:
        for private in ("_repeats", "_key", "_size"):
            row.pop(private, None)
    return tests


def detectable_text(down: float, up: float) -> str:
    """``×0.81 or ×1.24``; ``no drop`` (0) or ``no rise`` (inf) where none would be found; ``–`` when NA."""
    if math.isnan(down) or math.isnan(up):
        return "–"
    low = f"×{down:.2f}" if down > 0 else "no drop"
    high = f"×{up:.2f}" if math.isfinite(up) else "no rise"
    return f"{low} or {high}"


def _cv(repeats: Repeats, mean: float | None = None) -> float:
    """``std / |mean|`` of a side's repeats (of ``mean`` when the side's own is 0); 0 without spread."""
    scale = abs(repeats.mean) or abs(mean or 0.0)
    return _spread(repeats.std, repeats.mean) / scale if scale else math.nan


def _one_test(row: dict[str, Any]) -> tuple[Any, ...] | None:
    """The key of the test ``row`` shares with another metric's row, or None when it is a test of its own.

    ``iops`` and ``bw_bytes`` of one point are one test when every repeat of
    both runs moved bytes in the same size per I/O (a fixed ``bs``): the
    bandwidth is then the IOPS times a constant, Welch's statistic is the same,
    and counting it twice would tighten the correction for nothing.
    """
    if row["metric"] not in _ONE_TEST:
        return None
    size = row.get("_size")
    return None if size is None else ("size", row["_key"], size)


def _drifts(rows: list[dict[str, Any]], metrics: Sequence[str], min_effect: float) -> list[dict[str, Any]]:
    """The metrics whose tested points all moved together: one change of the run, not one per point.

    A metric drifts when at least :data:`DRIFT_POINTS` points were tested,
    every one of their ratios lies beyond the minimum effect on the same side
    of 1, the largest is within a factor :data:`DRIFT_SPREAD` of the smallest,
    and at least one point's verdict is a change. Each of its rows' reason
    then begins with the run's ratio.
    """
    found = []
    for metric in metrics:
        tested = [r for r in rows if r["metric"] == metric and r.get("verdict") in VERDICTS]
        ratios = np.array([float(r["ratio"]) for r in tested if _finite(r.get("ratio"))])
        if len(tested) < DRIFT_POINTS or len(ratios) < len(tested) or (ratios <= 0).any():
            continue
        same_side = bool((ratios >= 1 + min_effect).all() or (ratios <= 1 / (1 + min_effect)).all())
        changed = any(r["verdict"] in ("better", "worse") for r in tested)
        if not (same_side and changed and ratios.max() <= DRIFT_SPREAD * ratios.min()):
            continue
        ratio = float(np.exp(np.log(ratios).mean()))
        drift = {
            "metric": metric,
            "points": len(tested),
            "ratio": ratio,
            "low": float(ratios.min()),
            "high": float(ratios.max()),
        }
        found.append(drift)
        for row in tested:
            row["reason"] = "; ".join(filter(None, [drift_text(drift), row.get("reason")]))
    return found


def drift_text(drift: Mapping[str, Any]) -> str:
    """``every one of the 12 points moved together, ×0.70 (×0.68 to ×0.72): one change of the whole run``."""
    return (
        f"every one of the {drift['points']} points moved together, ×{drift['ratio']:.2f} "
        f"(×{drift['low']:.2f} to ×{drift['high']:.2f}): one change of the whole run, not "
        f"{drift['points']} changes of their own"
    )


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _point_number(group: _Group | None) -> object:
    if group is None or not group.points:
        return None
    return group.points[0]


def _frame(rows: list[dict[str, Any]], keys: Sequence[str]) -> pd.DataFrame:
    columns = [*keys, *RESULT_COLUMNS]
    data: dict[str, Any] = {}
    for column in columns:
        values = [row.get(column) for row in rows]
        if column in ("a_n", "b_n"):
            data[column] = pd.array([0 if v is None else v for v in values], dtype="Int64")
        elif column in ("metric", "match", "verdict", "reason"):
            data[column] = pd.array(values, dtype="string")
        elif column in RESULT_COLUMNS and column not in ("a_point", "b_point"):
            floats = [math.nan if v is None or _missing(v) else float(v) for v in values]
            data[column] = pd.Series(floats, dtype="Float64").mask(np.isnan(floats)).array
        else:
            data[column] = _key_array([None if _missing(v) else v for v in values])
    frame = pd.DataFrame(data, columns=columns)
    frame["reason"] = frame["reason"].fillna("")
    return frame


def _key_array(values: list[Any]) -> Any:
    """A key column: whole numbers as ``Int64`` (one side may hold 4096, the other 4096.0), else as pandas infers."""
    numbers = [v for v in values if v is not None]
    if numbers and all(
        isinstance(v, int | float | np.number) and not isinstance(v, bool | np.bool_) for v in numbers
    ):
        if all(float(v).is_integer() for v in numbers):
            return pd.array([None if v is None else int(v) for v in values], dtype="Int64")
    return pd.array(values)


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _no_common_points(
    sides: Sequence[_Side], keys: Sequence[str], groups: Sequence[dict[tuple[str, ...], _Group]]
) -> str:
    """Why nothing matched: the key columns whose values differ between the runs, with each run's values."""
    seen = [[{text[i] for text in found} for i in range(len(keys))] for found in groups]
    index = [i for i in range(len(keys)) if seen[0][i] != seen[1][i]] or list(range(len(keys)))

    def values(found: dict[tuple[str, ...], _Group]) -> str:
        texts = sorted(
            {" ".join(f"{keys[i]}={format_value(keys[i], text[i])}" for i in index) for text in found}
        )
        more = f" and {len(texts) - 4} more" if len(texts) > 4 else ""
        return "; ".join(texts[:4]) + more

    return (
        f"no point of A ({sides[0].label}) matches a point of B ({sides[1].label}): they differ in "
        f"{', '.join(keys[i] for i in index)} (matched on {', '.join(keys)}): A has {values(groups[0])}, "
        f"B has {values(groups[1])}. Compare runs of the same matrix axes, or match on fewer columns "
        "with --by (by=)"
    )


# --- machines ---------------------------------------------------------------------------------

_MACHINE = (
    ("host", "host"),
    ("kernel", "kernel"),
    ("os", "OS"),
    ("cpu_model", "CPU"),
    ("cpu_count", "CPUs"),
    ("fio_version", "fio"),
    ("fio_binary", "fio binary"),
    ("numactl_version", "numactl"),
    ("iobench_version", "iobench"),
    ("python", "Python"),
)
_DISK = (
    ("name", "device"),
    ("model", "model"),
    ("firmware", "firmware"),
    ("size_bytes", "size (bytes)"),
    ("rotational", "rotational"),
    ("scheduler", "scheduler before the run"),
    ("readahead_kb", "readahead KiB before the run"),
)
_RUN = (("repeat", "repeats"), ("order", "order"), ("drop_caches", "drop caches"))
#: What a manifest keeps of each host of a run across hosts (``hosts:``), beside its settings.
_HOST = (
    ("hostname", "hostname"),
    ("ssh", "ssh"),
    ("kernel", "kernel"),
    ("cpu_model", "CPU"),
    ("cpu_count", "CPUs"),
    ("fio_version", "fio"),
    ("numactl", "numactl"),
)


def _text(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value)
    return str(value)


def _facts(side: _Side) -> dict[str, str]:
    """What the run's manifest, matrix and frame say about where and how it ran, by label."""
    machine = side.manifest.get("machine") or {}
    facts = {label: _text(machine[key]) for key, label in _MACHINE if key in machine}
    hosts = [h for h in side.manifest.get("hosts") or [] if isinstance(h, dict)]
    if hosts:  # fio ran on these; `machine` is the client that drove them
        facts["host"] = ", ".join(str(h.get("host")) for h in hosts)
        facts["client (fio --client)"] = _text(machine.get("host"))
    counts = side.totals["hosts"].dropna() if "hosts" in side.totals else pd.Series(dtype="Int64")
    if len(counts):
        facts["hosts per point"] = ", ".join(str(int(c)) for c in sorted(set(counts)))
    nodes = (machine.get("topology") or {}).get("nodes")
    if nodes:
        facts["NUMA nodes"] = str(len(nodes))
    for number, target in enumerate(machine.get("targets") or [], 1):
        facts[f"target {number} path"] = _text(target.get("path"))
        disks = target.get("disks") or []
        for key, label in _DISK:
            if any(d.get(key) is not None for d in disks):
                facts[f"target {number} {label}"] = ", ".join(_text(d.get(key)) for d in disks)
        if target.get("kind") == "file":  # a file's size is its own; its disk's is the disk's
            disk_size = facts.pop(f"target {number} size (bytes)", None)
            if disk_size is not None:
                facts[f"target {number} disk size (bytes)"] = disk_size
            facts[f"target {number} size (bytes)"] = _text(target.get("size"))
    for key, label in _RUN:
        if key in side.manifest:
            facts[label] = _text(side.manifest[key])
    # `iobench system show` when each run started (runs from before it have none)
    facts.update(
        {f"system: {label}": value for label, value in setting_facts(machine.get("system") or []).items()}
    )
    # each host's machine and settings, matched between the runs by the host's name
    for host in side.manifest.get("hosts") or []:
        if not isinstance(host, dict):
            continue
        name = host.get("host")
        facts.update({f"host {name}: {label}": _text(host[key]) for key, label in _HOST if key in host})
        settings = setting_facts(host.get("system") or [])
        facts.update({f"host {name}: system: {label}": value for label, value in settings.items()})
    totals = side.totals
    params = [c for c in parameter_columns(totals) if totals[c].notna().any()]
    facts["matrix axes"] = ", ".join(params) or "none"
    if "jobname" in side.frame:  # what fio ran, where nothing else names it (frames from `iobench parse`)
        facts["fio jobs"] = ", ".join(sorted(side.frame["jobname"].dropna().astype(str).unique())) or "–"
    for column, label in (
        ("scheduler", "scheduler during the points"),
        ("readahead_kb", "readahead KiB during the points"),
    ):
        if column in totals and totals[column].notna().any():
            facts[label] = ", ".join(sorted({str(v) for v in totals[column].dropna()}))
    fio = side.matrix.get("fio")
    if isinstance(fio, dict):
        # YAML null is fio's word for the null engine, not a missing value.
        facts.update({f"fio option {k}": "null" if v is None else _text(v) for k, v in fio.items()})
    return facts


def _machine_facts(a: _Side, b: _Side) -> list[dict[str, Any]]:
    """Every fact of either run, in order: ``{"fact", "a", "b", "differs"}`` (``–`` where a run lacks it)."""
    fa, fb = _facts(a), _facts(b)
    out = []
    for fact in dict.fromkeys([*fa, *fb]):
        va, vb = fa.get(fact, "–"), fb.get(fact, "–")
        out.append({"fact": fact, "a": va, "b": vb, "differs": va != vb})
    return out


def _condition_facts(a: _Side, b: _Side) -> list[dict[str, Any]]:
    """What the runs' own measurements say of their conditions: other processes' CPU, validity findings.

    ``{"fact", "a", "b", "differs"}`` as :func:`_machine_facts`. Other
    processes' CPU (the telemetry's ``cpu_other_pct``, mean over the points ×
    repeats) differs when the means are :data:`~iobench.results.validity.CONTENTION_MEAN_PCT`
    points apart or more — the share the ``cpu-contention`` check flags; a
    validity check's findings differ when it found something in one run and
    not in the other, or at a different count.
    """
    out = []
    loads = [_other_cpu(side.frame) for side in (a, b)]
    if any(load is not None for load in loads):
        texts = ["–" if load is None else f"{load[0]:.1f} % (most {load[1]:.0f} %)" for load in loads]
        known = [load for load in loads if load is not None]
        differs = len(known) == 2 and abs(known[0][0] - known[1][0]) >= CONTENTION_MEAN_PCT
        out.append({"fact": OTHER_CPU, "a": texts[0], "b": texts[1], "differs": differs})
    counts = [_findings(side.frame) for side in (a, b)]
    if all(c is not None for c in counts):
        judged = [c[1] for c in counts if c is not None]
        found = [c[0] for c in counts if c is not None]
        for code in dict.fromkeys([*found[0], *found[1]]):
            texts = [f"{f.get(code, 0)} of {n}" for f, n in zip(found, judged, strict=True)]
            differs = (found[0].get(code, 0) > 0) != (found[1].get(code, 0) > 0) or texts[0] != texts[1]
            out.append({"fact": f"{FINDINGS}{code}", "a": texts[0], "b": texts[1], "differs": differs})
    return out


#: The condition facts' names (:func:`_condition_facts`).
OTHER_CPU = "other processes' share of the points' CPUs (mean, most)"
FINDINGS = "points × repeats with the validity finding "


def _other_cpu(frame: pd.DataFrame) -> tuple[float, float] | None:
    """The mean and the largest ``cpu_other_pct`` over a run's points × repeats; None without telemetry."""
    if "cpu_other_pct" not in frame or "point" not in frame:
        return None
    keys = [c for c in ("run_id", "point", "repeat") if c in frame]
    values = frame.drop_duplicates(keys)["cpu_other_pct"].astype("Float64").dropna()
    return (float(values.mean()), float(values.max())) if len(values) else None


def _findings(frame: pd.DataFrame) -> tuple[dict[str, int], int] | None:
    """Per validity code, the points × repeats it found, and how many were judged; None without verdicts."""
    if "validity" not in frame or "point" not in frame:
        return None
    keys = [c for c in ("run_id", "point", "repeat") if c in frame]
    codes = frame.drop_duplicates(keys)["validity"].dropna().astype(str)
    counted: dict[str, int] = {}
    for text in codes:
        for code in text.split():
            counted[code] = counted.get(code, 0) + 1
    return counted, len(codes)


def conditions(facts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The sentences that say the runs were measured under different conditions (empty when none differ).

    Other processes' CPU and each validity finding that differs get a
    sentence of their own; the machine and settings facts that differ are
    counted in one.
    """
    out = []
    settings = 0
    for fact in facts:
        if not fact.get("differs"):
            continue
        name = str(fact["fact"])
        if name == OTHER_CPU:
            out.append(f"other processes took {fact['a']} of the points' CPUs in A, {fact['b']} in B")
        elif name.startswith(FINDINGS):
            code = name.removeprefix(FINDINGS)
            out.append(f"the validity check {code} found {fact['a']} points × repeats in A, {fact['b']} in B")
        else:
            settings += 1
    if settings:
        out.append(
            f"{settings} fact{'s' if settings > 1 else ''} of the machines and settings differ (listed)"
        )
    return out


def key_columns(comparison: pd.DataFrame) -> list[str]:
    """The columns of a :func:`compare` result that identify a point (those before ``metric``)."""
    if "metric" not in comparison.columns:
        raise ResultsError("not a comparison frame (no `metric` column); make one with iobench.compare")
    columns = list(comparison.columns)
    return columns[: columns.index("metric")]

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
``detectable``             the smallest change (a fraction of A's mean) the repeats could
                           show with 80 % power at the family's level; NA when untested
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
    detectable_change,
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
from iobench.store.rundir import RunDir
from iobench.store.untrusted import MATRIX, read_text
from iobench.system.stability import setting_facts

#: Significance level of the test; the CI is the matching 95 %.
ALPHA = 0.05
#: What a verdict can be (NA aside: nothing could be judged).
VERDICTS: tuple[str, ...] = ("better", "worse", "no change")
#: Metrics compared when none are named (those both runs have).
DEFAULT_METRICS: tuple[str, ...] = ("iops", "bw_bytes", "lat_mean_us", "clat_p99_us")
#: ``match`` values: the point ran in both runs, or in one only.
MATCHES: tuple[str, ...] = ("both", "A only", "B only")
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
    "detectable",
    "verdict",
    "reason",
)

HIGHER, LOWER = 1, -1


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
        frame's ``attrs["run"]``) with its ``notes``.

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
        machines=_machine_facts(sides[0], sides[1]),
        runs={side.name: side.run for side in sides if side.run is not None},
    )
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
    counted = np.bincount(ids, weights=steady.notna().to_numpy(dtype=float), minlength=count)
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
            int(counted[index]),
            hosts[index],
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
                row["_repeats"] = (ga.repeats[metric], gb.repeats[metric])
                settling = [
                    f"{g.unsteady} of {g.counted} repeats of {name} not steady"
                    for name, g in ((_A, ga), (_B, gb))
                    if g.unsteady
                ]
                row["reason"] = "; ".join(filter(None, [row["reason"], *settling]))
            rows.append(row)
    return rows


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

    Returns the number of tests. A ``better``/``worse`` whose adjusted p is not
    below :data:`ALPHA` becomes ``no change`` with the reason; a ``no change``
    whose repeats could not show the minimum effect says so.
    """
    tested = [row for row in rows if "_repeats" in row and _finite(row.get("p_value"))]
    adjusted = adjust([float(row["p_value"]) for row in tested], correction)
    name = CORRECTION_NAMES[correction]
    level = family_alpha(ALPHA, len(tested), correction)
    after = "" if correction == "none" or len(tested) < 2 else f", after {name} over {len(tested)} tests"
    for row, p in zip(tested, adjusted, strict=True):
        row["p_adjusted"] = float(p)
        notes = [row["reason"]] if row.get("reason") else []
        if row["verdict"] in ("better", "worse") and p >= ALPHA:
            notes.insert(
                0,
                f"p = {float(row['p_value']):.3f} is not significant after {name}'s correction over "
                f"{len(tested)} tests (adjusted p {p:.3f})",
            )
            row["verdict"] = "no change"
        a, b = row["_repeats"]
        row["detectable"] = detectable_change(a, b, alpha=level)
        if row["verdict"] == "no change" and row["detectable"] > min_effect:
            notes.append(
                f"too few repeats for the minimum effect: {a.n} and {b.n} repeats could detect ±{row['detectable']:.1%} "
                f"({POWER:.0%} power{after}), more than ±{min_effect:.1%}"
            )
        row["reason"] = "; ".join(notes)
    for row in rows:
        row.pop("_repeats", None)
    return len(tested)


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


def key_columns(comparison: pd.DataFrame) -> list[str]:
    """The columns of a :func:`compare` result that identify a point (those before ``metric``)."""
    if "metric" not in comparison.columns:
        raise ResultsError("not a comparison frame (no `metric` column); make one with iobench.compare")
    columns = list(comparison.columns)
    return columns[: columns.index("metric")]

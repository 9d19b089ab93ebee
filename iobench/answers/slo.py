"""The highest load that meets a latency target: each probe judged, the search, the answer (docs/slo.md).

The search is a generator (:func:`searching`): it yields the next load to
probe and is sent each probe's :class:`Probe`, so the same rules drive a
simulated device in a test (:func:`search`) and the runner's points, one
decided after another.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from iobench.errors import ResultsError
from iobench.matrix.slospec import SloSpec
from iobench.results.fioout.bins import decode
from iobench.results.points import point_totals

#: Each step of the bracket multiplies the load by this much (then bisection, on the log of the load).
BRACKET_FACTOR = 10
#: How often a load is measured at most while its interval straddles the limit.
REPEATS = 3
#: The normal quantile of the probes' two-sided 95 % intervals.
Z95 = 1.959963984540054

Status = Literal["found", "below-min", "above-max", "unstable"]


@dataclass(frozen=True)
class Probe:
    """One measurement at one load: the metric (µs) and its 95 % interval; ``behind``: the load was not kept up."""

    load: int
    value: float | None
    low: float | None = None
    high: float | None = None
    behind: bool = False

    def verdict(self, limit_us: float) -> Literal["pass", "fail", "straddle"]:
        """``pass``: the interval lies at or below the limit; ``fail``: above it, behind, or nothing measured."""
        if self.behind or self.value is None or math.isnan(self.value):
            return "fail"
        low = self.value if self.low is None else self.low
        high = self.value if self.high is None else self.high
        if high <= limit_us:
            return "pass"
        return "fail" if low > limit_us else "straddle"


@dataclass(frozen=True)
class Answer:
    """What one search found (docs/slo.md, "The answer")."""

    status: Status
    max_load: int | None
    ci_low: int | None
    ci_high: int | None
    probes: tuple[Probe, ...] = field(default=())


def snapped(load: float, step: int, *, up: bool = False) -> int:
    """``load`` as a whole multiple of ``step`` (at least one step): down, or ``up``."""
    count = math.ceil(load / step - 1e-9) if up else math.floor(load / step + 1e-9)
    return max(1, count) * step


def _decide(
    load: int, spec: SloSpec, probes: list[Probe], decided: dict[int, bool]
) -> Generator[int, Probe, bool | None]:
    """Probe ``load`` until it passes or fails; None when the probe budget ran out first."""
    values: list[float] = []
    for _ in range(REPEATS):
        if len(probes) >= spec.max_probes:
            return None
        probe = yield load
        probes.append(probe)
        verdict = probe.verdict(spec.limit_us)
        if verdict != "straddle":
            decided[load] = verdict == "pass"
            return decided[load]
        values.append(float(probe.value or 0.0))
    decided[load] = statistics.median(values) <= spec.limit_us
    return decided[load]


def _answer(status: Status, spec: SloSpec, probes: list[Probe], passed: int | None) -> Answer:
    """The answer, its interval the loads the probes' own intervals leave open around ``passed``."""
    sure_pass = [p.load for p in probes if p.verdict(spec.limit_us) == "pass"]
    sure_fail = [p.load for p in probes if p.verdict(spec.limit_us) == "fail"]
    low = max((x for x in sure_pass if passed is None or x <= passed), default=None)
    high = min((x for x in sure_fail if passed is None or x > passed), default=None)
    return Answer(status, passed, low, high, tuple(probes))


def searching(spec: SloSpec, step: int = 1) -> Generator[int, Probe, Answer]:
    """The search: yields each load to probe (a multiple of ``step``), is sent its :class:`Probe`.

    The first probe is at ``min_load``; failing there ends it ``below-min``.
    Then the load grows :data:`BRACKET_FACTOR`-fold (the last step at
    ``max_load``; passing there ends it ``above-max``) until a probe fails.
    Then bisection at the geometric middle of the highest passing and lowest
    failing loads, until they are ``resolution`` apart or one ``step``. A
    probe whose interval straddles the limit is measured again, at most
    :data:`REPEATS` times, then decided by the median of its values. Running
    out of ``max_probes`` ends it ``unstable``, with the best load so far.
    """
    probes: list[Probe] = []
    decided: dict[int, bool] = {}
    lowest, highest = snapped(spec.min_load, step, up=True), snapped(spec.max_load, step)
    highest = max(highest, lowest)
    ok = yield from _decide(lowest, spec, probes, decided)
    if ok is None:
        return _answer("unstable", spec, probes, None)
    if not ok:
        return _answer("below-min", spec, probes, None)
    passed, failed, load = lowest, None, lowest
    while failed is None:
        if load >= highest:
            return _answer("above-max", spec, probes, passed)
        load = min(snapped(load * BRACKET_FACTOR, step), highest)
        ok = yield from _decide(load, spec, probes, decided)
        if ok is None:
            return _answer("unstable", spec, probes, passed)
        if ok:
            passed = load
        else:
            failed = load
    while failed / passed - 1 > spec.resolution and failed - passed > step:
        middle = snapped(math.sqrt(passed * failed), step)
        if middle <= passed:
            middle = passed + step
        if middle >= failed:
            break
        ok = yield from _decide(middle, spec, probes, decided)
        if ok is None:
            return _answer("unstable", spec, probes, passed)
        if ok:
            passed = middle
        else:
            failed = middle
    return _answer("found", spec, probes, passed)


def search(probe: Callable[[int], Probe], spec: SloSpec, step: int = 1) -> Answer:
    """Run :func:`searching` with ``probe`` measuring each load (a simulated device, in tests)."""
    steps = searching(spec, step)
    load = next(steps)
    while True:
        try:
            load = steps.send(probe(load))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


# --- one probe's numbers -------------------------------------------------------------------------


def _percent(metric: str) -> float | None:
    """``clat_p99_9_us`` → 99.9; None for a mean."""
    stat = metric.split("_", 1)[1].removesuffix("_us")
    if not stat.startswith("p"):
        return None
    return float(stat[1:].replace("_", "."))


def _merged(cells: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Every row's json+ bins added up: bin values (µs) and counts, sorted."""
    bins = decode(cells)
    if not len(bins.rows):
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    values, where = np.unique(bins.values_ns, return_inverse=True)
    counts = np.bincount(where, weights=bins.counts).astype(np.int64)
    return values / 1000.0, counts


def interval(cells: pd.Series, metric: str) -> tuple[float, float] | None:
    """The 95 % interval of ``metric`` over a point's merged json+ bins; None without bins.

    A percentile's: the bins holding the order statistics ``n·q ± z·√(n·q·(1−q))``
    (the binomial interval of a quantile, no distribution assumed). A mean's:
    the bins' mean ± z·sd/√n.
    """
    values, counts = _merged(cells)
    total = int(counts.sum())
    if total == 0:
        return None
    percent = _percent(metric)
    if percent is None:
        mean = float(np.average(values, weights=counts))
        sd = math.sqrt(float(np.average((values - mean) ** 2, weights=counts)))
        half = Z95 * sd / math.sqrt(total)
        return mean - half, mean + half
    q = percent / 100.0
    spread = Z95 * math.sqrt(total * q * (1 - q))
    running = np.cumsum(counts)
    low_rank, high_rank = max(1.0, total * q - spread), min(float(total), total * q + spread)
    low = values[min(int(np.searchsorted(running, low_rank)), len(values) - 1)]
    high = values[min(int(np.searchsorted(running, high_rank)), len(values) - 1)]
    return float(low), float(high)


def measure(frame: pd.DataFrame, metric: str, load: int) -> Probe:
    """One point × repeat's rows judged: the metric as :func:`point_totals` gives it, with its interval.

    A point of several directions counts its worst one. ``clat_bins`` give
    the interval of every metric (the frame keeps no other kind's bins for
    every point); without them the interval is the value itself.
    """
    totals = point_totals(frame)
    if metric not in totals or totals[metric].isna().all():
        return Probe(load, None)
    worst = int(totals[metric].astype("float64").to_numpy().argmax())
    value = float(totals[metric].iloc[worst])
    rows = frame
    if "direction" in frame and "direction" in totals:
        rows = frame[frame["direction"].eq(totals["direction"].iloc[worst]).fillna(False)]
    found = interval(rows["clat_bins"], metric) if "clat_bins" in rows else None
    if found is None:
        return Probe(load, value, value, value)
    low, high = found
    if _percent(metric) is None:  # centred on fio's own mean, with the bins' width
        half = (high - low) / 2
        return Probe(load, value, value - half, value + half)
    return Probe(load, value, min(low, value), max(high, value))


def sentence(spec: SloSpec, answer: Answer, what: str = "IOPS") -> str:
    """``clat_p99_us ≤ 5ms up to 1,720 IOPS (95 % CI 1,680–1,760), 7 probes``."""
    head = f"{spec.metric} ≤ {spec.limit}"
    count = f"{len(answer.probes)} probe{'s' if len(answer.probes) != 1 else ''}"
    if answer.status == "below-min":
        lowest = answer.probes[0] if answer.probes else None
        seen = f" ({lowest.value:,.0f} µs)" if lowest and lowest.value is not None else ""
        return f"{head}: not met at the lowest load {spec.min_load:,} {what}{seen}, {count}"
    if answer.max_load is None:
        return f"{head}: unstable, no load decided, {count}"
    ci = ""
    if answer.ci_low is not None and answer.ci_high is not None:
        ci = f" (95 % CI {answer.ci_low:,}–{answer.ci_high:,})"
    tail = {
        "above-max": " (met at max_load; the limit may allow more)",
        "unstable": " (unstable: probes ran out)",
    }
    return f"{head} up to {answer.max_load:,} {what}{ci}, {count}{tail.get(answer.status, '')}"


# --- the answers of a run --------------------------------------------------------------------------

#: The file of a run directory that holds each group's answer (written by the runner as each search ends).
ANSWERS_FILE = "slo.json"
#: ``slo.json`` is read only up to this size.
MAX_ANSWERS_BYTES = 16 << 20
#: The columns of :func:`slo` after the group's axes.
COLUMNS: tuple[str, ...] = (
    "metric",
    "limit",
    "limit_us",
    "load",
    "max_load",
    "ci_low",
    "ci_high",
    "probes",
    "status",
)


def _records(run: str | os.PathLike[str]) -> list[dict[str, Any]]:
    path = Path(getattr(run, "run_dir", run)) / ANSWERS_FILE
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_ANSWERS_BYTES + 1)
    except FileNotFoundError:
        raise ResultsError(f"{path.parent}: no {ANSWERS_FILE}: the run has no `slo:` section") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_ANSWERS_BYTES:
        raise ResultsError(f"{path}: larger than {MAX_ANSWERS_BYTES >> 20} MiB, not an answers file")
    try:
        records = json.loads(data)
    except ValueError as exc:
        raise ResultsError(f"{path}: not JSON ({exc})") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ResultsError(f"{path}: not a list of answers")
    return records


def slo(run: str | os.PathLike[str] | Any) -> pd.DataFrame:
    """The highest load that met the run's latency target, one row per combination of the other axes.

    Parameters
    ----------
    run
        A run directory of a matrix with ``slo:`` (a path, or what :func:`iobench.run` returned).

    Returns
    -------
    pandas.DataFrame
        The group's axis columns, then ``metric``, ``limit`` (as written), ``limit_us``,
        ``load`` (``rate_iops`` or ``iodepth``), ``max_load``, ``ci_low``,
        ``ci_high`` (``Int64``, NA where unknown), ``probes`` and ``status``
        (``found``, ``below-min``, ``above-max``, ``unstable``); ``sentence``,
        the answer in words (docs/slo.md).

    Raises
    ------
    ResultsError
        The run has no answers, or its ``slo.json`` cannot be read.
    """
    rows = []
    for record in _records(run):
        params = record.get("params")
        if not isinstance(params, dict):
            params = {}
        probes = record.get("probes")
        rows.append(
            {
                **params,
                **{name: record.get(name) for name in COLUMNS},
                "probes": len(probes) if isinstance(probes, list) else None,
                "sentence": str(record.get("sentence", "")),
            }
        )
    frame = pd.DataFrame(rows)
    for name in ("max_load", "ci_low", "ci_high", "probes"):
        if name in frame:
            frame[name] = pd.array(frame[name].tolist(), dtype="Int64")
    return frame


def answer_lines(run: str | os.PathLike[str]) -> list[str]:
    """Each group's answer as the end of ``iobench run`` prints it: ``slo: bs=4k: clat_p99_us ≤ 5ms up to …``."""
    frame = slo(run)
    if frame.empty:
        return ["slo: no search ended (every group skipped, or the run stopped first)"]
    axes = list(frame.columns[: list(frame.columns).index("metric")])
    lines = []
    for _, row in frame.iterrows():
        shown = ", ".join(f"{name}={row[name]}" for name in axes if not pd.isna(row[name]))
        lines.append(f"slo: {shown + ': ' if shown else ''}{row['sentence']}")
    return lines

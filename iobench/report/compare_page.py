"""``iobench compare -o DIR``: the comparison as a page, a table and a figure.

:func:`write_compare` writes ``compare.csv`` (the frame of :func:`iobench.compare`,
unrounded), the ratio figure (:func:`iobench.plots.ratios`) and
``compare.html``: what differs between the two runs' machines and settings,
the verdicts per metric, the figure and the table. The page is self-contained
(inline PNG, inline style, no script) and comes from the jinja2 template
``iobench/report/templates/compare.html.j2`` with autoescaping on.

:func:`comparison_rows` and :func:`verdict_counts` are the text both the page
and the terminal table (``iobench compare``) show.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from iobench.errors import ResultsError
from iobench.matrix.display import format_value
from iobench.plots.files import save_figure_file
from iobench.report.html import inline_png, template
from iobench.report.runstate import run_lines
from iobench.results.compare import VERDICTS, detectable_text, drift_text, key_columns
from iobench.store.rundir import replacing, storage
from iobench.store.untrusted import csv_safe, own_directory

#: Figure file name, without its suffix.
FIGURE = "compare-ratios"
#: How a metric reads in a table: its title and the factor from the frame's unit.
METRIC_TEXT: dict[str, tuple[str, float]] = {
    "iops": ("IOPS", 1.0),
    "bw_bytes": ("MiB/s", 1 / 2**20),
    "lat_mean_us": ("mean lat µs", 1.0),
    "clat_mean_us": ("mean clat µs", 1.0),
    "slat_mean_us": ("mean slat µs", 1.0),
    "cpu_us_per_io": ("CPU µs/I/O", 1.0),
    "usr_cpu": ("usr CPU %", 1.0),
    "sys_cpu": ("sys CPU %", 1.0),
}
#: What an NA verdict reads as.
UNTESTED = "not tested"
#: The most rows the page's table shows (the changed ones first); ``compare.csv`` has all of them.
MAX_ROWS = 500


@dataclass(frozen=True)
class ComparePage:
    """What :func:`write_compare` wrote."""

    html: Path
    table: Path
    figures: list[Path]


@dataclass(frozen=True)
class Row:
    """One comparison row as text: the point's labels, the numbers, the verdict and why."""

    labels: list[str]
    metric: str
    a: str
    b: str
    ratio: str
    ci: str
    change: str
    p: str
    verdict: str
    reason: str
    match: str
    p_adjusted: str = "–"
    detectable: str = "–"


@dataclass
class Rows:
    """A comparison as text: the header of the label columns, matched rows and one-sided points.

    With a limit, ``rows`` holds at most that many: every row when they fit,
    else the changed ones (better, worse) first in key order; ``matched`` counts
    them all. ``only_a``/``only_b`` are cut at the limit likewise
    (``only_a_total``, ``only_b_total`` count them).
    """

    keys: list[str]
    rows: list[Row] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    matched: int = 0
    only_a_total: int = 0
    only_b_total: int = 0

    @property
    def omitted(self) -> int:
        """Matched rows not in :attr:`rows`."""
        return self.matched - len(self.rows)


def metric_title(metric: str) -> str:
    """``IOPS``, ``MiB/s``, ``p99 clat µs``, ...: the metric's column title."""
    if metric in METRIC_TEXT:
        return METRIC_TEXT[metric][0]
    kind, _, rest = metric.partition("_p")
    if rest.endswith("_us"):
        return f"p{rest.removesuffix('_us').replace('_', '.')} {kind} µs"
    return metric


def metric_value(metric: str, value: object) -> str:
    """A metric's value in its table unit: ``12,345``, ``81.2``, ``4.17``; ``–`` when missing."""
    number = _float(value)
    if number is None:
        return "–"
    number *= METRIC_TEXT.get(metric, ("", 1.0))[1]
    if abs(number) >= 1000:
        return f"{number:,.0f}"
    return f"{number:.1f}" if abs(number) >= 100 else f"{number:.3g}"


def _float(value: object) -> float | None:
    if value is None or value is pd.NA:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _change(ratio: float | None) -> str:
    if ratio is None:
        return "–"
    text = f"{ratio - 1:+.1%}"
    return "±0.0%" if text in ("+0.0%", "-0.0%") else text


def _p_text(value: object) -> str:
    p = _float(value)
    if p is None:
        return "–"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _detectable_text(down: object, up: object) -> str:
    low, high = (math.nan if v is None or v is pd.NA else float(v) for v in (down, up))  # type: ignore[arg-type]
    return detectable_text(low, high)


def correction_text(comparison: pd.DataFrame) -> str:
    """How the verdicts were reached, in one sentence (the terminal's and the page's footnote)."""
    from iobench.results.discoveries import CORRECTION_NAMES

    attrs = comparison.attrs
    min_effect = float(attrs.get("min_effect", 0.01))
    correction = str(attrs.get("correction", "none"))
    tests = int(attrs.get("tests", 0))
    adjusted = (
        "p (each test on its own, no correction for the number of tests)"
        if correction == "none"
        else f"p adjusted by {CORRECTION_NAMES.get(correction, correction)} over {tests} tests"
    )
    return (
        f"verdict: Welch's t-test, {adjusted} < 0.05, and a change of at least {min_effect:.0%}; "
        f"CI: Fieller's 95 % interval of the ratio; detectable: the smallest drop and rise (B/A) Welch's test "
        f"finds with {float(attrs.get('power', 0.8)):.0%} power at that level, with these repeats"
    )


def _label_columns(comparison: pd.DataFrame, keys: Sequence[str]) -> list[str]:
    varying = [k for k in keys if comparison[k].astype("string").nunique(dropna=False) > 1]
    return varying or list(keys[:1])


def _describe(row: Mapping[Any, Any], columns: Sequence[str]) -> str:
    return " ".join(f"{c}={format_value(c, row[c], missing='–')}" for c in columns) or "all"


def _plain(value: object) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return str(value)


def comparison_rows(comparison: pd.DataFrame, limit: int | None = None) -> Rows:
    """The comparison as the terminal and the page show it: text cells, one-sided points apart.

    Parameters
    ----------
    comparison
        A frame from :func:`iobench.compare`.
    limit
        The most matched rows (and one-sided points) to give as text: past it,
        the changed rows (better, worse) come first and the rest are counted
        (``compare.csv`` has every row). None: all of them.

    Returns
    -------
    Rows
        ``keys``: the key columns that vary (the others are the same in every
        row); ``rows``: one per matched point and metric; ``only_a``/``only_b``:
        the points of one run only, described by their keys.
    """
    keys = _label_columns(comparison, key_columns(comparison))
    out = Rows(keys)
    match = comparison["match"].astype("string")
    matched = comparison[match.eq("both").fillna(False).to_numpy()]
    out.matched = len(matched)
    if limit is not None and len(matched) > limit:
        changed = matched["verdict"].isin(("better", "worse")).fillna(False).to_numpy()
        matched = matched[changed].head(limit)
    for row in matched.to_dict("records"):
        ratio, low, high = (_float(row[c]) for c in ("ratio", "ratio_ci_low", "ratio_ci_high"))
        verdict = row["verdict"]
        out.rows.append(
            Row(
                labels=[format_value(k, row[k], missing="–") for k in keys],
                metric=metric_title(str(row["metric"])),
                a=metric_value(str(row["metric"]), row["a_mean"]),
                b=metric_value(str(row["metric"]), row["b_mean"]),
                ratio="–" if ratio is None else f"{ratio:.3f}",
                ci="–" if low is None or high is None else f"{low:.3f} – {high:.3f}",
                change=_change(ratio),
                p=_p_text(row["p_value"]),
                verdict=UNTESTED if verdict is None or verdict is pd.NA else str(verdict),
                p_adjusted=_p_text(row.get("p_adjusted")),
                detectable=_detectable_text(row.get("detectable_down"), row.get("detectable_up")),
                reason=_plain(row["reason"]) if row["reason"] else "",
                match="both",
            )
        )
    for side, where in (("A only", out.only_a), ("B only", out.only_b)):
        one = comparison[match.eq(side).fillna(False).to_numpy()]
        texts = list(dict.fromkeys(_describe(row, keys) for row in one[keys].to_dict("records")))
        where.extend(texts if limit is None else texts[:limit])
        if side == "A only":
            out.only_a_total = len(texts)
        else:
            out.only_b_total = len(texts)
    return out


def verdict_counts(comparison: pd.DataFrame) -> list[tuple[str, dict[str, int]]]:
    """Per metric, how many matched points are better, worse, no change and not tested.

    A metric whose points all moved together (``attrs["drifts"]``) is counted as one run-level change.
    """
    matched = comparison[comparison["match"] == "both"]
    out = []
    drifting = {str(d["metric"]) for d in comparison.attrs.get("drifts") or []}
    for metric in dict.fromkeys(matched["metric"]):
        verdicts = matched.loc[matched["metric"] == metric, "verdict"].fillna(UNTESTED)
        counts = Counter(str(v) for v in verdicts)
        found = {v: counts.get(v, 0) for v in (*VERDICTS, UNTESTED) if counts.get(v)}
        if str(metric) in drifting:  # one change of the run, not one per point
            found = {"moved together (one run-level change)": sum(found.values())}
        out.append((str(metric), found))
    return out


def condition_lines(comparison: pd.DataFrame) -> list[str]:
    """What the terminal and the page say first: how the runs' conditions differ, and the metrics that moved
    as one run (each a sentence; empty when the conditions match and no metric drifted)."""
    attrs = comparison.attrs
    lines = [f"the runs' conditions differ: {text}" for text in attrs.get("conditions") or []]
    for drift in attrs.get("drifts") or []:
        title = metric_title(str(drift["metric"]))
        lines.append(f"{title}: {drift_text(drift)}" + ("; see how the conditions differ" if lines else ""))
    return lines


def machine_rows(comparison: pd.DataFrame) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """What differs between the runs' machines and settings (fact, A, B), and what they share (fact, value)."""
    facts = comparison.attrs.get("machines") or []
    differ = [(f["fact"], f["a"], f["b"]) for f in facts if f.get("differs")]
    same = [(f["fact"], f["a"]) for f in facts if not f.get("differs")]
    return differ, same


def write_compare(
    comparison: pd.DataFrame, out: str | os.PathLike[str], *, formats: Sequence[str] = ("png",)
) -> ComparePage:
    """Write ``compare.csv``, the ratio figure and ``compare.html`` for a comparison into ``out``.

    Parameters
    ----------
    comparison
        A frame from :func:`iobench.compare`.
    out
        The directory (created if missing).
    formats
        Figure files to write: png, svg, pdf (the page embeds a PNG either way).

    Returns
    -------
    ComparePage
        The paths written.

    Raises
    ------
    ResultsError
        Not a comparison frame, or an unknown figure format.
    RunStorageError
        A file cannot be written; no file is left half written under its name.
    """
    from iobench.plots.figures import FORMATS
    from iobench.plots.ratios import ratios

    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ResultsError(f"unknown figure format {unknown[0]!r}; use one of {', '.join(FORMATS)}")
    key_columns(comparison)
    target = Path(out)
    with storage(target):
        own_directory(target)
    table = target / "compare.csv"
    with replacing(table) as tmp:
        csv_safe(comparison).to_csv(tmp, index=False)
    written: list[Path] = []
    inline = ""
    has_ratios = bool((comparison["match"].eq("both").fillna(False) & comparison["ratio"].notna()).any())
    if has_ratios:
        fig = ratios(comparison)
        written = [save_figure_file(fig, target / f"{FIGURE}.{fmt}") for fmt in formats]
        inline = inline_png(fig)
    page = target / "compare.html"
    with replacing(page) as tmp:
        tmp.write_text(render_compare(comparison, inline), encoding="utf-8")
    return ComparePage(page, table, written)


def run_notes(comparison: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """Per run compared that is incomplete or lost something: its side (``A``, ``B``) and what to say about it."""
    runs = comparison.attrs.get("runs") or {}
    out = []
    for side, facts in runs.items():
        lines = run_lines(facts, facts.get("notes") or [])
        if lines:
            out.append((str(side), lines))
    return out


def render_compare(comparison: pd.DataFrame, figure: str = "") -> str:
    """The page's HTML: runs, what differs, verdicts per metric, the figure (base64 PNG), the table.

    The table holds at most :data:`MAX_ROWS` rows (the changed ones first when
    there are more); ``compare.csv`` has every row.
    """
    differ, same = machine_rows(comparison)
    rows = comparison_rows(comparison, limit=MAX_ROWS)
    attrs: dict[Any, Any] = comparison.attrs
    return template("compare.html.j2").render(
        runs=run_notes(comparison),
        conditions=condition_lines(comparison),
        a=str(attrs.get("a", "A")),
        b=str(attrs.get("b", "B")),
        min_effect=f"{float(attrs.get('min_effect', 0.01)):.0%}",
        differ=differ,
        same=same,
        counts=verdict_counts(comparison),
        figure=figure,
        rows=rows,
        csv="compare.csv",
        correction=correction_text(comparison),
    )

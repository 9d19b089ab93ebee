"""iobench.compare / iobench compare: matching, ratio and CI, Welch's p, verdicts, page, figure, CLI.

Unit tests build tidy frames whose repeats are known, so every number can be
checked against its definition (scipy's own Welch test, Fieller's equation).
The end-to-end tests run fio for real: three rate-limited runs of one matrix
(A and A′ at 400 IOPS, B at 800).
"""

from __future__ import annotations

import json
import math
import shutil
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from closedpipe import run_into_closed_pipe
from scipy import stats
from sysfs_snapshots import FakeSysfs
from typer.testing import CliRunner

import iobench
from iobench.cli.commands import app
from iobench.errors import ResultsError
from iobench.report.compare_page import comparison_rows, write_compare
from iobench.results.compare import (
    DIRECTION,
    FINDINGS,
    OTHER_CPU,
    RESULT_COLUMNS,
    VERDICTS,
    judge,
    key_columns,
)
from iobench.results.points import SUMMARY_METRICS, point_totals
from iobench.system.topology import discover_topology

runner = CliRunner()

Point = tuple[dict[str, object], dict[str, Sequence[float]]]


def tidy(points: Sequence[Point], run_id: str = "run") -> pd.DataFrame:
    """A tidy frame: one job per point × repeat, reading, with the given parameters and metric values."""
    records = []
    for number, (params, metrics) in enumerate(points, 1):
        repeats = len(next(iter(metrics.values())))
        for repeat in range(repeats):
            records.append(
                {
                    "run_id": run_id,
                    "point": number,
                    "repeat": repeat + 1,
                    "host": "h",
                    "jobname": "job",
                    "job_index": 0,
                    "direction": "read",
                    "status": "ok",
                    **params,
                    **{metric: values[repeat] for metric, values in metrics.items()},
                }
            )
    return pd.DataFrame(records)


def row(result: pd.DataFrame, metric: str = "iops", **keys: object) -> pd.Series:
    selected = result[result["metric"] == metric]
    for key, value in keys.items():
        selected = selected[selected[key] == value]
    assert len(selected) == 1, selected
    return selected.iloc[0]


# --- the numbers -----------------------------------------------------------------------------


def test_known_ratio_with_scipy_p_and_fieller_interval() -> None:
    a_iops, b_iops = [100.0, 103.0, 98.0], [201.0, 196.0, 207.0]
    a = tidy([({"bs": 4096}, {"iops": a_iops})], "before")
    b = tidy([({"bs": 4096}, {"iops": b_iops})], "after")
    result = iobench.compare(a, b)
    got = row(result)
    assert got["a_mean"] == pytest.approx(np.mean(a_iops))
    assert got["b_mean"] == pytest.approx(np.mean(b_iops))
    assert got["a_std"] == pytest.approx(np.std(a_iops, ddof=1))
    assert got["ratio"] == pytest.approx(np.mean(b_iops) / np.mean(a_iops))
    assert got["p_value"] == pytest.approx(stats.ttest_ind(b_iops, a_iops, equal_var=False).pvalue)
    assert got["verdict"] == "better"
    # Fieller: both ends solve (b̄ - R·ā)² = t²·(v_b + R²·v_a), with Welch's degrees of freedom.
    va, vb = np.var(a_iops, ddof=1) / 3, np.var(b_iops, ddof=1) / 3
    dof = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    t = stats.t.ppf(0.975, dof)
    for bound in (got["ratio_ci_low"], got["ratio_ci_high"]):
        lhs = (np.mean(b_iops) - bound * np.mean(a_iops)) ** 2
        assert lhs == pytest.approx(t**2 * (vb + bound**2 * va))
    assert got["ratio_ci_low"] < got["ratio"] < got["ratio_ci_high"]
    assert result.attrs["a"] == "before" and result.attrs["b"] == "after"


def test_interval_excludes_one_exactly_when_welch_is_significant() -> None:
    rng = np.random.default_rng(16)
    seen = set()
    for _ in range(300):
        n_a, n_b = rng.integers(2, 6, size=2)
        a = rng.normal(100, rng.uniform(0.5, 8), n_a)
        b = rng.normal(100 * rng.uniform(0.93, 1.07), rng.uniform(0.5, 8), n_b)
        judged = judge(a, b, direction=1, min_effect=0.0)
        if math.isnan(judged.ratio_ci_low):  # A's mean not clear of zero: Fieller's set is unbounded
            assert "unbounded" in judged.reason
            continue
        significant = judged.p_value < 0.05
        excludes = not judged.ratio_ci_low <= 1 <= judged.ratio_ci_high
        if abs(judged.p_value - 0.05) > 1e-9:
            assert significant == excludes, judged
        seen.add(significant)
    assert seen == {True, False}


def test_p_is_scipys_welch_test() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        n_a, n_b = rng.integers(2, 8, size=2)
        a = rng.normal(100, rng.uniform(0.1, 20), n_a)
        b = rng.normal(rng.uniform(80, 120), rng.uniform(0.1, 20), n_b)
        expected = stats.ttest_ind(b, a, equal_var=False).pvalue
        assert judge(a, b, direction=1).p_value == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_direction_decides_better_or_worse() -> None:
    a = tidy([({}, {"iops": [1000.0, 1010.0, 990.0], "lat_mean_us": [100.0, 101.0, 99.0]})])
    slower = tidy([({}, {"iops": [500.0, 505.0, 495.0], "lat_mean_us": [200.0, 202.0, 198.0]})])
    result = iobench.compare(a, slower, metrics=["iops", "lat_mean_us"])
    assert row(result, "iops")["verdict"] == "worse"
    assert row(result, "lat_mean_us")["verdict"] == "worse"
    assert row(result, "lat_mean_us")["ratio"] == pytest.approx(2.0)
    back = iobench.compare(slower, a, metrics=["iops", "lat_mean_us"])
    assert row(back, "iops")["verdict"] == "better"
    assert row(back, "lat_mean_us")["verdict"] == "better"  # less latency is better
    assert row(back, "lat_mean_us")["ratio"] == pytest.approx(0.5)


def test_direction_table_covers_the_summary_metrics() -> None:
    judged = [m for m in SUMMARY_METRICS if m != "inflight"]  # I/Os in flight have no better way
    assert all(m in DIRECTION for m in judged)
    assert DIRECTION["iops"] == DIRECTION["bw_bytes"] == 1
    assert {DIRECTION[m] for m in judged if m not in ("iops", "bw_bytes")} == {-1}
    assert DIRECTION["clat_p99_9_us"] == DIRECTION["lat_p99_us"] == -1


def test_significant_but_below_min_effect_is_no_change() -> None:
    base = [400.0, 400.02, 399.98]
    a = tidy([({}, {"iops": base})])
    b = tidy([({}, {"iops": [v * 1.003 for v in base]})])
    got = row(iobench.compare(a, b))
    assert got["p_value"] < 1e-4  # tiny variance: 0.3 % is significant...
    assert got["verdict"] == "no change"  # ...and below the 1 % that counts
    assert "minimum effect" in got["reason"]
    assert row(iobench.compare(a, b, min_effect=0.001))["verdict"] == "better"
    # the threshold is symmetric on the ratio's log scale: 1 / 1.003 is as small a change
    assert row(iobench.compare(b, a))["verdict"] == "no change"
    assert row(iobench.compare(b, a, min_effect=0.001))["verdict"] == "worse"


def test_not_significant_is_no_change_even_when_large() -> None:
    a = tidy([({}, {"iops": [100.0, 300.0, 200.0]})])
    b = tidy([({}, {"iops": [150.0, 350.0, 250.0]})])
    got = row(iobench.compare(a, b))
    assert got["ratio"] == pytest.approx(1.25)
    assert got["p_value"] > 0.05
    assert got["verdict"] == "no change"
    assert got["ratio_ci_low"] < 1 < got["ratio_ci_high"]


def test_fewer_than_two_repeats_cannot_be_tested() -> None:
    a = tidy([({}, {"iops": [100.0, 101.0, 99.0]})])
    b = tidy([({}, {"iops": [200.0]})])
    got = row(iobench.compare(a, b))
    assert got["ratio"] == pytest.approx(2.0)
    assert got["b_n"] == 1
    assert pd.isna(got["p_value"]) and pd.isna(got["b_std"]) and pd.isna(got["ratio_ci_low"])
    assert pd.isna(got["verdict"])
    assert "B has 1 repeat" in got["reason"] and "2 on each side" in got["reason"]


def test_repeats_without_spread_use_the_limit_of_the_test() -> None:
    a = tidy([({}, {"iops": [399.8, 399.8, 399.8]})])
    b = tidy([({}, {"iops": [799.6, 799.6, 799.6]})])
    a2 = tidy([({}, {"iops": [400.3, 400.3, 400.3]})])
    doubled = row(iobench.compare(a, b))
    assert doubled["p_value"] == 0 and doubled["verdict"] == "better"
    assert doubled["ratio_ci_low"] == pytest.approx(2.0) == doubled["ratio_ci_high"]
    same = row(iobench.compare(a, a))
    assert same["p_value"] == 1 and same["verdict"] == "no change"
    nudged = row(iobench.compare(a, a2))  # certain, but 0.1 %
    assert nudged["p_value"] == 0 and nudged["verdict"] == "no change"
    assert "no spread" in nudged["reason"]


def test_points_are_matched_by_parameters_and_one_sided_points_are_listed() -> None:
    a = tidy(
        [
            ({"bs": 4096, "iodepth": 1}, {"iops": [10.0, 11.0, 12.0]}),
            ({"bs": 8192, "iodepth": 1}, {"iops": [20.0, 21.0, 22.0]}),
        ]
    )
    # B ran its points in another order, with other numbers, and one point A lacks.
    b = tidy(
        [
            ({"bs": 16384, "iodepth": 1}, {"iops": [40.0, 41.0, 42.0]}),
            ({"bs": 4096.0, "iodepth": 1}, {"iops": [30.0, 33.0, 36.0]}),
        ]
    )
    result = iobench.compare(a, b)
    assert key_columns(result) == ["bs", "iodepth", "direction"]
    assert list(result.columns[3:]) == list(RESULT_COLUMNS)
    matched = row(result, bs=4096)
    assert matched["match"] == "both"
    assert (matched["a_point"], matched["b_point"]) == (1, 2)
    assert matched["ratio"] == pytest.approx(3.0)
    only_a, only_b = row(result, bs=8192), row(result, bs=16384)
    assert (only_a["match"], only_b["match"]) == ("A only", "B only")
    assert pd.isna(only_a["verdict"]) and pd.isna(only_a["ratio"]) and only_a["a_mean"] == 21
    assert only_b["b_n"] == 3 and only_b["a_n"] == 0
    text = comparison_rows(result)
    assert text.only_a == ["bs=8k"] and text.only_b == ["bs=16k"]


def test_repeats_that_did_not_settle_are_noted() -> None:
    a = tidy([({}, {"iops": [100.0, 101.0, 99.0]})]).assign(steady=[True, False, True])
    b = tidy([({}, {"iops": [200.0, 202.0, 198.0]})]).assign(steady=True)
    got = row(iobench.compare(a, b))
    assert got["verdict"] == "better"
    assert got["reason"] == "1 of 3 repeats of A not steady"
    unjudged = a.assign(steady=pd.array([True, False, pd.NA], dtype="boolean"))
    assert (
        row(iobench.compare(unjudged, b))["reason"]
        == "1 of 3 repeats of A not steady (1 could not be judged)"
    )
    one_unjudged = a.assign(steady=pd.array([True, True, pd.NA], dtype="boolean"))
    assert row(iobench.compare(b, one_unjudged))["reason"].endswith(
        "1 of 3 repeats of B could not be judged steady or not"
    )
    # no steadiness note; 3 repeats 1 % apart cannot show a 1 % change, and the reason says so
    assert row(iobench.compare(b, b))["reason"].startswith("too few repeats for the minimum effect: 3 and 3")


def test_means_come_from_point_totals() -> None:
    # Two jobs per point: the point's IOPS is their sum (fio's group), not their mean.
    frame = tidy([({}, {"iops": [100.0, 110.0, 90.0]})])
    frame = pd.concat([frame, frame.assign(job_index=1, iops=frame["iops"] * 3)], ignore_index=True)
    result = iobench.compare(frame, frame)
    totals = point_totals(frame)
    assert row(result)["a_mean"] == pytest.approx(totals["iops"].mean())
    assert row(result)["a_mean"] == pytest.approx(400.0)


def test_by_matches_on_the_columns_given() -> None:
    a = tidy(
        [
            ({"bs": 4096, "iodepth": 1}, {"iops": [10.0, 11.0]}),
            ({"bs": 4096, "iodepth": 8}, {"iops": [50.0, 51.0]}),
        ]
    )
    b = tidy(
        [
            ({"bs": 4096, "iodepth": 1}, {"iops": [20.0, 22.0]}),
            ({"bs": 4096, "iodepth": 8}, {"iops": [100.0, 102.0]}),
        ]
    )
    result = iobench.compare(a, b, by=["iodepth"])
    assert key_columns(result) == ["iodepth", "direction"]
    assert row(result, iodepth=8)["ratio"] == pytest.approx(2.0)
    with pytest.raises(ResultsError, match=r"several points .* differ in iodepth; add iodepth to --by"):
        iobench.compare(a, b, by=["bs"])
    with pytest.raises(
        ResultsError, match=r"--by numjobs: no such column in A .* its parameters: bs, iodepth"
    ):
        iobench.compare(a, b, by=["numjobs"])


def test_bad_input_is_refused_with_the_fix(tmp_path: Path) -> None:
    a = tidy([({"bs": 4096}, {"iops": [10.0, 11.0]})])
    b = tidy([({"bs": 8192}, {"iops": [10.0, 11.0]})])
    with pytest.raises(
        ResultsError,
        match=r"no point of A \(run\) matches a point of B \(run\): they differ in bs \(matched on bs, direction\): "
        r"A has bs=4k, B has bs=8k.*--by",
    ):
        iobench.compare(a, b)
    with pytest.raises(ResultsError, match=r"no manifest.json.*`iobench run`"):
        iobench.compare(tmp_path, a)
    with pytest.raises(ResultsError, match=r"B: .*no such directory; give a run directory"):
        iobench.compare(a, tmp_path / "missing")
    with pytest.raises(ResultsError, match="has no better direction"):
        iobench.compare(a, a, metrics=["inflight"])
    with pytest.raises(ResultsError, match="has no 'clat_p99_us' values"):
        iobench.compare(a, a, metrics=["clat_p99_us"])
    with pytest.raises(ResultsError, match="min_effect must be a fraction"):
        iobench.compare(a, a, min_effect=-0.01)
    failed = a.assign(status="failed")
    with pytest.raises(ResultsError, match="A .*no point finished ok"):
        iobench.compare(failed, a)
    axis_only_in_b = tidy([({"bs": 4096, "numjobs": n}, {"iops": [10.0, 11.0]}) for n in (1, 2)])
    with pytest.raises(ResultsError, match="differ in numjobs, an axis A .* does not have"):
        iobench.compare(a, axis_only_in_b)


def _loaded_runs(
    factor: float, other_cpu: tuple[float, float], found: str = ""
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two runs of 12 points × 3 repeats; B's IOPS ``factor`` × A's; other processes' CPU in each; B's findings."""
    rng = np.random.default_rng(12)
    base = rng.uniform(10_000, 90_000, 12)
    frames = []
    for side, (scale, load) in enumerate(((1.0, other_cpu[0]), (factor, other_cpu[1]))):
        points = [
            ({"iodepth": 2**k}, {"iops": list(mean * scale * (1 + 0.01 * rng.standard_normal(3)))})
            for k, mean in enumerate(base)
        ]
        frame = tidy(points, run_id="AB"[side])
        frame["cpu_other_pct"] = load + rng.uniform(-0.5, 0.5, len(frame))
        frame["validity"] = found if side else ""
        frames.append(frame)
    return frames[0], frames[1]


def test_a_run_level_drift_is_one_change_and_the_conditions_that_differ_are_said(tmp_path: Path) -> None:
    """The case measured: the same matrix twice, every point -30 %, other processes' load doubled."""
    a, b = _loaded_runs(0.7, (12.0, 31.0), found="cpu-contention")
    result = iobench.compare(a, b, metrics=["iops"])
    assert result["verdict"].eq("worse").all()
    [drift] = result.attrs["drifts"]
    assert (
        drift["metric"] == "iops" and drift["points"] == 12 and drift["ratio"] == pytest.approx(0.7, abs=0.01)
    )
    assert result["reason"].str.startswith("every one of the 12 points moved together, ×0.70").all()
    other, found = result.attrs["conditions"]
    assert (
        other.startswith("other processes took 12.") and "% (most 12 %) of the points' CPUs in A, 3" in other
    )
    assert other.endswith("% (most 31 %) in B")
    assert found == "the validity check cpu-contention found 0 of 36 points × repeats in A, 36 of 36 in B"
    from iobench.report.compare_page import verdict_counts

    assert verdict_counts(result) == [("iops", {"moved together (one run-level change)": 12})]
    from rich.console import Console

    from iobench.cli.compare_view import show_comparison

    console = Console(record=True, width=300)
    show_comparison(console, result)
    text = console.export_text()
    assert "the runs' conditions differ: other processes took" in text
    assert "IOPS: every one of the 12 points moved together, ×0.70" in text
    page = write_compare(result, tmp_path / "cmp").html.read_text()
    assert "the runs&#39; conditions differ: other processes took" in page
    assert "moved together (one run-level change): 12" in page


def test_points_that_moved_apart_are_no_drift_and_like_conditions_say_nothing() -> None:
    a, b = _loaded_runs(0.7, (12.0, 13.0))
    assert iobench.compare(a, b, metrics=["iops"]).attrs["conditions"] == []
    b.loc[b["point"].le(6), "iops"] *= 1.6  # half the points up ×1.12, half down ×0.7
    result = iobench.compare(a, b, metrics=["iops"])
    assert result.attrs["drifts"] == [] and not result["reason"].str.contains("moved together").any()
    spread = b.assign(iops=b["iops"] * np.where(b["point"].le(6), 1.0, 0.5 / 1.12))  # ×0.7 … ×0.31 apart
    assert iobench.compare(a, spread, metrics=["iops"]).attrs["drifts"] == []
    same = iobench.compare(a, a.copy(), metrics=["iops"])
    assert same.attrs["drifts"] == [] and same.attrs["conditions"] == []


def test_runs_that_differ_in_direction_say_so() -> None:
    reads = tidy([({"bs": 4096}, {"iops": [10.0, 11.0]})])
    writes = reads.assign(direction="write")
    with pytest.raises(ResultsError) as refused:
        iobench.compare(reads, writes)
    assert "they differ in direction" in str(refused.value)
    assert "A has direction=read, B has direction=write" in str(refused.value)


def test_two_parsed_frames_name_what_differs(tmp_path: Path) -> None:
    """Frames from `iobench parse` have fio's job options for axes: what tells their points apart is said."""
    data = Path(__file__).parent / "data" / "fio" / "fio-3.33"
    frames = {name: tmp_path / f"{name}.parquet" for name in ("read", "write", "randrw")}
    for name, path in frames.items():
        assert runner.invoke(app, ["parse", str(data / f"{name}.json"), "-o", str(path)]).exit_code == 0
    refused = runner.invoke(app, ["compare", str(frames["read"]), str(frames["write"])])
    assert refused.exit_code == 2
    assert (
        "they differ in rw, bs, direction" in refused.output
        and "rw=write bs=64k direction=write" in refused.output
    )
    compared = iobench.compare(frames["read"], frames["randrw"], by=["direction"])
    facts = {f["fact"]: f for f in compared.attrs["machines"]}
    jobs = facts["fio jobs"]
    assert jobs["differs"] and jobs["a"] != jobs["b"]


# --- figure and page -------------------------------------------------------------------------


def _mixed() -> pd.DataFrame:
    a = tidy(
        [
            ({"bs": 4096}, {"iops": [100.0, 101.0, 99.0], "lat_mean_us": [10.0, 10.1, 9.9]}),
            ({"bs": 8192}, {"iops": [50.0, 51.0, 49.0], "lat_mean_us": [20.0, 20.2, 19.8]}),
            ({"bs": 65536}, {"iops": [9.0, 9.0, 9.0], "lat_mean_us": [1.0, 1.0, 1.0]}),
        ],
        "A-run",
    )
    b = tidy(
        [
            ({"bs": 4096}, {"iops": [200.0, 202.0, 198.0], "lat_mean_us": [5.0, 5.05, 4.95]}),
            ({"bs": 8192}, {"iops": [25.0, 25.5, 24.5], "lat_mean_us": [40.0, 40.4, 39.6]}),
            ({"bs": 65536}, {"iops": [9.0], "lat_mean_us": [1.0]}),
        ],
        "B-run",
    )
    return iobench.compare(a, b, metrics=["iops", "lat_mean_us"])


def test_ratio_figure_draws_each_ratio_with_its_interval_in_its_verdict_colour() -> None:
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure

    from iobench.plots.ratios import VERDICT_COLOURS

    result = _mixed()
    fig = iobench.plots.ratios(result)
    assert isinstance(fig, Figure)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["IOPS", "Mean latency (µs)"]
    iops = panels[0]
    points = [line for line in iops.lines if line.get_marker() == "o"]
    expected = result[(result["metric"] == "iops") & result["ratio"].notna()]
    assert sorted(float(line.get_xdata()[0]) for line in points) == pytest.approx(sorted(expected["ratio"]))
    colours = {round(float(line.get_xdata()[0]), 3): to_hex(line.get_color()) for line in points}
    assert colours[2.0] == VERDICT_COLOURS["better"]
    assert colours[0.5] == VERDICT_COLOURS["worse"]
    assert [t.get_text() for t in iops.get_yticklabels()] == ["bs=4k", "bs=8k", "bs=64k"]
    assert iops.get_xscale() == "log"


def test_an_unbounded_interval_runs_off_the_panel_with_a_hollow_marker_and_says_so() -> None:
    from iobench.plots.ratios import UNBOUNDED

    a = tidy([({"bs": 4096}, {"iops": [100.0, 101.0, 99.0]}), ({"bs": 8192}, {"iops": [1.0, 100.0]})])
    b = tidy([({"bs": 4096}, {"iops": [200.0, 201.0, 199.0]}), ({"bs": 8192}, {"iops": [50.0, 51.0]})])
    result = iobench.compare(a, b)
    wild = row(result, bs=8192)
    assert wild["verdict"] == "no change" and pd.isna(wild["ratio_ci_low"]) and pd.isna(wild["ratio_ci_high"])
    fig = iobench.plots.ratios(result)
    [panel] = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    hollow = [
        line for line in panel.lines if line.get_marker() == "o" and line.get_markerfacecolor() == "white"
    ]
    assert [float(line.get_xdata()[0]) for line in hollow] == pytest.approx([float(wild["ratio"])])
    arrows = [t for t in panel.texts if getattr(t, "arrow_patch", None) is not None]
    left, right = panel.get_xlim()
    assert [(t.xy[0], t.xyann[0]) for t in arrows] == [(left, right)]  # edge to edge: no bound on either side
    assert any(t.get_text().endswith(UNBOUNDED) for t in panel.texts)
    caption = " ".join(t.get_text() for t in fig.texts)
    assert f"dashed arrow across the panel: {UNBOUNDED}" in caption
    bounded = iobench.plots.ratios(iobench.compare(a[a["bs"].eq(4096)], b[b["bs"].eq(4096)]))
    assert UNBOUNDED not in " ".join(t.get_text() for t in bounded.texts)


def test_ratio_figure_into_a_given_axes() -> None:
    from matplotlib.figure import Figure

    result = _mixed()
    fig = Figure()
    ax = fig.subplots()
    assert iobench.plots.ratios(result, y="lat_mean_us", ax=ax) is fig
    assert ax.get_xlabel() == "Mean latency: B / A"
    with pytest.raises(ResultsError, match="one Axes draws one metric"):
        iobench.plots.ratios(result, ax=ax)


def test_page_table_and_figure_are_written(tmp_path: Path) -> None:
    result = _mixed()
    page = write_compare(result, tmp_path / "out", formats=["png", "svg"])
    assert page.html == tmp_path / "out" / "compare.html"
    assert [p.name for p in page.figures] == ["compare-ratios.png", "compare-ratios.svg"]
    saved = pd.read_csv(page.table)
    assert saved["ratio"].to_numpy() == pytest.approx(
        result["ratio"].to_numpy(dtype=float, na_value=np.nan), nan_ok=True
    )
    assert list(saved["verdict"].fillna("")) == list(result["verdict"].fillna(""))
    html = page.html.read_text()
    assert "data:image/png;base64," in html
    assert html.count("<td>bs=4096") == 0 and "2.000" in html and "0.500" in html
    assert "not tested" in html and "B has 1 repeat" in html
    assert not list((tmp_path / "out").glob("*.tmp*"))


def test_page_escapes_user_text(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    a = tidy([({"label": evil}, {"iops": [1.0, 1.1]})], evil)
    b = tidy([({"label": evil}, {"iops": [2.0, 2.1]})], "b & c")
    html = write_compare(iobench.compare(a, b), tmp_path).html.read_text()
    assert evil not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "b &amp; c" in html


# --- devices record their firmware -------------------------------------------------------------


def test_device_firmware_is_read_from_sysfs(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.write("devices/system/cpu/online", "0\n")
    fake.cpu(0, 0, 0, siblings="0")
    fake.node(0, cpulist="0")
    for name, file, text in (
        ("nvme0n1", "firmware_rev", "3B2QGXA7"),
        ("sda", "rev", "0001"),
        ("vdb", None, ""),
    ):
        disk = fake.disk(name)
        if file:
            (disk / "device").mkdir()
            (disk / "device" / file).write_text(text + "  \n")
    topology = discover_topology(tmp_path)
    firmware = {name: getattr(topology.device(name), "firmware", "?") for name in ("nvme0n1", "sda", "vdb")}
    assert firmware == {"nvme0n1": "3B2QGXA7", "sda": "0001", "vdb": None}
    assert next(d for d in topology.to_dict()["devices"] if d["name"] == "sda")["firmware"] == "0001"


# --- real runs -----------------------------------------------------------------------------------

RATE_MATRIX = """
version: 1
name: {name}
targets:
  - path: {target}
    size: 8M
fio:
  ioengine: null
  rw: randread
  bs: 4k
  runtime: 2
  time_based: 1
  rate_iops: {rate}
repeat: 3
matrix:
  iodepth: [4]
"""


@pytest.fixture(scope="module")
def rate_runs(tmp_path_factory: pytest.TempPathFactory, _cache_dir: Path) -> dict[str, Path]:
    """Three real runs of one matrix: A and A′ at 400 IOPS per job, B at 800."""
    from iobench.matrix.model import load_matrix
    from iobench.runner.sweep import NullProgress, run

    base = tmp_path_factory.mktemp("rates")
    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(base / "state"))
        patch.setenv("XDG_CACHE_HOME", str(_cache_dir))
        for name, rate in (("A", 400), ("A2", 400), ("B", 800)):
            matrix = base / f"{name}.yaml"
            matrix.write_text(
                textwrap.dedent(RATE_MATRIX).format(name=name, target=base / "t.dat", rate=rate)
            )
            result = run(load_matrix(matrix), out=base / "results", progress=NullProgress())
            assert result.exit_code == 0, result.counts
            runs[name] = result.run_dir
    return runs


def settings_that_differ(result: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """The machine and settings facts that differ, apart from the load and findings the runs measured.

    Those vary with this shared machine's other users from one run to the next.
    """
    return {
        f["fact"]: (f["a"], f["b"])
        for f in result.attrs["machines"]
        if f["differs"] and f["fact"] != OTHER_CPU and not f["fact"].startswith(FINDINGS)
    }


@pytest.mark.fio
def test_twice_the_rate_is_twice_the_iops_and_better(rate_runs: dict[str, Path]) -> None:
    result = iobench.compare(rate_runs["A"], rate_runs["B"])
    iops = result[result["metric"] == "iops"]
    assert len(iops) == 1 and set(iops["match"]) == {"both"} and iops["iodepth"].tolist() == [4]
    assert iops["ratio"].to_numpy(dtype=float) == pytest.approx(2.0, rel=0.05)
    assert set(iops["verdict"]) == {"better"}
    assert (iops["a_n"] == 3).all() and (iops["b_n"] == 3).all()
    assert iops["a_mean"].to_numpy(dtype=float) == pytest.approx(400, rel=0.05)
    assert settings_that_differ(result) == {"fio option rate_iops": ("400", "800")}
    same = {f["fact"] for f in result.attrs["machines"] if not f["differs"]}
    assert {"kernel", "fio", "CPU", "iobench", "target 1 scheduler before the run"} <= same


@pytest.mark.fio
def test_the_same_rate_is_no_change(rate_runs: dict[str, Path]) -> None:
    result = iobench.compare(rate_runs["A"], rate_runs["A2"])
    iops = result[result["metric"] == "iops"]
    assert set(iops["verdict"]) == {"no change"}
    assert iops["ratio"].to_numpy(dtype=float) == pytest.approx(1.0, rel=0.05)
    assert not settings_that_differ(result)


@pytest.mark.fio
def test_machine_differences_come_from_the_manifests(rate_runs: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "other-machine"
    shutil.copytree(rate_runs["A2"], other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["machine"]["kernel"] = "7.0.0-test"
    for disk in manifest["machine"]["targets"][0]["disks"]:
        disk["firmware"] = "FW2"
    (other / "manifest.json").write_text(json.dumps(manifest))
    result = iobench.compare(rate_runs["A"], other)
    differ = {f["fact"]: (f["a"], f["b"]) for f in result.attrs["machines"] if f["differs"]}
    assert differ["kernel"][1] == "7.0.0-test"
    assert differ["target 1 firmware"][1] == "FW2"
    assert "fio option rate_iops" not in differ


@pytest.mark.fio
def test_machine_settings_that_differ_are_listed(rate_runs: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "tuned"
    shutil.copytree(rate_runs["A2"], other)
    manifest = json.loads((other / "manifest.json").read_text())
    saved = manifest["machine"]["system"]
    governor = next(s for s in saved if s["name"] == "cpu-governor")
    governor["value"] = "performance on CPUs 0-1"
    (other / "manifest.json").write_text(json.dumps(manifest))
    result = iobench.compare(rate_runs["A"], other)
    assert settings_that_differ(result) == {
        "system: CPU frequency governor": (
            next(
                s["value"]
                for s in json.loads((rate_runs["A"] / "manifest.json").read_text())["machine"]["system"]
                if s["name"] == "cpu-governor"
            ),
            "performance on CPUs 0-1",
        )
    }
    same = {f["fact"] for f in result.attrs["machines"] if not f["differs"]}
    assert "system: transparent huge pages" in same


@pytest.mark.fio
def test_cli_compares_and_writes_the_page(rate_runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    done = runner.invoke(app, ["compare", str(rate_runs["A"]), str(rate_runs["B"]), "-o", str(out)])
    assert done.exit_code == 0, done.output
    header = next(line for line in done.output.splitlines() if "B/A" in line)
    column = [cell.strip() for cell in header.split("┃")].index("B/A")
    lines = [line for line in done.output.splitlines() if "IOPS" in line]
    assert len(lines) == 1
    for line in lines:
        ratio = float(line.split("│")[column])
        assert ratio == pytest.approx(2.0, rel=0.05)
        assert "better" in line
    assert "fio option rate_iops" in done.output
    assert "iops: 1 better" in done.output
    assert {p.name for p in out.iterdir()} == {"compare.html", "compare.csv", "compare-ratios.png"}
    saved = pd.read_csv(out / "compare.csv")
    assert set(saved.loc[saved["metric"] == "iops", "verdict"]) == {"better"}


@pytest.mark.fio
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_cli_compare_into_a_closed_pipe_ends_quietly_with_0(
    rate_runs: dict[str, Path], unbuffered: bool
) -> None:
    """`iobench compare A B | head -3`: the reader leaving early is no error."""
    done = run_into_closed_pipe(["compare", str(rate_runs["A"]), str(rate_runs["B"])], unbuffered=unbuffered)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.fio
def test_cli_refuses_bad_input_with_exit_2(rate_runs: dict[str, Path], tmp_path: Path) -> None:
    done = runner.invoke(app, ["compare", str(tmp_path), str(rate_runs["B"])])
    assert done.exit_code == 2
    assert "not an iobench run directory" in done.output and "iobench run" in done.output
    assert "Traceback" not in done.output
    done = runner.invoke(app, ["compare", str(rate_runs["A"]), str(rate_runs["B"]), "--by", "bs"])
    assert done.exit_code == 2 and "--by bs: no such column" in done.output
    done = runner.invoke(app, ["compare", str(rate_runs["A"]), str(rate_runs["B"]), "--metric", "nonsense"])
    assert done.exit_code == 2 and "no better direction" in done.output
    done = runner.invoke(
        app, ["compare", str(rate_runs["A"]), str(rate_runs["B"]), "--metric", "iops", "--by", "iodepth"]
    )
    assert done.exit_code == 0 and "IOPS" in done.output and "MiB/s" not in done.output


def test_verdicts_are_the_documented_three() -> None:
    assert VERDICTS == ("better", "worse", "no change")
    assert math.isclose(judge([1.0, 1.1], [2.0, 2.1], direction=1).ratio, 2.05 / 1.05)

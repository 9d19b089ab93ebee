"""Steady state: fio's own verdict, or the time series judged; in the frame, the summary, the figure and the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_timeseries import DATA, make_run
from typer.testing import CliRunner

import iobench
from iobench.cli.commands import app
from iobench.errors import ResultsError
from iobench.matrix.model import load_matrix
from iobench.plots.figures import draw
from iobench.plots.timeline import JUDGED_COLOURS, timeline, unsteady_points
from iobench.report.page import write_report
from iobench.results.points import summarize, window_totals
from iobench.results.steady import (
    MAX_EXCURSION,
    MAX_RANGE,
    NO_LOGS,
    fio_verdict,
    judge_windows,
    too_short,
    unjudged_line,
    verdicts,
)
from iobench.store.records import PointMeta, ProcessRecord

GOLDEN = Path(__file__).parent / "data" / "fio" / "fio-3.33" / "read.json"
runner = CliRunner()


def windows(values: list[float | None], *, point: int = 1, repeat: int = 1, jobs: int = 1) -> pd.DataFrame:
    """Window totals of one point × repeat: IOPS per 1 s window (None: a window not every job logged)."""
    return pd.DataFrame(
        {
            "point": point,
            "repeat": repeat,
            "window": range(1, len(values) + 1),
            "t_s": [float(i) for i in range(1, len(values) + 1)],
            "iops": pd.array(values, dtype="Float64"),
            "jobs": [jobs if v is not None else jobs - 1 for v in values],
            "complete": [v is not None for v in values],
        }
    )


def timing(*keys: tuple[int, int]) -> pd.DataFrame:
    return pd.DataFrame([{"point": p, "repeat": r, "window_s": 1.0} for p, r in keys])


def verdict(values: list[float | None]) -> pd.Series:
    return judge_windows(windows(values), timing((1, 1))).iloc[0]


# --- the criterion ------------------------------------------------------------------------------


def test_flat_iops_is_steady_and_the_reason_gives_the_numbers() -> None:
    found = verdict([400, 401, 399, 400, 402, 400])
    assert bool(found["steady"])
    assert "IOPS within 0.7 % of its mean (max − min)" in found["steady_reason"]
    assert "last 5 windows of 1 s" in found["steady_reason"]
    # windows 2..6 are judged, and the first of them begins at 1 s
    assert (found["judged_from_s"], found["judged_to_s"]) == (1.0, 6.0)


def test_flat_but_noisy_within_the_rule_is_steady() -> None:
    values = [100.0, 108.0, 95.0, 103.0, 98.0]  # range 12.9 % of the mean, fitted line 3.6 %
    assert (max(values) - min(values)) / np.mean(values) < MAX_RANGE
    assert bool(verdict(values)["steady"]), verdict(values)["steady_reason"]
    assert bool(verdict([100, 119, 100, 119, 100, 119])["steady"])  # 17.4 %: within 20 %


@pytest.mark.parametrize(
    ("values", "word"),
    [
        ([100, 100, 100, 100, 70], "moved"),  # a 30 % cliff in the last window
        ([100, 100, 100, 75, 75], "moved"),  # a 25 % drop held for two windows
        ([140, 60, 140, 60, 140], "moved"),  # ±40 % alternation
        ([50_000, 50_000, 50_000, 50_000, 8_000], "moved"),
        ([401, 201, 399, 202, 199], "moved"),  # thinktime: 1 s of I/O, 0.5 s idle
        ([100, 104, 108, 112, 116], "rose"),  # a ramp inside the range limit: the line moves 14.8 %
        ([116, 112, 108, 104, 100], "fell"),
        ([90, 100, 110, 110, 110], "rose"),  # a ramp over the first 3 of the 5 windows
        ([100, 100, 106, 112, 118], "rose"),  # ... over the last 4
    ],
)
def test_cliffs_drops_alternation_and_ramps_are_not_steady(values: list[float], word: str) -> None:
    found = verdict(values)
    assert found["steady"] is False or not bool(found["steady"]), found["steady_reason"]
    assert word in found["steady_reason"]
    limit = MAX_RANGE if word == "moved" else MAX_EXCURSION
    assert f"limit {limit * 100:.1f} %" in found["steady_reason"]


@pytest.mark.parametrize("values", [[100, 110, 120], [100, 107, 114, 121], [344, 457, 400]])
def test_a_ramp_over_three_or_four_windows_is_too_short_never_steady(values: list[float]) -> None:
    found = verdict(values)
    assert pd.isna(found["steady"])
    assert found["steady_reason"].startswith(f"too short to judge ({len(values)} windows of 1 s, 5 needed)")
    assert "log_avg_msec" in found["steady_reason"] and "5 s at these windows" in found["steady_reason"]


def test_windows_without_io_cannot_be_judged() -> None:
    assert pd.isna(verdict([0, 0, 0, 0, 0])["steady"])


def test_only_the_last_windows_count_a_device_that_settled_after_its_cliff_is_steady() -> None:
    assert bool(verdict([90_000, 90_000, 90_000, 20_000, 20_100, 19_900, 20_000, 20_050])["steady"])


def test_windows_some_job_did_not_log_are_left_out() -> None:
    found = verdict([800, 800, 800, 800, 800, None])  # fio missed one job's last window: half the sum
    assert bool(found["steady"]) and "last 5 windows" in found["steady_reason"]
    assert pd.isna(verdict([800, 800, 800, 800, None])["steady"])


def test_fewer_than_five_complete_windows_cannot_be_judged() -> None:
    found = verdict([400, 400, None])
    assert pd.isna(found["steady"]) and "(2 windows of 1 s, 5 needed)" in found["steady_reason"]
    lonely = judge_windows(windows([400, 400]), timing((1, 1), (2, 1)))
    assert len(lonely) == 2 and lonely["steady"].isna().all()
    assert "(0 windows of 1 s, 5 needed)" in lonely.iloc[1]["steady_reason"]


def test_one_line_counts_the_points_too_short_and_says_what_would_judge_them() -> None:
    frame = pd.DataFrame(
        {
            "point": [1, 1, 2, 3, 4],
            "repeat": [1, 1, 1, 1, 1],
            "status": ["ok", "ok", "ok", "ok", "failed"],
            "steady": pd.array([True, True, None, None, None], dtype="boolean"),
            "steady_reason": ["IOPS within", "IOPS within", too_short(3, window=1.0), NO_LOGS, None],
        }
    )
    line = unjudged_line(frame)
    assert line is not None and line.startswith("steady state: 2 of 3 points × repeats not judged: ")
    assert "1 too short to judge (fewer than 5 complete windows)" in line
    assert "runtime of at least 5 × log_avg_msec after ramp_time, or lower log_avg_msec" in line
    assert "1 for other reasons" in line
    assert unjudged_line(frame[frame["point"].eq(1)]) is None


def test_window_totals_sum_jobs_and_weigh_latency_by_iops() -> None:
    rows = []
    for job, (iops, lat) in enumerate([(100.0, 10.0), (300.0, 20.0)], start=1):
        for window in (1, 2, 3):
            rows.append((job, window, "iops", iops))
            rows.append((job, window, "lat_mean_us", lat))
    rows.append((2, 4, "iops", 300.0))  # job 1 has no sample in window 4
    ts = pd.DataFrame(rows, columns=["job", "window", "metric", "value"]).assign(
        point=1, repeat=1, jobname="t", direction="read"
    )
    ts["t_s"] = ts["window"].astype(float)
    totals = window_totals(ts)
    assert totals["iops"].tolist() == [400.0, 400.0, 400.0, 300.0]
    assert totals["complete"].tolist() == [True, True, True, False]
    assert totals["lat_mean_us"].iloc[0] == pytest.approx((100 * 10 + 300 * 20) / 400)


# --- fio's own verdict --------------------------------------------------------------------------


def test_fio_s_steadystate_json_gives_the_verdict(tmp_path: Path) -> None:
    """fio 3.33, group_reporting: group 'attained' reached iops:5 %, group 'missed' (iops:0) never can."""
    process = ProcessRecord(argv=["fio"], jobfile_name="job.fio", output="fio.json", targets=[], sections=[])
    meta = PointMeta(key="0001-r1", point=1, repeat=1, params={}, status="ok", processes=[process])
    attained = tmp_path / "a"
    attained.mkdir()
    document = json.loads((DATA / "steadystate" / "fio.json").read_text())
    groups = {job["jobname"]: job for job in document["jobs"]}
    for name, target in (("attained", attained), ("missed", tmp_path / "m")):
        target.mkdir(exist_ok=True)
        (target / "fio.json").write_text(json.dumps({**document, "jobs": [groups[name]]}))
    found = fio_verdict(attained, meta)
    assert found is not None and found[0] is True
    assert found[1].startswith("fio steadystate iops:5.000000% attained over 2 s (reached ")
    missed = fio_verdict(tmp_path / "m", meta)
    assert missed is not None and missed[0] is False and "not attained" in missed[1]
    both = fio_verdict(DATA / "steadystate", meta)
    assert both is not None and both[0] is False
    assert fio_verdict(DATA / "logs", meta) is None  # no steadystate options, no verdict


def test_fio_s_verdict_wins_over_the_logs_when_the_point_asked_fio(tmp_path: Path) -> None:
    cliff = "".join(f"{t * 1000}, {400 if t < 5 else 100}, 0, 0, 0\n" for t in range(1, 8))
    options = {"log_avg_msec": "1000", "steadystate": "iops:5%", "steadystate_duration": "2s"}
    run = make_run(
        tmp_path,
        [
            {
                "point": 1,
                "files": {"t_iops.1.log": cliff, "fio.json": DATA / "steadystate" / "fio.json"},
                "options": options,
            },
            {"point": 2, "files": {"t_iops.1.log": cliff}},
        ],
    )
    found = verdicts(run).set_index("point")
    assert found.loc[1, "steady_reason"].startswith("fio steadystate")  # type: ignore[union-attr]
    assert found.loc[2, "steady"] is False or not bool(found.loc[2, "steady"])
    assert "moved" in str(found.loc[2, "steady_reason"])


# --- in the frame, the summary, the figure, the report ------------------------------------------


def _run_with_frame(tmp_path: Path) -> Path:
    """Point 1 steady (two repeats), point 2 not steady in its second repeat; every point has fio.json."""
    flat = "".join(f"{t * 1000}, {400 + t % 2}, 0, 0, 0\n" for t in range(1, 7))
    cliff = "".join(f"{t * 1000}, {400 if t < 4 else 60}, 0, 0, 0\n" for t in range(1, 7))
    lat = "".join(f"{t * 1000}, {50_000 + 1000 * t}, 0, 0, 0\n" for t in range(1, 7))
    points = [
        {
            "point": p,
            "repeat": r,
            "values": {"iodepth": p},
            "sections": ["rread"],
            "files": {
                "fio.json": GOLDEN,
                "rread_iops.1.log": cliff if (p, r) == (2, 2) else flat,
                "rread_lat.1.log": lat,
            },
        }
        for p in (1, 2)
        for r in (1, 2)
    ]
    return make_run(tmp_path, points, name="mixed")


def test_the_frame_carries_steady_per_point_and_repeat(tmp_path: Path) -> None:
    frame = iobench.load(_run_with_frame(tmp_path))
    by_run = frame.drop_duplicates(["point", "repeat"]).set_index(["point", "repeat"])["steady"]
    assert by_run.to_dict() == {(1, 1): True, (1, 2): True, (2, 1): True, (2, 2): False}
    assert "steady" not in iobench.plots.parameter_columns(frame)
    assert "steady_reason" not in iobench.plots.parameter_columns(frame)
    totals = iobench.point_totals(frame)
    assert totals["steady"].tolist() == [True, True, True, False]


def test_summarize_flags_or_leaves_out_repeats_not_steady(tmp_path: Path) -> None:
    frame = iobench.load(_run_with_frame(tmp_path))
    flagged = summarize(frame).set_index("point")
    assert flagged["unsteady"].to_dict() == {1: 0, 2: 1} and flagged["n"].to_dict() == {1: 2, 2: 2}
    only = summarize(frame, steady_only=True).set_index("point")
    assert only["n"].to_dict() == {1: 2, 2: 1} and only["unsteady"].to_dict() == {1: 0, 2: 1}
    old = summarize(frame.drop(columns=["steady", "steady_reason"]))
    assert old["unsteady"].isna().all()


def test_short_runtime_is_not_flagged_when_fio_stopped_at_steady_state() -> None:
    rows = pd.DataFrame(
        {
            "point": [1, 2],
            "repeat": [1, 1],
            "direction": "read",
            "status": "ok",
            "iops": [800.0, 800.0],
            "runtime_ms": [3900, 3900],
            "runtime_requested_ms": [10_000, 10_000],
            "steady": pd.array([True, True], dtype="boolean"),
            "steady_reason": ["fio steadystate iops:5% attained over 2 s", "IOPS within 1 %"],
        }
    )
    assert summarize(rows).set_index("point")["short_runtime"].to_dict() == {1: False, 2: True}


def test_the_timeline_draws_each_repeat_and_shades_what_was_judged(tmp_path: Path) -> None:
    run = _run_with_frame(tmp_path)
    fig = timeline(run)
    axes = fig.axes
    assert len(axes) == 4  # two points × (IOPS, latency)
    assert "point 2" in axes[2].get_title(loc="left") and "not steady in repeat 2 (of 2)" in axes[
        2
    ].get_title(loc="left")
    assert axes[0].get_title(loc="left").endswith(": steady")
    lines = [line for line in axes[2].get_lines() if len(line.get_xdata())]
    assert sorted(len(line.get_xdata()) for line in lines) == [6, 6]
    assert max(max(line.get_ydata()) for line in lines) == 401
    shaded = {tuple(round(c, 3) for c in patch.get_facecolor()[:3]) for patch in axes[2].patches}
    from matplotlib.colors import to_rgb

    assert tuple(round(c, 3) for c in to_rgb(JUDGED_COLOURS[False])) in shaded
    # Opaque shades, each one the legend names: overlapping repeats never blend into another colour.
    named = {
        tuple(round(c, 3) for c in to_rgb(line.get_color()))
        for line in fig.axes[0].get_lines()
        if not len(line.get_xdata())
    }
    assert all(patch.get_alpha() in (None, 1.0) for ax in axes for patch in ax.patches)
    assert {tuple(round(c, 3) for c in p.get_facecolor()[:3]) for ax in axes for p in ax.patches} <= named
    one = timeline(iobench.timeseries(run), points=[2], latency=None)
    assert len(one.axes) == 1
    with pytest.raises(ResultsError, match="no logs for point 9"):
        timeline(run, points=[9])
    with pytest.raises(
        ResultsError,
        match="timeline: y 'clat_p99_us' is not a throughput metric of fio's logs; y takes iops, bw_bytes",
    ):
        timeline(run, y="clat_p99_us")
    with pytest.raises(ResultsError, match="timeline: x 'iodepth' cannot be chosen here: x is the time"):
        draw("timeline", run, x="iodepth")


def test_iobench_plot_timeline_and_the_report_show_the_points_not_steady(tmp_path: Path) -> None:
    run = _run_with_frame(tmp_path)
    result = runner.invoke(app, ["plot", str(run), "timeline", "-o", str(tmp_path / "t.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "t.png").read_bytes().startswith(b"\x89PNG")
    frame = iobench.load(run)
    assert unsteady_points(frame) == [2]
    report = write_report(run, tmp_path / "report")
    assert any(p.name == "timeline-not-steady.png" for p in report.figures)
    page = report.html.read_text()
    section = page.split("Points that were not steady")[1].split("</table>")[0]
    assert "<td>2</td><td>2</td>" in section and "moved" in section
    assert "not steady (repeat 2 of 2)" in page


def test_the_report_of_an_old_run_without_logs_has_no_steady_section(tmp_path: Path) -> None:
    run = make_run(tmp_path, [{"files": {"fio.json": GOLDEN}, "sections": ["rread"]}], name="old")
    frame = iobench.load(run)
    assert frame["steady"].isna().all() and frame["steady_reason"].str.contains("no fio logs").all()
    page = write_report(run, tmp_path / "report").html.read_text()
    assert "Points that were not steady" not in page
    shutil.rmtree(run)


# --- real fio -----------------------------------------------------------------------------------


UNSETTLED = """
version: 1
name: unsettled
targets:
  - path: {target}
    size: 8M
fio:
  ioengine: null
  rw: randread
  bs: 4k
  runtime: 8
  time_based: 1
  rate_iops: 400
  thinktime: 1000000
  thinktime_iotime: 2
  rate_ignore_thinktime: 1
  steadystate: iops:0
matrix:
  steadystate_duration: [0, 2]
"""


@pytest.mark.fio
def test_real_fio_that_does_not_settle_is_not_steady(tmp_path: Path) -> None:
    """2 s of I/O at 400 IOPS, 1 s idle, again: the last 5 windows span far more than 20 % of their mean.

    Point 1 is judged by iobench from the logs (no steady-state duration);
    point 2 by fio itself, with a criterion that cannot hold (``iops:0``).
    """
    matrix = tmp_path / "m.yaml"
    matrix.write_text(UNSETTLED.format(target=tmp_path / "target.dat"))
    result = iobench.run(load_matrix(matrix), out=tmp_path / "r")
    assert result.counts == {"ok": 2}
    frame = iobench.load(result.run_dir).drop_duplicates("point").set_index("point")
    assert frame["steady"].tolist() == [False, False], frame["steady_reason"].tolist()
    assert "IOPS moved" in str(frame.loc[1, "steady_reason"])
    assert str(frame.loc[2, "steady_reason"]).startswith("fio steadystate iops:0")
    assert "not attained" in str(frame.loc[2, "steady_reason"])
    ts = iobench.timeseries(result.run_dir)
    iops = ts[(ts.metric == "iops") & (ts.point == 1)]["value"]
    assert iops.min() < 300 < iops.max()


@pytest.mark.fio
def test_iobench_run_and_the_report_count_the_points_too_short_to_judge(tmp_path: Path) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(
        f"version: 1\nname: short\ntargets: [{{path: {tmp_path / 't.dat'}, size: 8M}}]\n"
        "fio: {ioengine: null, rw: randread, bs: 4k, runtime: 2, time_based: 1, rate_iops: 400}\n"
    )
    done = runner.invoke(app, ["run", str(matrix), "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    [line] = [line for line in done.output.splitlines() if line.startswith("steady state:")]
    assert line.startswith("steady state: 1 of 1 points × repeats not judged: 1 too short to judge")
    [run] = (tmp_path / "out").iterdir()
    page = write_report(run, tmp_path / "report").html.read_text()
    assert "1 too short to judge (fewer than 5 complete windows)" in page

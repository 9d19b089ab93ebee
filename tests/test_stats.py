"""summarize(): a point's jobs combined per repeat (iobench.results.points), then mean/std/CI/CV over repeats."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from iobench.errors import ResultsError
from iobench.results.points import NOISY_CV, summarize, t975


def t_cdf(x: float, dof: int) -> float:
    """Student t CDF by numeric integration of its density (independent of the table)."""
    grid = np.linspace(0.0, x, 200_001)
    logc = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    pdf = np.exp(logc - (dof + 1) / 2 * np.log1p(grid**2 / dof))
    return 0.5 + float(np.trapezoid(pdf, grid))


@pytest.mark.parametrize("dof", [1, 2, 3, 5, 10, 29, 30, 31, 45, 100, 1000])
def test_t975_is_the_0975_quantile(dof: int) -> None:
    assert t_cdf(t975(dof), dof) == pytest.approx(0.975, abs=2e-5)


def test_t975_rejects_zero_dof() -> None:
    with pytest.raises(ValueError, match="degrees of freedom"):
        t975(0)


def frame(iops_by_repeat: list[tuple[float, float]], **extra: object) -> pd.DataFrame:
    """Point 0, two jobs per repeat, read only; lat 100 µs for job 0, 300 µs for job 1."""
    rows = []
    for repeat, (a, b) in enumerate(iops_by_repeat):
        for job, iops, lat in ((0, a, 100.0), (1, b, 300.0)):
            rows.append(
                {
                    "point": 0,
                    "repeat": repeat,
                    "iodepth": 4,
                    "jobname": "j",
                    "job_index": job,
                    "direction": "read",
                    "status": "ok",
                    "iops": iops,
                    "bw_bytes": iops * 4096,
                    "runtime_ms": 1000,
                    "lat_mean_us": lat,
                    "cpu_us_per_io": 2.0 if job else 1.0,
                }
                | extra
            )
    df = pd.DataFrame(rows)
    return df.astype({"iops": "Float64", "lat_mean_us": "Float64", "runtime_ms": "Int64"})


def test_jobs_are_summed_then_averaged_over_repeats() -> None:
    s = summarize(frame([(100, 300), (200, 400), (300, 500)]))
    assert len(s) == 1
    r = s.iloc[0]
    assert r["point"] == 0
    assert r["iodepth"] == 4  # a parameter column is kept as a key
    assert r["n"] == 3
    sums = [400, 600, 800]
    assert r["iops_mean"] == pytest.approx(600)
    assert r["iops_std"] == pytest.approx(np.std(sums, ddof=1))
    assert r["iops_ci95"] == pytest.approx(t975(2) * 200 / math.sqrt(3))
    assert r["iops_cv"] == pytest.approx(200 / 600)
    assert bool(r["noisy"])
    # repeat 0: (100*100 + 300*300) / 400 = 250 µs, weighted by each job's I/Os
    lat = [(a * 100 + b * 300) / (a + b) for a, b in [(100, 300), (200, 400), (300, 500)]]
    assert r["lat_mean_us_mean"] == pytest.approx(np.mean(lat))
    cpu = [(a * 1 + b * 2) / (a + b) for a, b in [(100, 300), (200, 400), (300, 500)]]
    assert r["cpu_us_per_io_mean"] == pytest.approx(np.mean(cpu))
    inflight = [s * lt / 1e6 for s, lt in zip(sums, lat, strict=True)]
    assert r["inflight_mean"] == pytest.approx(np.mean(inflight))


def test_steady_point_is_not_noisy_and_one_repeat_has_no_spread() -> None:
    steady = summarize(frame([(100, 100), (100, 101)])).iloc[0]
    assert not bool(steady["noisy"])
    single = summarize(frame([(100, 100)])).iloc[0]
    assert single["n"] == 1
    assert pd.isna(single["iops_std"])
    assert pd.isna(single["iops_ci95"])


@pytest.mark.parametrize(
    ("repeats", "noisy"),
    [
        ([(500, 500), (509, 509)], False),  # two repeats 1.8 % apart: a CV of 1.3 %, a 95 % CI of ±11 %
        ([(500, 500), (550, 550)], True),  # 10 % apart: a CV of 6.7 %
        ([(500, 500), (520, 520), (480, 480), (540, 540), (460, 460)], True),  # a CV of 6.3 %, CI ±8 %
    ],
)
def test_noisy_is_the_cv_above_the_one_limit_whatever_the_interval(
    repeats: list[tuple[float, float]], noisy: bool
) -> None:
    row = summarize(frame(repeats)).iloc[0]
    assert bool(row["noisy"]) is noisy and (float(row["iops_cv"]) > NOISY_CV) is noisy


def test_rows_not_ok_never_become_data() -> None:
    df = frame([(100, 100), (100, 100), (900, 900)])
    df.loc[df["repeat"] == 2, "status"] = "failed"
    r = summarize(df).iloc[0]
    assert r["n"] == 2
    assert r["iops_mean"] == pytest.approx(200)


def test_short_runtime_flag() -> None:
    df = frame([(100, 100), (100, 100)], runtime_requested_ms=1000)
    assert not bool(summarize(df).iloc[0]["short_runtime"])
    df.loc[(df["repeat"] == 1), "runtime_ms"] = 640
    assert bool(summarize(df).iloc[0]["short_runtime"])


def test_points_and_directions_are_kept_apart() -> None:
    a = frame([(100, 100)])
    b = frame([(50, 50)]).assign(point=1, iodepth=8)
    w = frame([(10, 10)]).assign(direction="write")
    s = summarize(pd.concat([a, b, w], ignore_index=True))
    got = {(p, d): v for p, d, v in zip(s["point"], s["direction"], s["iops_mean"], strict=True)}
    assert got == {(0, "read"): 200, (0, "write"): 20, (1, "read"): 100}


def test_by_splits_a_point_and_an_unknown_column_is_an_error() -> None:
    df = frame([(100, 300), (200, 400)])
    df["target"] = pd.array(["/a", "/b"] * 2, dtype="string")
    whole = summarize(df)
    assert len(whole) == 1 and whole["target"].tolist() == ["/a+/b"]
    split = summarize(df, by=["target"])
    assert list(split.columns[:4]) == ["point", "iodepth", "target", "direction"]
    assert split["iops_mean"].tolist() == [150, 350]
    assert split["iops_mean"].sum() == whole["iops_mean"].iloc[0]  # equal runtimes: rates add up
    with pytest.raises(ResultsError, match="no column 'numjobs'"):
        summarize(df, by=["numjobs"])


def test_unequal_runtimes_count_all_ios_over_the_longest() -> None:
    """fio's group rule: 1000 I/Os in 1 s and 3000 in 3 s are 4000 over 3 s, not 1000 + 1000 IOPS."""
    df = frame([(1000, 1000)])
    df["runtime_ms"] = pd.array([1000, 3000], dtype="Int64")
    [r] = summarize(df).to_dict("records")
    assert r["iops_mean"] == pytest.approx(4000 / 3)
    assert r["lat_mean_us_mean"] == pytest.approx((1000 * 100 + 3000 * 300) / 4000)


def test_runs_are_kept_apart() -> None:
    a = frame([(100, 100)]).assign(run_id="a")
    b = frame([(300, 300)]).assign(run_id="b")
    s = summarize(pd.concat([a, b], ignore_index=True))
    assert s["run_id"].tolist() == ["a", "b"] and s["n"].tolist() == [1, 1]
    assert s["iops_mean"].tolist() == [200, 600]


def test_no_successful_point_gives_an_empty_summary() -> None:
    df = frame([(100, 100)]).assign(status="failed")
    s = summarize(df)
    assert s.empty and {"point", "n", "noisy"} <= set(s.columns)


def test_a_run_where_every_point_failed_summarizes_to_nothing() -> None:
    failed = pd.DataFrame(
        {"point": [1, 2], "repeat": [1, 1], "status": ["failed", "timeout"], "reason": ["x", "y"]}
    )
    assert summarize(failed).empty

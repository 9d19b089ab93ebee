"""summarize(): jobs combined per repeat, then mean/std/CI/CV over repeats."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from iobench.errors import ResultsError
from iobench.stats import summarize, t975


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


def test_explicit_by_and_unknown_column() -> None:
    df = frame([(100, 100), (200, 200)])
    s = summarize(df, by=["iodepth"])
    assert list(s.columns[:2]) == ["iodepth", "direction"]
    with pytest.raises(ResultsError, match="no column 'numjobs'"):
        summarize(df, by=["numjobs"])

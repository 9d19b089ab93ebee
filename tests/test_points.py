"""One truth per point: fio's group rule, percentiles of merged json+ histograms, one number everywhere.

Oracles are fio itself: the percentiles it printed beside each histogram, the
"All clients" entry it sums from every job of a client/server run (the same
jobs, the same run), and a ``--group_reporting`` run of a point's job file.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

import iobench
from iobench.errors import ResultsError
from iobench.matrix.model import load_matrix
from iobench.report.page import write_report
from iobench.results.fioout import parse_fio, parse_fio_text
from iobench.results.fioout.bins import decode, encode
from iobench.results.fioout.detect import find_json
from iobench.results.points import headline, merged_percentiles, point_totals, rate_totals, summarize
from iobench.runner.sweep import run
from iobench.system.process import run_process

GEN = Path(__file__).parent / "data" / "fio" / "fio-3.33"
JSONPLUS = ("jsonplus.json", "jsonplus_jobs.json", "jsonplus_group.json", "client_plus.json")


def document(name: str) -> dict[str, Any]:
    obj = find_json((GEN / name).read_text())
    assert obj is not None
    return obj


def entries(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc.get("client_stats") or doc["jobs"])


def latencies(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every latency object that carries a histogram, named ``<job>/<direction>/<kind>``."""
    for index, entry in enumerate(entries(doc)):
        for direction in ("read", "write", "trim"):
            for kind in ("clat_ns", "lat_ns", "slat_ns"):
                lat = entry.get(direction, {}).get(kind, {})
                if lat.get("bins"):
                    yield f"{index}:{entry['jobname']}/{direction}/{kind}", lat


def fio_rule(bins: dict[int, int], percentile: str) -> int:
    """The test's own reading of calc_clat_percentiles(): the first bin whose running count reaches p % of all."""
    total = sum(bins.values())
    need = Fraction(float(percentile)) / 100 * total  # p as the double fio holds; no rounding after
    running = 0
    for value in sorted(bins):
        running += bins[value]
        if running >= need:
            return value
    raise AssertionError("percentile beyond the histogram")


def summed(*histograms: dict[str, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for histogram in histograms:
        for value, count in histogram.items():
            out[int(value)] = out.get(int(value), 0) + count
    return out


# --- percentiles: every value fio printed is the one the merged-bins rule gives ------------------------


@pytest.mark.parametrize("name", JSONPLUS)
def test_each_histogram_gives_every_percentile_fio_printed(name: str) -> None:
    checked = 0
    for label, lat in latencies(document(name)):
        cells = pd.Series([encode(lat["bins"], 1e-3)], dtype="string")
        printed = {float(p): v for p, v in lat["percentile"].items()}
        got = merged_percentiles(cells, np.zeros(1, dtype=np.int64), 1, list(printed))[0]
        assert got.tolist() == pytest.approx([v / 1000 for v in printed.values()], rel=1e-12), label
        checked += len(printed)
    assert checked >= 17


def test_group_reporting_histogram_is_fios_merge_and_gives_its_percentiles() -> None:
    [group] = document("jsonplus_group.json")["jobs"]
    df = parse_fio(GEN / "jsonplus_group.json")
    [row] = point_totals(df).to_dict("records")
    clat = group["read"]["clat_ns"]
    assert row["clat_p99_us"] == clat["percentile"]["99.000000"] / 1000
    assert row["clat_p99_9_us"] == clat["percentile"]["99.900000"] / 1000
    assert row["pct_exact"] is True


def test_a_points_percentiles_come_from_its_jobs_merged_histograms() -> None:
    doc = document("jsonplus_jobs.json")
    jobs = doc["jobs"]
    assert len(jobs) == 2
    [row] = point_totals(parse_fio(GEN / "jsonplus_jobs.json")).to_dict("records")
    for kind, prefix in (("clat_ns", "clat"), ("lat_ns", "lat"), ("slat_ns", "slat")):
        merged = summed(*(job["read"][kind]["bins"] for job in jobs))
        for p, column in (("50", "p50"), ("90", "p90"), ("99", "p99"), ("99.9", "p99_9")):
            assert row[f"{prefix}_{column}_us"] == fio_rule(merged, p) / 1000, (kind, p)
    # Not what weighting each job's percentile gives: the old approximation is gone.
    weighted = sum(
        j["read"]["clat_ns"]["percentile"]["99.900000"] * j["read"]["total_ios"] for j in jobs
    ) / sum(j["read"]["total_ios"] for j in jobs)
    assert row["clat_p99_9_us"] != pytest.approx(weighted / 1000, rel=1e-6)
    assert row["pct_exact"] is True


# --- fio's group rule: the same jobs summed by fio ("All clients") and by iobench -------------------------


def test_point_is_what_fio_sums_the_same_jobs_to() -> None:
    doc = document("client_plus.json")
    *jobs, everyone = entries(doc)
    assert everyone["jobname"] == "All clients" and len(jobs) == 4
    assert len({j["read"]["runtime"] for j in jobs}) > 1, "the fixture's jobs must end at different times"
    [row] = point_totals(parse_fio(GEN / "client_plus.json")).to_dict("records")
    read = everyone["read"]
    assert row["iops"] == pytest.approx(read["iops"], rel=1e-9)
    assert row["bw_bytes"] == pytest.approx(read["bw_bytes"], abs=1)  # fio truncates B/s to an integer
    assert row["io_bytes"] == read["io_bytes"]
    assert row["total_ios"] == read["total_ios"]
    assert row["runtime_ms"] == read["runtime"]
    for column, kind in (("clat_mean_us", "clat_ns"), ("lat_mean_us", "lat_ns")):
        assert row[column] == pytest.approx(read[kind]["mean"] / 1000, rel=1e-9)
    assert row["usr_cpu"] == pytest.approx(everyone["usr_cpu"], rel=1e-6)
    assert row["sys_cpu"] == pytest.approx(everyone["sys_cpu"], rel=1e-6)
    assert row["ctx"] == everyone["ctx"]
    assert row["job_runtime_ms"] == everyone["job_runtime"]
    assert row["jobs"] == 4
    # Each job's own rate, summed, is what the point is not.
    assert sum(j["read"]["iops"] for j in jobs) > 1.4 * row["iops"]


def test_targets_are_one_point_unless_split_by() -> None:
    df = parse_fio(GEN / "client_plus.json")
    df["target"] = df["jobname"].map({"rate1M": "/small", "rate3M": "/large"}).astype("string")
    [whole] = point_totals(df).to_dict("records")
    assert whole["target"] == "/large+/small"
    split = point_totals(df, by=["target"]).set_index("target")
    assert split.loc["/small", "runtime_ms"] < split.loc["/large", "runtime_ms"]
    assert split["total_ios"].sum() == whole["total_ios"]
    assert split.loc["/small", "iops"] == pytest.approx(512 / split.loc["/small", "runtime_ms"] * 1000)
    with pytest.raises(ResultsError, match="no column 'rack'"):
        point_totals(df, by=["rack"])


def test_cpu_per_io_is_the_jobs_cpu_time_over_their_ios_in_every_direction() -> None:
    [job] = document("jsonplus.json")["jobs"]  # randrw: one job, two directions
    rows = point_totals(parse_fio(GEN / "jsonplus.json"))
    ios = job["read"]["total_ios"] + job["write"]["total_ios"]
    expected = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] * 1000 / ios
    assert rows["cpu_us_per_io"].tolist() == pytest.approx([expected, expected])


# --- approximate percentiles are marked, never silent --------------------------------------------------


def test_plain_json_percentiles_are_fios_for_one_job_and_marked_approximate_for_several() -> None:
    one = point_totals(parse_fio(GEN / "read.json"))
    assert one["pct_exact"].tolist() == [True]
    several = point_totals(parse_fio(GEN / "numjobs.json"))
    assert several["pct_exact"].tolist() == [False] and several["clat_p99_us"].notna().all()
    assert summarize(parse_fio(GEN / "numjobs.json"))["pct_exact"].tolist() == [False]
    none = point_totals(parse_fio(GEN / "nopct.json"))
    assert none["pct_exact"].isna().all()


def test_histograms_survive_csv_and_parquet(tmp_path: Path) -> None:
    df = parse_fio(GEN / "jsonplus_jobs.json")
    df.to_csv(tmp_path / "f.csv", index=False)
    df.to_parquet(tmp_path / "f.parquet", index=False)
    expected = point_totals(df)
    for path in (tmp_path / "f.csv", tmp_path / "f.parquet"):
        again = point_totals(iobench.load(path))
        assert again["clat_p99_us"].tolist() == expected["clat_p99_us"].tolist()
        assert again["pct_exact"].tolist() == [True]


def test_a_malformed_histogram_cell_is_an_error() -> None:
    df = parse_fio(GEN / "jsonplus_jobs.json")
    df.loc[0, "clat_bins"] = "8640:10,oops"
    with pytest.raises(ResultsError, match="not '<ns>:<count>"):
        point_totals(df)
    with pytest.raises(ResultsError, match="whole numbers"):
        encode({"100": 1.5}, 1e-3)


def test_fio_2_histogram_layouts_become_ns() -> None:
    # fio 2.2.12-2.19: every bin by index (bits 6: 0-127 exact, then two per value, ...), values in µs.
    indexed = {
        "0": 0,
        "5": 2,
        "128": 3,
        "130": 1,
        "1215": 4,
        "FIO_IO_U_PLAT_BITS": 6,
        "FIO_IO_U_PLAT_VAL": 64,
    }
    bins = decode(pd.Series([encode(indexed, 1.0)]))
    assert bins.values_ns.tolist() == [5_000, 129_000, 133_000, 16_711_680_000]
    assert bins.counts.tolist() == [2, 3, 1, 4]
    # fio 2.20-2.99: keyed by value in µs.
    assert encode({"12": 3, "14": 1}, 1.0) == "12000:3,14000:1"


# --- a real run: every consumer gives the point's one number -------------------------------------------


def _json_plus(argv: list[str], **kwargs: Any) -> Any:
    """The runner's fio, asked for json+ (what iobench.plan will ask for itself)."""
    return run_process(
        ["--output-format=json+" if a == "--output-format=json" else a for a in argv], **kwargs
    )


def _group_from_raw(point_dir: Path) -> dict[str, float]:
    """fio's group definition computed by hand from one point's raw fio output."""
    doc = json.loads((point_dir / "fio.json").read_text())
    reads = [job["read"] for job in doc["jobs"]]
    longest = max(r["runtime"] for r in reads)
    ios = sum(r["total_ios"] for r in reads)
    merged = summed(*(r["clat_ns"]["bins"] for r in reads))
    return {
        "iops": ios / longest * 1000,
        "bw_bytes": sum(r["io_bytes"] for r in reads) / longest * 1000,
        "runtime_ms": longest,
        "clat_mean_us": sum(r["clat_ns"]["mean"] * r["clat_ns"]["N"] for r in reads) / ios / 1000,
        "clat_p99_us": fio_rule(merged, "99") / 1000,
        "jobs": len(reads),
    }


MATRIX = """
version: 1
name: unequal
description: "two targets <script>alert(1)</script> of unequal size"
targets:
  - path: {dir}/small.dat
    size: 1M
  - path: {dir}/large.dat
    size: 3M
fio:
  ioengine: psync
  rw: randread
  bs: 4k
  rate_iops: 500
  numjobs: 2
matrix:
  iodepth: [1, 2]
repeat: 2
"""


@pytest.fixture(scope="module")
def unequal_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two file targets (1 and 3 MiB) at 500 IOPS a job: jobs that end 0.5 s and 1.5 s in."""
    base = tmp_path_factory.mktemp("unequal")
    (base / "m.yaml").write_text(MATRIX.format(dir=base))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(base / "state"))
        result = run(load_matrix(base / "m.yaml"), out=base / "r", executor=_json_plus)
    assert result.counts == {"ok": 4}
    return result.run_dir


@pytest.mark.fio
def test_one_number_per_point_everywhere(unequal_run: Path, tmp_path: Path) -> None:
    df = iobench.load(unequal_run)
    assert df["clat_bins"].notna().all()
    totals = iobench.point_totals(df).sort_values(["point", "repeat"])
    assert len(totals) == 4 and totals["target"].nunique() == 1  # both targets in one row
    for row in totals.itertuples():
        truth = _group_from_raw(unequal_run / "points" / f"{row.point:04d}-r{row.repeat}")
        assert row.jobs == truth["jobs"] == 4
        assert row.runtime_ms == truth["runtime_ms"]
        for column in ("iops", "bw_bytes", "clat_mean_us"):
            assert getattr(row, column) == pytest.approx(truth[column], rel=0.01), column
        assert row.clat_p99_us == pytest.approx(truth["clat_p99_us"], rel=0.02)
        assert row.pct_exact
        # 4 jobs of 256 + 768 I/Os, each job's own rate summed: not 2 x 1000. fio's rate limit
        # caps every job, so a loaded machine can only make this lower.
        assert row.iops < 1400
    summary = iobench.summarize(df).sort_values("point")
    assert len(summary) == 2 and summary["n"].eq(2).all()
    means = totals.groupby("point")[["iops", "clat_p99_us"]].mean()
    assert summary["iops_mean"].tolist() == pytest.approx(means["iops"].tolist(), rel=1e-12)
    assert summary["clat_p99_us_mean"].tolist() == pytest.approx(means["clat_p99_us"].tolist(), rel=1e-12)
    assert summary["pct_exact"].all()

    report = write_report(unequal_run, tmp_path / "report")
    csv = pd.read_csv(tmp_path / "report" / "summary.csv").sort_values("point")
    assert csv["iops_mean"].tolist() == pytest.approx(summary["iops_mean"].tolist(), rel=1e-12)
    page = report.html.read_text()
    for value in summary["iops_mean"]:
        assert f"{value:,.0f}" in page

    [ax, _] = iobench.plots.sweep(df, y="iops").axes
    caps = {id(cap) for c in ax.containers if isinstance(c, ErrorbarContainer) for cap in c.lines[1]}
    [line] = [ln for ln in ax.lines if id(ln) not in caps]
    assert list(line.get_xdata()) == [1, 2]
    assert list(line.get_ydata()) == pytest.approx(summary["iops_mean"].tolist(), rel=1e-12)

    raw = [parse_fio_text((unequal_run / "points" / "0001-r1" / "fio.json").read_text())]
    iops, lat, hosts = headline(raw)
    first = totals.iloc[0]
    assert iops == pytest.approx(float(first["iops"]), rel=1e-12)
    assert lat == pytest.approx(float(first["lat_mean_us"]), rel=1e-12)
    assert hosts == 1


@pytest.mark.parametrize("name", [*JSONPLUS, "read.json", "numjobs.json", "nopct.json"])
def test_rate_totals_are_point_totals_rates(name: str) -> None:
    df = parse_fio(GEN / name)
    rates = ["source", "direction", "iops", "bw_bytes", "io_bytes", "total_ios", "runtime_ms"]
    full, fast = point_totals(df), rate_totals(df)
    pd.testing.assert_frame_equal(fast[rates], full[rates])


@pytest.mark.fio
def test_rate_totals_of_a_run_are_its_point_totals_rates(unequal_run: Path) -> None:
    df = iobench.load(unequal_run)
    rates = [
        "run_id",
        "point",
        "repeat",
        "direction",
        "iops",
        "bw_bytes",
        "io_bytes",
        "total_ios",
        "runtime_ms",
    ]
    pd.testing.assert_frame_equal(rate_totals(df)[rates], point_totals(df)[rates])


@pytest.mark.fio
def test_fio_group_reporting_of_the_same_job_file_agrees(unequal_run: Path, tmp_path: Path) -> None:
    point = unequal_run / "points" / "0001-r1"
    done = subprocess.run(
        ["fio", "--output-format=json+", "--group_reporting", str(point / "job.fio")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    [group] = json.loads(done.stdout)["jobs"]
    read = group["read"]
    [row] = point_totals(iobench.load(unequal_run).query("point == 1 and repeat == 1")).to_dict("records")
    assert row["iops"] == pytest.approx(read["iops"], rel=0.01)
    assert row["bw_bytes"] == pytest.approx(read["bw_bytes"], rel=0.01)
    assert row["runtime_ms"] == pytest.approx(read["runtime"], rel=0.01)
    assert row["total_ios"] == read["total_ios"]
    # fio's group histogram read with the same rule gives the percentiles fio printed for the group.
    reference = point_totals(parse_fio_text(done.stdout)).iloc[0]
    assert reference["clat_p99_us"] == read["clat_ns"]["percentile"]["99.000000"] / 1000
    assert math.isfinite(float(reference["clat_p99_us"]))


def test_each_fio_group_of_an_output_is_a_point_of_its_own() -> None:
    """stonewall runs groups one after another; fio reports each alone and so does iobench."""
    doc = document("stonewall.json")
    totals = point_totals(parse_fio(GEN / "stonewall.json"))
    assert totals["groupid"].tolist() == [0, 1]
    assert totals["iops"].tolist() == pytest.approx([job["read"]["iops"] for job in doc["jobs"]], rel=1e-12)
    for name in ("terse.txt", "normal_group.txt", "group.json"):
        assert parse_fio(GEN / name)["groupid"].eq(0).all(), name

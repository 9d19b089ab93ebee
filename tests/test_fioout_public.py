"""parse_fio on 13 fio outputs people published (fio 2.1.3 to 3.40).

The files are in tests/data/fio-outputs/public/, byte for byte as published;
SOURCES.md there says where each came from (repository, path, commit) and what it
exercises. Every expected value below was read off the file.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from iobench.errors import ResultsError
from iobench.results.fioout import parse_fio
from iobench.results.fioout.joboptions import PARSED_DTYPES

PUBLIC = Path(__file__).resolve().parent / "data" / "fio-outputs" / "public"


def parse(name: str) -> pd.DataFrame:
    df = parse_fio(PUBLIC / name)
    assert {c: str(t) for c, t in df.dtypes.items()} == PARSED_DTYPES
    return df


def one(df: pd.DataFrame, job_index: int, direction: str) -> pd.Series:
    hit = df[(df["job_index"] == job_index) & (df["direction"] == direction)]
    assert len(hit) == 1
    return hit.iloc[0]


# file, job_index, direction, iops, bw_bytes, lat_mean_us, clat_p99_us, fio_version
JSON_CASES = [
    # 2.x: bw in KiB/s, latencies in µs
    ("p01_pkb_fio-2.1.4_sample.json", 0, "write", 133, 68118 * 1024, 478737.47, 823296, "fio-2.1.4"),
    ("p02_pkb_fio-2.17_hist.json", 1, "write", 2457.017193, 39312 * 1024, 810.977136, 2384, "fio-2.17"),
    # 3.x: bw_bytes, latencies in ns
    (
        "p03_pbench_fio-3.7_client2hosts.txt",
        5,
        "read",
        10833.599574,
        44382875,
        2952.604459596,
        3489.792,
        "fio-3.7",
    ),
    ("p04_pbench_fio-3.19.txt", 0, "write", 96.729827, 396206, 330857.58337468, 985661.44, "fio-3.19"),
    (
        "p05_bensonjohnson_fio-3.33_sigint.json",
        0,
        "read",
        7662.030309,
        31383676,
        7891.233793714,
        35913.728,
        "fio-3.33",
    ),
    (
        "p06_brahiamacosta_fio-3.36_group.json",
        0,
        "read",
        3266.695555,
        428172319,
        2438.512967585,
        3719.168,
        "fio-3.36",
    ),
    (
        "p08_styliteag_fio-3.40_readwrite.json",
        0,
        "write",
        10056.894311,
        41193039,
        49.263245807,
        154.624,
        "fio-3.40",
    ),
    # 3.1 has ns latencies but no bw_bytes yet
    (
        "p09_jbernsteiniv_fio-3.1_4jobs.json",
        4,
        "read",
        18379.947415,
        73519 * 1024,
        1739.70107411,
        6848.512,
        "fio-3.1",
    ),
    ("p13_yardstick_fio-2.1.3_compact.json", 0, "write", 21045, 84182 * 1024, 233.55, 358, "fio-2.1.3"),
]


@pytest.mark.parametrize(("name", "index", "direction", "iops", "bw", "lat", "p99", "version"), JSON_CASES)
def test_json_values(
    name: str,
    index: int,
    direction: str,
    iops: float,
    bw: float,
    lat: float,
    p99: float,
    version: str,
) -> None:
    r = one(parse(name), index, direction)
    assert r["iops"] == pytest.approx(iops)
    assert r["bw_bytes"] == pytest.approx(bw)
    assert r["lat_mean_us"] == pytest.approx(lat)
    assert r["clat_p99_us"] == pytest.approx(p99)
    assert r["fio_version"] == version


def test_fio2_io_bytes_is_kib() -> None:
    # 2.x wrote KiB under "io_bytes": 393280 KiB = 24580 writes of 16 KiB
    assert one(parse("p02_pkb_fio-2.17_hist.json"), 1, "write")["io_bytes"] == 393280 * 1024


def test_fio2_1_without_total_ios_estimates_ios_for_cpu() -> None:
    r = one(parse("p01_pkb_fio-2.1.4_sample.json"), 0, "write")
    # usr 0.23 + sys 1.20 percent of 5314 ms over 133 iops * 5.314 s ios
    assert r["cpu_us_per_io"] == pytest.approx(1.43 / 100 * 5314e3 / (133 * 5.314))
    assert r["slat_mean_us"] == pytest.approx(1001.72)


def test_client_server_hosts_and_no_aggregate() -> None:
    df = parse("p03_pbench_fio-3.7_client2hosts.txt")
    assert len(df) == 10
    assert df["host"].value_counts().to_dict() == {"perf36": 5, "perf84": 5}
    assert "All clients" not in set(df["jobname"])


def test_numjobs_entries_share_a_jobname() -> None:
    df = parse("p04_pbench_fio-3.19.txt")
    assert df["job_index"].nunique() == 8
    assert set(df["direction"]) == {"read", "write"}


def test_text_before_json_after_sigint() -> None:
    df = parse("p05_bensonjohnson_fio-3.33_sigint.json")
    assert df["direction"].tolist() == ["read", "write"]
    assert one(df, 0, "write")["iops"] == pytest.approx(39338.066766)


def test_group_reporting_cpu_uses_job_runtime() -> None:
    r = one(parse("p06_brahiamacosta_fio-3.36_group.json"), 0, "read")
    # usr 3.502069 + sys 18.479923 percent of job_runtime 240001 ms over 392010 ios
    assert r["cpu_us_per_io"] == pytest.approx((3.502069 + 18.479923) / 100 * 240001e3 / 392010, rel=1e-6)


def test_truncated_jobname_is_restored_from_job_options() -> None:
    df = parse("p08_styliteag_fio-3.40_readwrite.json")
    assert df["jobname"].iloc[0].endswith("date:2025-07-08T18:45:45Z")
    assert pd.isna(df["slat_mean_us"].iloc[0])  # N == 0


def test_duplicate_percentile_keys_and_trailing_space_names() -> None:
    df = parse("p09_jbernsteiniv_fio-3.1_4jobs.json")
    assert df["jobname"].tolist() == ["job /dev/sdb "] * 4 + ["job /dev/sda "] * 4
    assert one(df, 0, "read")["clat_p50_us"] == pytest.approx(872.448)


def test_misspelt_cpu_keys_give_na() -> None:
    df = parse("p13_yardstick_fio-2.1.3_compact.json")
    assert df["usr_cpu"].isna().all()
    assert df["cpu_us_per_io"].isna().all()
    assert one(df, 0, "read")["clat_p50_us"] == pytest.approx(175)


def test_no_results_is_a_results_error_naming_the_file() -> None:
    with pytest.raises(ResultsError, match=r"p07_cyberhuey_error_no_json\.json: no fio results"):
        parse_fio(PUBLIC / "p07_cyberhuey_error_no_json.json")


def test_normal_3x_units_per_line() -> None:
    df = parse("p10_igluko_fio-3.25_normal_8groups.txt")
    assert len(df) == 8
    assert df["fio_version"].unique().tolist() == ["fio-3.25"]
    seq = one(df, 0, "read")  # read: IOPS=2043, BW=2043MiB/s (...)(19.0GiB/10001msec)
    assert seq["iops"] == 2043
    assert seq["bw_bytes"] == 2043 * 2**20
    assert seq["runtime_ms"] == 10001
    assert seq["clat_mean_us"] == pytest.approx(463.33)  # clat (usec): avg=463.33
    assert seq["clat_p99_9_us"] == pytest.approx(906)  # 99.90th=[  906] (usec)
    small = one(df, 4, "read")  # IOPS=11.9k, BW=46.3MiB/s
    assert small["iops"] == pytest.approx(11900)
    assert small["bw_bytes"] == pytest.approx(46.3 * 2**20)
    nsec = one(df, 5, "write")  # percentiles in nsec: 99.00th=[18816]
    assert nsec["clat_p99_us"] == pytest.approx(18.816)
    assert seq["usr_cpu"] == pytest.approx(0.22)
    assert seq["ctx"] == 20438


def test_normal_2x_old_layout() -> None:
    df = parse("p11_brucechin_fio-2.2.10_normal.txt")
    assert df["jobname"].tolist() == ["read4k-rand", "read64k-seq", "write4k-rand", "write64k-seq"]
    r = one(df, 0, "read")  # read : io=29854MB, bw=254727KB/s, iops=63647, runt=120014msec
    assert r["iops"] == 63647
    assert r["bw_bytes"] == 254727 * 1024
    assert r["io_bytes"] == 29854 * 2**20
    assert r["runtime_ms"] == 120014
    assert r["clat_p99_us"] == pytest.approx(93_000)  # 99.00th=[   93] (msec)
    seq = one(df, 1, "read")
    assert seq["lat_mean_us"] == pytest.approx(3880.43e3)  # lat (msec): avg=3880.43
    # 32 grouped jobs: CPU time is 0.19 % of 32 x 58410 ms, over 59162 issued reads
    assert seq["cpu_us_per_io"] == pytest.approx(0.19 / 100 * 32 * 58410e3 / 59162)


def test_normal_2x_mixed_rw() -> None:
    df = parse("p12_angeluswei_fio-2.14_normal_rw.txt")
    assert df["direction"].tolist() == ["read", "write"]
    assert df["jobname"].unique().tolist() == ["name=1M_seqrw"]
    w = one(df, 0, "write")  # write: io=1105.6GB, bw=321844KB/s, iops=314
    assert w["bw_bytes"] == 321844 * 1024
    assert w["slat_mean_us"] == pytest.approx(106.33)
    assert w["clat_p50_us"] == pytest.approx(174_000)


def test_every_file_is_attributed() -> None:
    sources = (PUBLIC / "SOURCES.md").read_text()
    files = sorted(p.name for p in PUBLIC.iterdir() if p.name != "SOURCES.md")
    assert len(files) == 13
    assert [name for name in files if f"| {name} |" not in sources] == []

"""Terse, normal and mixed outputs from the installed fio (3.33), checked against JSON.

``--output-format=json,normal`` and ``json,terse`` print the same run twice, so
each text form can be checked against fio's own JSON for that run.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from iobench.errors import ResultsError
from iobench.results.fioout import parse_fio, parse_fio_text
from iobench.results.fioout.frame import to_frame
from iobench.results.fioout.normal import read_normal
from iobench.results.fioout.terse import read_terse

GEN = Path(__file__).parent / "data" / "fio" / "fio-3.33"


def split_mixed(name: str) -> tuple[pd.DataFrame, str]:
    text = (GEN / name).read_text()
    return parse_fio(GEN / name), text


def test_json_normal_gives_one_set_of_rows_and_normal_agrees_with_json() -> None:
    from_json, text = split_mixed("json_normal.txt")
    assert len(from_json) == 2  # not 4: the normal copy is not added
    assert from_json["clat_mean_us"].notna().all()
    assert pd.Series(from_json["iops"]).gt(0).all()
    from_normal = to_frame(read_normal(text), "normal")
    for column, rel in [
        ("iops", 5e-3),
        ("bw_bytes", 5e-3),
        ("clat_mean_us", 1e-3),
        ("lat_mean_us", 1e-3),
        ("clat_p99_us", 1e-9),
        ("usr_cpu", 1e-3),
    ]:
        assert from_normal[column].tolist() == pytest.approx(from_json[column].tolist(), rel=rel), column
    assert from_normal["runtime_ms"].tolist() == from_json["runtime_ms"].tolist()


def test_json_terse_gives_one_set_of_rows_and_terse_agrees_with_json() -> None:
    from_json, text = split_mixed("json_terse.txt")
    assert len(from_json) == 2
    lines = [ln for ln in text.splitlines() if ln.startswith("3;")]
    from_terse = to_frame(read_terse(lines), "terse")
    assert from_terse["direction"].tolist() == ["read", "write"]
    assert from_terse["io_bytes"].tolist() == from_json["io_bytes"].tolist()
    assert from_terse["runtime_ms"].tolist() == from_json["runtime_ms"].tolist()
    # terse rounds iops to an integer and bandwidth to KiB/s
    assert from_terse["iops"].tolist() == pytest.approx(from_json["iops"].tolist(), abs=1)
    assert from_terse["bw_bytes"].tolist() == pytest.approx(from_json["bw_bytes"].tolist(), abs=1024)
    assert from_terse["clat_mean_us"].tolist() == pytest.approx(from_json["clat_mean_us"].tolist(), abs=1e-6)


def test_terse_v3_two_jobs_read_and_write() -> None:
    df = parse_fio(GEN / "terse.txt")
    assert df["job_index"].tolist() == [0, 0, 1, 1]
    assert df["direction"].tolist() == ["read", "write"] * 2
    first = (GEN / "terse.txt").read_text().splitlines()[0].split(";")
    assert df["io_bytes"].iloc[0] == int(first[5]) * 1024
    assert df["bw_bytes"].iloc[0] == int(first[6]) * 1024
    assert df["iops"].iloc[0] == float(first[7])
    assert df["clat_mean_us"].iloc[0] == pytest.approx(float(first[15]))
    # null engine: no submission latency (min = max = mean = 0) is NA
    assert df["slat_mean_us"].isna().all()
    assert df["fio_version"].unique().tolist() == ["fio-3.33"]


def test_terse_v5_has_the_wider_layout() -> None:
    df = parse_fio(GEN / "terse_v5.txt")
    fields = (GEN / "terse_v5.txt").read_text().strip().split(";")
    assert df["direction"].tolist() == ["read", "write"]
    # write block starts after 5 head fields + 47 read fields
    assert df["io_bytes"].iloc[1] == int(fields[52]) * 1024
    assert df["usr_cpu"].iloc[0] == pytest.approx(float(fields[5 + 3 * 47].rstrip("%")))


def test_short_terse_line_is_a_results_error() -> None:
    with pytest.raises(ResultsError, match=r"<text>: terse v3 line 1 has 8 fields"):
        parse_fio_text("3;fio-3.33;x;0;0;1;2;3\n")


def test_normal_per_job_and_group_reporting() -> None:
    df = parse_fio(GEN / "normal.txt")
    assert df["job_index"].tolist() == [0, 0, 1, 1]
    assert df["clat_p50_us"].notna().all()
    grouped = parse_fio(GEN / "normal_group.txt")
    assert grouped["jobname"].tolist() == ["ngrp", "nw"]
    assert grouped["direction"].tolist() == ["read", "write"]
    text = (GEN / "normal_group.txt").read_text()
    assert "(groupid=0, jobs=2)" in text
    # jobs=2 doubles the CPU-accounting time of the group's longest runtime
    r = grouped.iloc[0]
    ios = int(text.split("issued rwts: total=")[1].split(",")[0])
    expected = (r["usr_cpu"] + r["sys_cpu"]) / 100 * 2 * r["runtime_ms"] * 1000 / ios
    assert r["cpu_us_per_io"] == pytest.approx(expected)

"""parse_fio's fast paths give the frame the general paths give.

Files are read as bytes and, when they are one JSON document (fio's
``--output`` file), decoded by msgspec straight into the typed records
(:mod:`iobench.results.fioout.jsondoc`), or by orjson where the records refuse a
value; anything else falls back to the text readers. The reference here is the
slow path: the file read as text and decoded with the stdlib (msgspec and orjson
switched off), first occurrence of a key winning.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobench.errors import ResultsError
from iobench.results.fioout import FRAME_COLUMNS, detect, parse_fio, reading
from iobench.results.fioout.frame import to_frame
from iobench.results.fioout.jobstats import DirStats, JobStats
from iobench.results.fioout.parse import item_origin
from iobench.results.fioout.reading import regular_file_bytes

GEN = Path(__file__).parent / "data" / "fio" / "fio-3.33"
READ = (GEN / "read.json").read_text()


def outcome(path: Path) -> pd.DataFrame | str:
    try:
        return parse_fio(path)
    except ResultsError as exc:
        return str(exc)


def slow_outcome(path: Path, monkeypatch: pytest.MonkeyPatch) -> pd.DataFrame | str:
    with monkeypatch.context() as patch:
        patch.setattr(reading, "decode_document", lambda data: None)
        patch.setattr(detect, "_orjson_document", lambda data: None)
        return outcome(path)


def assert_same(fast: pd.DataFrame | str, slow: pd.DataFrame | str) -> None:
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
    else:
        pd.testing.assert_frame_equal(fast, slow, check_exact=True)


def fio2(doc: dict[str, Any]) -> dict[str, Any]:
    """A fio 3.x document as fio 2.x wrote it: µs latencies, KiB, no bw_bytes."""
    for job in doc["jobs"]:
        for ddir in ("read", "write", "trim"):
            section = job[ddir]
            section["io_bytes"] = section.pop("io_kbytes")
            del section["bw_bytes"]
            for name in ("lat", "clat", "slat"):
                lat = section.pop(f"{name}_ns")
                for key in ("min", "max", "mean", "stddev"):
                    lat[key] = lat[key] / 1000
                lat.pop("N")
                section[name] = lat
        del job["job_runtime"]
    return doc


def with_bad_utf8(text: str) -> bytes:
    return text.replace('"jobname" : "rread"', '"jobname" : "r\udcffread"').encode(errors="surrogateescape")


# name -> (file content, whether the orjson whole-document path takes it)
VARIANTS: dict[str, tuple[bytes, bool]] = {
    "as fio wrote it": (READ.encode(), True),
    "keys sorted, no whitespace": (
        json.dumps(json.loads(READ), sort_keys=True, separators=(",", ":")).encode(),
        True,
    ),
    "CRLF line ends": (READ.replace("\n", "\r\n").encode(), True),
    "leading blank lines": (b"\n \t\n" + READ.encode(), True),
    "fio 2.x layout": (json.dumps(fio2(json.loads(READ))).encode(), True),
    "text after the JSON": ((READ + "fio: terminating on signal 2\n").encode(), False),
    "integer beyond 64 bits": (
        READ.replace('"iops" : 4477514.851485', f'"iops" : {2**70 + 1}').encode(),
        True,
    ),
    "invalid UTF-8 in a name": (with_bad_utf8(READ), False),
    "byte order mark": (b"\xef\xbb\xbf" + READ.encode(), False),
    "truncated": (READ.encode()[: len(READ) // 2], False),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_fast_path_and_fallbacks_match_the_stdlib_path(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    content, fast = VARIANTS[name]
    path = tmp_path / "fio.json"
    path.write_bytes(content)
    assert (detect.whole_json(content) is not None) is fast
    assert_same(outcome(path), slow_outcome(path, monkeypatch))


@pytest.mark.parametrize("path", sorted(GEN.glob("*.json")), ids=lambda p: p.name)
def test_every_fixture_matches_the_stdlib_path(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # json+ bins, client/server (falls back), text before the JSON (falls back), ...
    assert_same(outcome(path), slow_outcome(path, monkeypatch))


def test_invalid_utf8_is_replaced_as_before(tmp_path: Path) -> None:
    path = tmp_path / "fio.json"
    path.write_bytes(with_bad_utf8(READ))
    assert parse_fio(path)["jobname"].tolist() == ["r\ufffdread"]


def test_duplicate_percentile_keys_last_number_wins() -> None:
    doc = json.loads(READ)
    percentiles = doc["jobs"][0]["read"]["clat_ns"]["percentile"]
    percentiles.update({"99.9": 2000, "90.0": "n/a"})  # same percentiles as "99.900000", "90.000000"
    df = parse_fio("mem", text=json.dumps(doc))
    assert df["clat_p99_9_us"].iloc[0] == 2.0
    assert df["clat_p90_us"].iloc[0] == percentiles["90.000000"] / 1000


def test_counts_beyond_2_53_round_through_float_as_before() -> None:
    doc = json.loads(READ)
    doc["jobs"][0]["read"]["io_bytes"] = 2**53 + 1
    doc["jobs"][0]["ctx"] = 2**53
    r = parse_fio("mem", text=json.dumps(doc)).iloc[0]
    assert r["io_bytes"] == int(float(2**53 + 1))
    assert r["ctx"] == 2**53


def test_row_values_land_in_their_columns() -> None:
    ddir = DirStats(
        1.0,
        2.0,
        3,
        4,
        5,
        6.0,
        7.0,
        8.0,
        {50.0: 9.0, 90.0: 10.0, 99.0: 11.0, 99.9: 12.0},
        "19:1",
        "20:2",
        "21:3",
    )
    job = JobStats("j", 13, "h", 14, 15.0, 16.0, 17, 18, None, "fio-x", {"write": ddir}, 22)
    row = to_frame([job], "src").iloc[0]
    expected = {
        "source": "src",
        "jobname": "j",
        "job_index": 13,
        "groupid": 22,
        "host": "h",
        "direction": "write",
        "iops": 1.0,
        "bw_bytes": 2.0,
        "io_bytes": 3,
        "runtime_ms": 4,
        "lat_mean_us": 6.0,
        "clat_mean_us": 7.0,
        "slat_mean_us": 8.0,
        "clat_p50_us": 9.0,
        "clat_p90_us": 10.0,
        "clat_p99_us": 11.0,
        "clat_p99_9_us": 12.0,
        "usr_cpu": 15.0,
        "sys_cpu": 16.0,
        "ctx": 17,
        "error": 14,
        "fio_version": "fio-x",
        "cpu_us_per_io": (15.0 + 16.0) / 100 * 18 * 1000 / 5,
        "inflight": 1.0 * 6.0 / 1e6,
        "total_ios": 5,
        "job_runtime_ms": 18,
        "clat_bins": "19:1",
        "lat_bins": "20:2",
        "slat_bins": "21:3",
    }
    assert list(expected) == list(FRAME_COLUMNS)
    assert row.to_dict() == expected


def test_values_pyarrow_declines_are_converted_by_pandas() -> None:
    # A float column holding an int beyond 64 bits, a string column holding an int.
    job = JobStats(123, 0, directions={"read": DirStats(iops=2**70, io_bytes=1)})  # type: ignore[arg-type]
    r = to_frame([job], "src").iloc[0]
    assert r["iops"] == float(2**70)
    assert r["jobname"] == "123"


@pytest.mark.skipif(sys.platform != "linux", reason="FIFOs and /proc")
def test_special_files_are_reported_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fio.json"
    os.mkfifo(fifo)  # must not block waiting for a writer
    with pytest.raises(ResultsError, match=r"fio\.json: is not a file"):
        parse_fio(fifo)
    with pytest.raises(ResultsError, match="is not a file"):
        parse_fio(tmp_path)
    # procfs files report size 0: the reader reads to the end, not to st_size
    assert regular_file_bytes("/proc/version") == Path("/proc/version").read_bytes()


@given(st.lists(st.sampled_from(["a", "/", ".", "..", "b.json", " "]), max_size=8))
def test_origin_is_the_name_path_gives(parts: list[str]) -> None:
    name = "".join(parts)
    assert item_origin(name) == str(Path(name))
    assert item_origin(Path(name)) == str(Path(name))


def test_more_processes_than_files_and_no_files() -> None:
    one = GEN / "read.json"
    pd.testing.assert_frame_equal(parse_fio([one], processes=4), parse_fio(one))
    assert parse_fio([], processes=2).empty

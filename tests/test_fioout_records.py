"""fio's JSON as typed records: msgspec's decoding and the general conversion agree.

:func:`~iobench.results.fioout.jsondoc.decode_document` (bytes straight into the
records) and :func:`~iobench.results.fioout.jsondoc.to_document` (any decoded
object, leaf rules in Python) must make the same records of every document the
first accepts; a document it refuses must still parse, through the general path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iobench.errors import ResultsError
from iobench.results.fioout import detect, parse_fio, reading
from iobench.results.fioout.jsondoc import FioDoc, decode_document, to_document

DATA = Path(__file__).parent / "data"
GEN = DATA / "fio" / "fio-3.33"
FIXTURES = sorted(GEN.iterdir()) + sorted((DATA / "fio-outputs" / "public").iterdir())
READ = (GEN / "read.json").read_bytes()


def fast_and_text(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[pd.DataFrame | str, pd.DataFrame | str]:
    """parse_fio(path) as it runs, and with the file read as text by the stdlib only."""

    def run() -> pd.DataFrame | str:
        try:
            return parse_fio(path)
        except ResultsError as exc:
            return str(exc)

    fast = run()
    with monkeypatch.context() as patch:
        patch.setattr(reading, "decode_document", lambda data: None)
        patch.setattr(detect, "_orjson_document", lambda data: None)
        text = run()
    return fast, text


def assert_same(a: pd.DataFrame | str, b: pd.DataFrame | str) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
    else:
        pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_every_fixture_gives_the_same_frame_fast_and_as_text(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, text = fast_and_text(path, monkeypatch)
    assert_same(fast, text)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_decoded_records_equal_the_converted_ones(path: Path) -> None:
    data = path.read_bytes()
    doc = decode_document(data)
    if doc is None:
        return  # not one local JSON document: the general path's business (checked above)
    assert doc == to_document(json.loads(data))


def test_the_fast_decoder_takes_fio_output_files_of_every_generation() -> None:
    # fio 3.33 json and json+, fio 2.1.4 and 2.17, fio 3.36 group reporting, 3.1 with 4 jobs
    taken = [p.name for p in FIXTURES if decode_document(p.read_bytes()) is not None]
    assert {
        "read.json",
        "jsonplus.json",
        "p01_pkb_fio-2.1.4_sample.json",
        "p02_pkb_fio-2.17_hist.json",
        "p06_brahiamacosta_fio-3.36_group.json",
        "p09_jbernsteiniv_fio-3.1_4jobs.json",
    } <= set(taken)
    # client/server output (fio repeats option keys there; the first wins) and text around the JSON are not
    assert "client.json" not in taken and "json_normal.txt" not in taken


def edit(change: Any) -> bytes:
    doc = json.loads(READ)
    change(doc)
    return json.dumps(doc).encode()


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def change(doc: Any) -> None:
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value

    return change


READ_DIR = ("jobs", 0, "read")
# Values outside the records' types: each document is refused and parsed the general way.
REFUSED = {
    "string for a float": _set((*READ_DIR, "iops"), "n/a"),
    "bool for a float": _set((*READ_DIR, "bw_bytes"), True),
    "float for an int": _set((*READ_DIR, "io_bytes"), 4096.0),
    "int beyond 2**53": _set((*READ_DIR, "total_ios"), 2**53 + 1),
    "string for an int": _set(("jobs", 0, "ctx"), "12"),
    "number for a direction": _set(("jobs", 0, "write"), 5),
    "string percentile": _set((*READ_DIR, "clat_ns", "percentile", "99.000000"), "x"),
    "number for a jobname": _set(("jobs", 0, "jobname"), 7),
    "null jobname": _set(("jobs", 0, "jobname"), None),
    "list for the latency": _set((*READ_DIR, "clat_ns"), [1, 2]),
    "number for a job": _set(("jobs",), [1, json.loads(READ)["jobs"][0]]),
    "number for the version": _set(("fio version",), 3.33),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_value_the_records_refuse_falls_back_and_still_parses(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    content = edit(REFUSED[name])
    assert decode_document(content) is None
    path = tmp_path / "fio.json"
    path.write_bytes(content)
    fast, text = fast_and_text(path, monkeypatch)
    assert isinstance(fast, pd.DataFrame) and len(fast) >= 1
    assert_same(fast, text)


def test_refused_values_follow_the_leaf_rules() -> None:
    doc = to_document(json.loads(edit(_set((*READ_DIR, "io_bytes"), 4096.9))))
    assert doc.jobs[0].read is not None and doc.jobs[0].read.io_bytes == 4096  # truncated
    doc = to_document(json.loads(edit(_set((*READ_DIR, "iops"), True))))
    assert doc.jobs[0].read is not None and doc.jobs[0].read.iops is None  # a bool is no number
    doc = to_document(json.loads(edit(_set(("jobs", 0, "jobname"), None))))
    assert doc.jobs[0].jobname == "None"  # str() of whatever is there, as before
    doc = to_document({"jobs": "nope", "fio version": None})
    assert doc == FioDoc(None, [], None)


def test_client_server_and_documents_without_jobs_are_left_to_the_general_path() -> None:
    assert decode_document((GEN / "client.json").read_bytes()) is None
    assert decode_document(b'{"fio version": "fio-3.33"}') is None
    assert decode_document(b"[1, 2]") is None
    assert decode_document(READ[:-40]) is None
    assert decode_document(READ.replace(b'"rread"', b'"r\xffread"')) is None  # invalid UTF-8 in a name


LEAVES = [
    ("jobs", 0, "read", "iops"),
    ("jobs", 0, "read", "io_bytes"),
    ("jobs", 0, "read", "io_kbytes"),
    ("jobs", 0, "read", "runtime"),
    ("jobs", 0, "read", "clat_ns", "N"),
    ("jobs", 0, "read", "clat_ns", "mean"),
    ("jobs", 0, "read", "clat_ns", "percentile", "50.000000"),
    ("jobs", 0, "read", "lat_ns"),
    ("jobs", 0, "usr_cpu"),
    ("jobs", 0, "error"),
    ("jobs", 0, "jobname"),
    ("jobs", 0, "job options", "name"),
    ("fio version",),
]
JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["N", "mean", "min"]), st.integers(0, 3), max_size=2),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(leaf=st.sampled_from(LEAVES), value=JSON_VALUES)
def test_any_value_anywhere_gives_the_same_records_both_ways(leaf: tuple[Any, ...], value: Any) -> None:
    content = edit(_set(leaf, value))
    doc = decode_document(content)
    if doc is not None:  # accepted: the same records as the general conversion
        assert doc == to_document(json.loads(content))

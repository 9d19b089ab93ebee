"""parse_fio over many files in several processes gives the same frame as in one."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from iobench.errors import ResultsError
from iobench.results.fioout import parse_fio

FIXTURES = sorted((Path(__file__).parent / "data" / "fio" / "fio-3.33").glob("*.json"))


def test_parallel_parse_equals_serial_and_keeps_order() -> None:
    paths = FIXTURES * 3
    serial = parse_fio(paths, processes=1)
    parallel = parse_fio(paths, processes=2)
    pd.testing.assert_frame_equal(parallel, serial, check_exact=True)
    assert list(dict.fromkeys(parallel["source"])) == list(dict.fromkeys(str(p) for p in paths))


def test_an_error_in_a_worker_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "notfio.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(ResultsError, match="notfio.json: no fio results"):
        parse_fio([*FIXTURES, bad], processes=2)

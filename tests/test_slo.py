"""Searching the highest load that meets a latency target: the section, the search, a real run."""

from __future__ import annotations

import re
from typing import Any

import pytest

from iobench.errors import MatrixError
from iobench.matrix.model import parse_matrix
from iobench.matrix.slospec import LATENCY_METRICS
from iobench.results import schema

BASE = """
version: 1
name: t
targets: [{path: /tmp/iobench-slo-t.dat, size: 1M}]
fio: {ioengine: null, rw: randread}
"""


def matrix(text: str) -> Any:
    return parse_matrix(BASE + text, "t.yaml")


def problems(text: str) -> list[str]:
    with pytest.raises(MatrixError) as caught:
        matrix(text)
    return list(caught.value.issues)


def test_every_metric_a_target_may_name_is_a_latency_column_of_the_frame() -> None:
    for name in LATENCY_METRICS:
        assert schema.BY_NAME[name].unit == "µs", name


@pytest.mark.fio
def test_an_slo_section_is_read_with_its_defaults() -> None:
    m = matrix("slo: {metric: clat_p99_us, limit: 5ms}\nmatrix: {bs: [4k, 8k]}\n")
    assert m.slo is not None
    assert (m.slo.metric, m.slo.limit_us, m.slo.load, m.slo.resolution) == (
        "clat_p99_us",
        5000.0,
        "rate_iops",
        0.02,
    )
    assert (m.slo.min_load, m.slo.max_load, m.slo.max_probes) == (100, 1_000_000, 16)
    closed = matrix("slo: {metric: lat_mean_us, limit: 500us, load: iodepth, resolution: 5%, max_load: 64}\n")
    assert closed.slo is not None
    assert (closed.slo.load, closed.slo.limit_us, closed.slo.resolution, closed.slo.min_load) == (
        "iodepth",
        500.0,
        0.05,
        1,
    )


@pytest.mark.fio
def test_every_bad_slo_field_is_reported_at_once_with_its_line() -> None:
    found = problems(
        "slo:\n  metric: iops\n  limit: '5'\n  resolution: 90%\n  min_load: 1000\n  max_load: 10\n"
    )
    text = "\n".join(found)
    assert re.search(r"t\.yaml:\d+:\d+: slo\.metric: `iops` is not a latency column .*clat_p99_us", text)
    assert re.search(r"t\.yaml:\d+:\d+: slo\.limit: limit '5' has no unit .*`5ms`", text)
    assert "slo.resolution" in text and "slo.max_load: max_load 10 is not above min_load 1000" in text
    assert len(found) == 4


@pytest.mark.fio
def test_a_close_metric_name_is_suggested_and_unknown_keys_refused() -> None:
    assert "did you mean `clat_p99_9_us`?" in "\n".join(problems("slo: {metric: clat_p999_us, limit: 1ms}\n"))
    text = "\n".join(problems("slo: {metric: clat_p99_us, limit: 1ms, target: 3}\n"))
    assert "slo.target: unknown key (hint: allowed keys: limit, load, max_load" in text


@pytest.mark.fio
@pytest.mark.parametrize(
    ("extra", "place"),
    [
        ("matrix: {rate_iops: [100, 200]}\n", "matrix.rate_iops"),
        ("matrix: {bs: [4k], include: [{bs: 4k, rate_iops: 5}]}\n", "matrix.include[0].rate_iops"),
    ],
)
def test_the_load_set_elsewhere_is_refused_naming_both_places(extra: str, place: str) -> None:
    text = "\n".join(problems("slo: {metric: clat_p99_us, limit: 1ms}\n" + extra))
    assert re.search(
        rf"t\.yaml:\d+:\d+: slo\.load: `rate_iops` is the load the search sets, but {re.escape(place)} \(t\.yaml:\d+:\d+\)",
        text,
    )


@pytest.mark.fio
def test_a_closed_loop_depth_fixed_under_fio_is_refused() -> None:
    text = BASE.replace("rw: randread}", "rw: randread, iodepth: 4}")
    with pytest.raises(MatrixError) as caught:
        parse_matrix(text + "slo: {metric: clat_p99_us, limit: 1ms, load: iodepth}\n", "t.yaml")
    wanted = "slo.load: `iodepth` is the load the search sets, but fio.iodepth"
    assert any(wanted in p for p in caught.value.issues)

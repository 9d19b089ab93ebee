"""Canonical values: one grammar per kind, typed once when the matrix is loaded."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobench.errors import MatrixError
from iobench.matrix.fiocatalog import FioOption, fio_catalog
from iobench.matrix.model import parse_matrix
from iobench.matrix.units import format_size
from iobench.matrix.values import Duration, axis_value, fio_text, option_value, parse_binding

BS = FioOption("bs", "int", minimum=1)
RUNTIME = FioOption("runtime", "time")
LATENCY_TARGET = FioOption("latency_target", "time")
DIRECT = FioOption("direct", "bool")
RW = FioOption("rw", "choice", choices=("read", "randread", "write", "randwrite", "rw", "randrw"))
NUMJOBS = FioOption("numjobs", "int", minimum=0)
SIZE = FioOption("size", "string")


@pytest.mark.parametrize("raw", ["4k", "4K", "4KiB", "4kb", 4096, "4096", "0x1000", " 4k "])
def test_one_size_grammar(raw: str | int) -> None:
    assert option_value(BS, raw) == 4096


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [("4k,8k", "4096,8192"), ("4k-16k", "4096-16384"), ("50%", "50%"), ("1k:2k", "1024:2048")],
)
def test_lists_and_ranges_are_written_in_bytes(raw: str, canonical: str) -> None:
    assert option_value(BS, raw) == canonical


def test_size_like_strings_use_the_size_grammar() -> None:
    assert option_value(SIZE, "1G") == 1 << 30
    assert option_value(SIZE, "25%") == "25%"
    with pytest.raises(ValueError, match="size takes a number"):
        option_value(SIZE, "big")


@pytest.mark.parametrize("raw", ["lots", "4x", "-4k", True, 4.5, "1.5"])
def test_bad_sizes_say_what_is_allowed(raw: str | float) -> None:
    with pytest.raises(ValueError, match="bs"):
        option_value(BS, raw)


def test_integers_have_their_allowed_range() -> None:
    assert option_value(NUMJOBS, "0x2") == 2
    with pytest.raises(ValueError, match=r"numjobs must be at least 1; got 0 \(allowed: 1..4096\)"):
        option_value(NUMJOBS, 0)
    with pytest.raises(ValueError, match="numjobs must be at most 4096"):
        option_value(NUMJOBS, "8k")


def test_durations_carry_the_options_default_unit() -> None:
    assert option_value(RUNTIME, 60) == option_value(RUNTIME, "1m") == Duration(60)
    assert fio_text(option_value(RUNTIME, "1m")) == "60s"
    # fio reads a bare latency_target as microseconds: the unit is written out.
    target = option_value(LATENCY_TARGET, 500)
    assert target == pytest.approx(0.0005) and fio_text(target) == "500us"
    assert option_value(LATENCY_TARGET, "500us") == target


def test_booleans_and_choices() -> None:
    assert [option_value(DIRECT, v) for v in (True, "on", "yes", 1, "0", False)] == [1, 1, 1, 1, 0, 0]
    assert option_value(RW, "RandRead") == "randread"
    assert option_value(RW, "randrw:8") == "randrw:8"
    with pytest.raises(ValueError, match="rw must be one of"):
        option_value(RW, "random")


@pytest.mark.parametrize(
    ("raw", "canonical"), [("Local", "local"), (" none", "none"), ("node:00", "node:0"), ("NODE:3", "node:3")]
)
def test_one_binding_grammar(raw: str, canonical: str) -> None:
    assert parse_binding(raw) == canonical == axis_value("binding", raw)


@pytest.mark.parametrize("raw", ["", "nodes:1", "node:", "node:-1", "node:x", "near", "node 1"])
def test_bad_bindings_name_the_forms(raw: str) -> None:
    with pytest.raises(ValueError, match="none, local, remote or node:N"):
        parse_binding(raw)


def test_iobench_axes() -> None:
    assert axis_value("placement", "Same-Core") == "same-core"
    assert axis_value("scheduler", "MQ-Deadline") == "mq-deadline"
    assert axis_value("readahead_kb", "128") == 128
    for name, raw in (("placement", "same-socket"), ("launch", "all"), ("readahead_kb", -8)):
        with pytest.raises(ValueError, match=name):
            axis_value(name, raw)


@given(st.integers(min_value=1, max_value=1 << 50))
def test_sizes_round_trip_through_fio_notation(size: int) -> None:
    assert option_value(BS, format_size(size)) == size


# --- in a matrix ---------------------------------------------------------------

BASE = """\
version: 1
name: t
targets: [{path: /tmp/iobench-values-test, size: 1M}]
fio: {ioengine: null, rw: randread}
"""


@pytest.mark.fio
def test_equal_values_after_canonicalization_collide() -> None:
    with pytest.raises(MatrixError) as caught:
        parse_matrix(BASE + "matrix:\n  bs: [4k, 4096]\n  binding: [Local, local]\n", "t.yaml")
    text = str(caught.value)
    assert "matrix.bs[1]: duplicate value 4096: '4k' and 4096 are both 4096" in text
    assert "matrix.binding[1]: duplicate value 'local'" in text


@pytest.mark.fio
def test_canonical_values_reach_every_later_module() -> None:
    m = parse_matrix(
        BASE + "matrix:\n  numjobs: ['0x2']\n  binding: [Local]\n  runtime: [1m]\n"
        "  exclude: [{binding: LOCAL, runtime: 60}]\n  include: [{binding: NONE, numjobs: 1}]\n",
        "t.yaml",
    )
    # The exclude matched through canonical values, so only the include is left.
    assert m.combos == ({"binding": "none", "numjobs": 1},)


@pytest.mark.fio
def test_size_is_counted_from_axis_lengths_not_expanded() -> None:
    axes = "\n".join(f"  {name}: [{', '.join(str(i) for i in range(1, 41))}]" for name in _TWELVE)
    with pytest.raises(MatrixError, match=r"= 16,777,216,000,000,000,000 points × 3 repeats"):
        parse_matrix(BASE + "repeat: 3\nmatrix:\n" + axes + "\n", "t.yaml")


_TWELVE = (
    "iodepth",
    "numjobs",
    "rwmixread",
    "openfiles",
    "rate_iops",
    "thinktime",
    "thinktime_blocks",
    "log_avg_msec",
    "iodepth_batch_submit",
    "iodepth_low",
    "buffer_compress_percentage",
    "rate",
)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.fio
def test_a_matrix_of_billions_is_refused_in_little_memory(tmp_path: Path) -> None:
    axes = "\n".join(f"  {name}: [{', '.join(str(i) for i in range(1, 41))}]" for name in _TWELVE)
    path = tmp_path / "huge.yaml"
    path.write_text(BASE + "matrix:\n" + axes + "\n")
    fio_catalog()  # the option catalog is cached, as a user's second run has it
    done = subprocess.run(
        [sys.executable, "-m", "iobench", "plan", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit_memory,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "the limit is 10,000" in done.stderr and "iodepth (40) × numjobs (40)" in done.stderr


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("matrix:\n  bs: " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
        ("description: '" + "x" * (1 << 20) + "'\n", "a matrix is at most"),
    ],
    ids=["deep", "huge"],
)
def test_hostile_yaml_is_refused(body: str, message: str) -> None:
    with pytest.raises(MatrixError, match=message):
        parse_matrix(textwrap.dedent(BASE) + body, "t.yaml")


def test_negative_integers_where_fio_allows_them() -> None:
    nice = FioOption("nice", "int", minimum=-20, maximum=19)
    assert option_value(nice, -5) == option_value(nice, "-5") == -5
    with pytest.raises(ValueError, match="nice must be at least -20"):
        option_value(nice, "-21")

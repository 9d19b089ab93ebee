"""fio's size and time notation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobench.matrix.units import format_size, parse_seconds, parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4096", 4096),
        ("4k", 4096),
        ("4K", 4096),
        ("4KiB", 4096),
        ("4kb", 4096),
        ("1M", 2**20),
        ("1.5m", 3 * 2**19),
        ("2g", 2 * 2**30),
        ("1t", 2**40),
        (512, 512),
    ],
)
def test_sizes_read_like_fio(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "k", "4x", "-1", "1.3", "four", True])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="size|bytes|negative"):
        parse_size(text)


@given(st.integers(0, 2**50))
def test_format_size_round_trips(size: int) -> None:
    assert parse_size(format_size(size)) == size


@pytest.mark.parametrize(
    ("text", "seconds"), [("60", 60), (30, 30), ("500ms", 0.5), ("2m", 120), ("1h", 3600)]
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_seconds(text) == pytest.approx(seconds)


def test_bad_duration() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_seconds("soon")

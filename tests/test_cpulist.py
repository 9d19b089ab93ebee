"""CPU lists and hex masks as sysfs writes them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iobench.errors import TopologyError
from iobench.system.cpulist import format_cpulist, parse_cpulist, parse_cpumask

cpu_sets = st.sets(st.integers(min_value=0, max_value=4095), max_size=64)


@given(cpu_sets)
def test_format_then_parse_round_trips(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == tuple(sorted(cpus))


@given(cpu_sets)
def test_format_is_canonical(cpus: set[int]) -> None:
    text = format_cpulist(cpus)
    assert format_cpulist(parse_cpulist(text)) == text
    # Canonical means maximal ranges: no "0-1,2" or "3,4".
    parts = [p.split("-") for p in text.split(",")] if text else []
    bounds = [(int(p[0]), int(p[-1])) for p in parts]
    assert all(b[0] > a[1] + 1 for a, b in zip(bounds, bounds[1:], strict=False))


def _mask(cpus: set[int], words: int) -> str:
    value = sum(1 << cpu for cpu in cpus)
    return ",".join(f"{(value >> (32 * i)) & 0xFFFFFFFF:08x}" for i in reversed(range(words)))


@given(st.sets(st.integers(min_value=0, max_value=255), max_size=64))
def test_mask_parses_to_the_bits_set(cpus: set[int]) -> None:
    assert parse_cpumask(_mask(cpus, 8)) == tuple(sorted(cpus))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)),
        ("0-3,8,10-11\n", (0, 1, 2, 3, 8, 10, 11)),
        (" 5 , 1-2 ", (1, 2, 5)),
        ("3,1,3,2-3", (1, 2, 3)),
        ("0\x00\n", (0,)),
        ("\x00", ()),
        ("", ()),
        ("\n", ()),
        ("7-7", (7,)),
    ],
)
def test_parse_cpulist(text: str, expected: tuple[int, ...]) -> None:
    assert parse_cpulist(text) == expected


@pytest.mark.parametrize("text", ["0-", "-1", "3-1", "a", "1,,2", "0x1", "1-2-3", "1;2"])
def test_parse_cpulist_rejects_garbage(text: str) -> None:
    with pytest.raises(TopologyError, match="invalid CPU list"):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("cpus", "expected"),
    [((0, 1, 2, 3, 8), "0-3,8"), ((), ""), ((5,), "5"), ((1, 3, 5), "1,3,5"), ([9, 8], "8-9")],
)
def test_format_cpulist(cpus: tuple[int, ...], expected: str) -> None:
    assert format_cpulist(cpus) == expected


def test_format_cpulist_rejects_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        format_cpulist([-1, 0])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00000000,0000ff00", tuple(range(8, 16))),
        ("00000001,00000101", (0, 8, 32)),
        ("ff", tuple(range(8))),
        ("0x000000ff,0xffffffff", tuple(range(40))),  # hwloc XML writes 0x on every word
        ("00000000,00001111\n\x00", (0, 4, 8, 12)),
        ("0", ()),
        ("", ()),
    ],
)
def test_parse_cpumask(text: str, expected: tuple[int, ...]) -> None:
    assert parse_cpumask(text) == expected


@pytest.mark.parametrize("text", ["zz", "123456789", "ff,,ff", "0-3"])
def test_parse_cpumask_rejects_garbage(text: str) -> None:
    with pytest.raises(TopologyError, match="invalid CPU mask"):
        parse_cpumask(text)

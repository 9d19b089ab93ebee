"""Expansion is pure: product order, exclude, include (GitHub Actions rules)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from iobench.matrix.expand import expand, matrix_size

axes_strategy = st.dictionaries(
    st.sampled_from(["bs", "iodepth", "numjobs", "rw"]),
    st.lists(st.integers(0, 50), min_size=1, max_size=4, unique=True),
    max_size=4,
)


@given(axes_strategy)
def test_product_covers_every_combination_once_last_axis_fastest(axes: dict[str, list[int]]) -> None:
    combos = expand(axes)
    assert len(combos) == matrix_size(axes)
    assert (
        [tuple(c.values()) for c in combos] == list(itertools.product(*axes.values()))
        if axes
        else combos == []
    )


@given(axes_strategy, st.data())
def test_exclude_drops_exactly_the_matching_combinations(
    axes: dict[str, list[int]], data: st.DataObject
) -> None:
    if not axes:
        return
    name = data.draw(st.sampled_from(sorted(axes)))
    value = data.draw(st.sampled_from(axes[name]))
    combos = expand(axes, exclude=[{name: value}])
    assert all(c[name] != value for c in combos)
    assert len(combos) == matrix_size(axes) - matrix_size(axes) // len(axes[name])


def test_include_adds_keys_to_matching_combinations_and_new_ones_otherwise() -> None:
    axes = {"fruit": ["apple", "pear"], "animal": ["cat", "dog"]}
    include = [
        {"color": "green"},
        {"color": "pink", "animal": "cat"},
        {"fruit": "apple", "shape": "circle"},
        {"fruit": "banana"},
        {"fruit": "banana", "animal": "cat"},
    ]
    # The example of GitHub's documentation for jobs.<job_id>.strategy.matrix.include.
    assert expand(axes, include) == [
        {"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"},
        {"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"},
        {"fruit": "pear", "animal": "cat", "color": "pink"},
        {"fruit": "pear", "animal": "dog", "color": "green"},
        {"fruit": "banana"},
        {"fruit": "banana", "animal": "cat"},
    ]


def test_include_alone_makes_points() -> None:
    assert expand({}, [{"iodepth": 1}, {"iodepth": 4}]) == [{"iodepth": 1}, {"iodepth": 4}]

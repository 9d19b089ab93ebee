"""A count in words: one noun for one, its plural for every other count."""

from __future__ import annotations

from iobench.errors import NextStep
from iobench.words import counted, plural


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert [counted(n, "run") for n in (0, 1, 2, 1234)] == ["0 runs", "1 run", "2 runs", "1,234 runs"]
    assert (
        counted(1, "repeat could not be judged", "repeats could not be judged")
        == "1 repeat could not be judged"
    )
    assert (
        counted(3, "repeat could not be judged", "repeats could not be judged")
        == "3 repeats could not be judged"
    )
    assert (plural(1, "point-run"), plural(2, "point-run")) == ("point-run", "point-runs")


def test_a_step_says_one_point_left_in_the_singular() -> None:
    assert NextStep("resume", run_dir="r", left=1).words() == "resume r (1 point left)"
    assert NextStep("resume", run_dir="r", left=2).words() == "resume r (2 points left)"

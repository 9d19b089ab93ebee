"""compare's verdicts across many tests: false discoveries controlled, what the repeats could detect.

The A/A test runs two synthetic runs of one 16-point matrix (3 repeats, 4
metrics, the same true numbers) through :func:`iobench.compare` many times and
counts how often every verdict is ``no change``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

import iobench
from iobench.errors import ResultsError
from iobench.results.compare import RESULT_COLUMNS
from iobench.results.discoveries import CORRECTIONS, adjust, detectable

#: How often (at least) an A/A comparison must say "no change" everywhere.
AA_RATE = 0.95


def test_holm_adjusts_as_its_step_down_rule_says() -> None:
    p = [0.01, 0.04, 0.03, 0.005, math.nan]
    # sorted: 0.005, 0.01, 0.03, 0.04 (m = 4) -> ×4, ×3, ×2, ×1, then running maximum
    assert adjust(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02, math.nan], nan_ok=True)
    assert adjust([0.5, 0.9], "holm").tolist() == [1.0, 1.0]  # 2 × 0.5, then never below the step before


def test_benjamini_hochberg_is_scipys() -> None:
    p = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216])
    assert adjust(p, "bh") == pytest.approx(stats.false_discovery_control(p, method="bh"))
    assert adjust([0.2, math.nan], "bh")[1] != adjust([0.2, math.nan], "bh")[1]  # NaN stays NaN


def test_no_correction_leaves_p_as_it_is() -> None:
    assert adjust([0.01, 0.2], "none").tolist() == [0.01, 0.2]
    with pytest.raises(ResultsError, match="correction 'sidak' is not one of holm, bh, none"):
        adjust([0.1], "sidak")


#: How often (at least) Welch's test must find a change of the size ``detectable`` states.
FOUND_RATE = 0.75


def found_rate(
    rng: np.random.Generator, n_a: int, n_b: int, cv: tuple[float, float], ratio: float, alpha: float
) -> float:
    """How often scipy's Welch test, at ``alpha``, finds B at ``ratio`` × A's mean (each side keeping its CV)."""
    trials = 1500
    a = 100.0 * (1 + cv[0] * rng.standard_normal((trials, n_a)))
    b = 100.0 * ratio * (1 + cv[1] * rng.standard_normal((trials, n_b)))
    p = stats.ttest_ind(b, a, axis=1, equal_var=False).pvalue
    return float(np.mean(p < alpha))


@pytest.mark.parametrize("alpha", [0.05, 0.05 / 48])
def test_a_change_of_the_stated_size_is_found_at_least_three_times_in_four(alpha: float) -> None:
    """2–10 repeats a side (and unequal counts), spreads alike and not, at one test's level and after Holm over 48."""
    rng = np.random.default_rng(20261128)
    cases = [(n, n, (0.05, 0.05)) for n in range(2, 11)] + [(3, 5, (0.02, 0.08)), (4, 10, (0.1, 0.03))]
    checked = 0
    for n_a, n_b, cv in cases:
        down, up = detectable([n_a], [n_b], [cv[0]], [cv[1]], alpha=alpha)
        for ratio in (float(down[0]), float(up[0])):
            if 0 < ratio < math.inf:
                rate = found_rate(rng, n_a, n_b, cv, ratio, alpha)
                assert rate >= FOUND_RATE, (n_a, n_b, cv, ratio, rate)
                checked += 1
    assert checked >= len(cases)  # most cases state a size (the rest: no change of any size is found)


def test_what_the_textbook_formula_states_is_found_far_less_often() -> None:
    """3 repeats a side, Holm over 48 tests: the usual size formula's change has a third of its power."""
    alpha, n, cv = 0.05 / 48, 3, 0.02
    dof = 2 * n - 2
    textbook = (stats.t.ppf(1 - alpha / 2, dof) + stats.t.ppf(0.8, dof)) * math.sqrt(2 * cv**2 / n)
    rng = np.random.default_rng(5)
    assert found_rate(rng, n, n, (cv, cv), 1 + textbook, alpha) < 0.6
    down, up = detectable([n], [n], [cv], [cv], alpha=alpha)
    assert (
        float(up[0]) > 1 + 1.3 * textbook
        and found_rate(rng, n, n, (cv, cv), float(up[0]), alpha) >= FOUND_RATE
    )


def test_the_detectable_change_is_a_drop_and_a_rise_not_one_symmetric_share() -> None:
    down, up = (float(v[0]) for v in detectable([3], [3], [0.05], [0.05], alpha=0.05))
    assert 0 < down < 1 < up
    assert not math.isclose(1 - down, up - 1, rel_tol=0.01)  # a rise widens B's spread: it must be larger
    assert up - 1 > 1 - down
    nan = detectable([3, 1], [1, 3], [0.05, 0.05], [0.05, 0.05], alpha=0.05)
    assert np.isnan(nan[0]).all() and np.isnan(nan[1]).all()
    assert [v.tolist() for v in detectable([2], [2], [0.0], [0.0], alpha=0.05)] == [[1.0], [1.0]]
    # two repeats a side with a 5 % spread, one test among 48: no change of any size is found 80 % of the time
    assert [v.tolist() for v in detectable([2], [2], [0.05], [0.05], alpha=0.05 / 48)] == [[0.0], [math.inf]]
    fewer = detectable([3, 5, 10], [3, 5, 10], [0.05] * 3, [0.05] * 3, alpha=0.05)
    assert list(fewer[0]) == sorted(fewer[0]) and list(fewer[1]) == sorted(fewer[1], reverse=True)


def synthetic(
    rng: np.random.Generator, means: np.ndarray, *, cv: float = 0.02, repeats: int = 3
) -> pd.DataFrame:
    """A run of 16 points × ``repeats``: IOPS around ``means``, bandwidth and latency following it."""
    rows = []
    for point, mean in enumerate(means, 1):
        for repeat in range(1, repeats + 1):
            iops = mean * (1 + cv * rng.standard_normal())
            lat = 32e6 / iops * (1 + 0.005 * rng.standard_normal())  # Little's law at depth 32
            rows.append(
                {
                    "run_id": "r",
                    "point": point,
                    "repeat": repeat,
                    "host": "h",
                    "jobname": "j",
                    "job_index": 0,
                    "direction": "read",
                    "status": "ok",
                    "iodepth": 2 ** (point % 4),
                    "numjobs": 1 + (point - 1) // 4,
                    "iops": iops,
                    "bw_bytes": iops * 4096,
                    "lat_mean_us": lat,
                    "clat_p99_us": lat * 3 * (1 + 0.04 * rng.standard_normal()),
                }
            )
    return pd.DataFrame(rows)


def aa_rate(correction: str, runs: int, seed: int = 20261126) -> float:
    rng = np.random.default_rng(seed)
    means = rng.uniform(20_000, 400_000, 16)
    clean = 0
    for _ in range(runs):
        result = iobench.compare(synthetic(rng, means), synthetic(rng, means), correction=correction)
        clean += bool(result["verdict"].eq("no change").all())
    return clean / runs


@pytest.mark.slow
@pytest.mark.parametrize(("correction", "runs"), [("holm", 200), ("bh", 100)])
def test_an_aa_comparison_says_no_change_everywhere_at_least_95_percent_of_the_time(
    correction: str, runs: int
) -> None:
    rate = aa_rate(correction, runs=runs)
    print(
        f"A/A, 16 points x 4 metrics x 3 repeats, {correction}: no change everywhere in {rate:.1%} of {runs}"
    )
    assert rate >= AA_RATE


@pytest.mark.slow
def test_without_a_correction_an_aa_comparison_finds_changes_that_are_not_there() -> None:
    rate = aa_rate("none", runs=50)
    print(f"A/A, 16 points x 4 metrics x 3 repeats, no correction: no change everywhere in {rate:.1%} of 50")
    assert rate < AA_RATE


def test_a_lone_significant_test_among_many_is_no_change_after_correction() -> None:
    """The reported case: one point -4.8 %, p about 0.02, among 16 tests."""
    rng = np.random.default_rng(3)
    means = np.full(16, 100_000.0)
    a = synthetic(rng, means, cv=0.0)
    b = synthetic(rng, means, cv=0.0)
    for frame, values in ((a, [100_000, 101_500, 98_500]), (b, [95_200, 96_700, 93_700])):
        frame.loc[frame["point"].eq(5), "iops"] = values
    alone = iobench.compare(a, b, metrics=["iops"], correction="none")
    row = alone[alone["a_point"].eq(5)].iloc[0]
    assert row["verdict"] == "worse" and 0.01 < row["p_value"] < 0.05
    result = iobench.compare(a, b, metrics=["iops"])
    five = result[result["a_point"].eq(5)].iloc[0]
    assert five["verdict"] == "no change"
    assert five["p_adjusted"] == pytest.approx(min(1.0, 16 * float(five["p_value"])))
    assert "not significant after Holm's correction over 16 tests" in five["reason"]
    assert result.attrs["correction"] == "holm" and result.attrs["tests"] == 16


def test_iops_and_bandwidth_at_a_fixed_block_size_are_one_test() -> None:
    rng = np.random.default_rng(4)
    means = rng.uniform(20_000, 400_000, 16)
    a, b = synthetic(rng, means), synthetic(rng, means)
    result = iobench.compare(a, b, metrics=["iops", "bw_bytes"])
    assert result.attrs["tests"] == 16
    by_metric = result.pivot(index="a_point", columns="metric", values="p_adjusted")
    assert by_metric["iops"].tolist() == by_metric["bw_bytes"].tolist()
    mixed = b.assign(bw_bytes=b["bw_bytes"] * rng.uniform(0.9, 1.1, len(b)))  # bssplit: bytes per I/O vary
    assert iobench.compare(a, mixed, metrics=["iops", "bw_bytes"]).attrs["tests"] == 32


def test_each_point_says_what_its_repeats_could_detect_and_when_that_is_too_little() -> None:
    rng = np.random.default_rng(7)
    means = rng.uniform(20_000, 400_000, 16)
    result = iobench.compare(synthetic(rng, means), synthetic(rng, means), metrics=["iops"])
    assert {"p_adjusted", "detectable_down", "detectable_up"} <= set(RESULT_COLUMNS) and list(
        result.columns[-len(RESULT_COLUMNS) :]
    ) == list(RESULT_COLUMNS)
    assert result["detectable_down"].notna().all() and result["detectable_up"].notna().all()
    # 3 repeats with a 2 % spread cannot show a 1 % change among 16 tests
    assert (result["detectable_up"] > 1.01).all() and (result["detectable_down"] < 1 / 1.01).all()
    assert (
        result["reason"]
        .str.contains(
            r"too few repeats for the minimum effect: 3 and 3 repeats could detect (?:×0\.\d\d|no drop) or (?:×\d+\.\d\d|no rise)"
        )
        .all()
    )
    tight = iobench.compare(
        synthetic(rng, means, cv=0.0002), synthetic(rng, means, cv=0.0002), metrics=["iops"]
    )
    assert (tight["detectable_up"] < 1.01).all() and (tight["detectable_down"] > 1 / 1.01).all()
    assert not tight["reason"].str.contains("too few repeats").any()


def test_the_terminal_states_the_correction(tmp_path: object) -> None:
    from rich.console import Console

    from iobench.cli.compare_view import show_comparison

    rng = np.random.default_rng(11)
    means = rng.uniform(20_000, 400_000, 16)
    result = iobench.compare(synthetic(rng, means), synthetic(rng, means), correction="bh")
    console = Console(record=True, width=250)
    show_comparison(console, result)
    text = console.export_text()
    # 16 points × 4 metrics, IOPS and bandwidth one test at a fixed bs: 48 tests
    assert "Benjamini–Hochberg over 48 tests" in text
    assert "detectable" in text


def test_the_cli_takes_a_correction() -> None:
    from iobench.cli.commands import app

    done = CliRunner().invoke(app, ["compare", "a", "b", "--correction", "sidak"])
    assert done.exit_code == 2
    assert "holm" in done.output and "Traceback" not in done.output


def test_corrections_are_the_documented_three() -> None:
    assert CORRECTIONS == ("holm", "bh", "none")

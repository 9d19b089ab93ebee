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
from iobench.results.compare import RESULT_COLUMNS, Repeats
from iobench.results.discoveries import CORRECTIONS, adjust, detectable_change

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


def test_the_smallest_detectable_change_follows_welchs_test_and_power() -> None:
    a, b = Repeats.of([100.0, 102.0, 98.0]), Repeats.of([100.0, 101.0, 99.0])
    va, vb = a.std**2 / 3, b.std**2 / 3
    dof = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    alpha = 0.05 / 16
    expected = (stats.t.ppf(1 - alpha / 2, dof) + stats.t.ppf(0.8, dof)) * math.sqrt(va + vb) / 100.0
    assert detectable_change(a, b, alpha=alpha) == pytest.approx(expected)
    assert detectable_change(a, Repeats.of([100.0]), alpha=0.05) != detectable_change(a, a, alpha=0.05)
    assert math.isnan(detectable_change(a, Repeats.of([100.0]), alpha=0.05))
    assert detectable_change(Repeats.of([5.0, 5.0]), Repeats.of([5.0, 5.0]), alpha=0.05) == 0.0


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


def test_each_point_says_what_its_repeats_could_detect_and_when_that_is_too_little() -> None:
    rng = np.random.default_rng(7)
    means = rng.uniform(20_000, 400_000, 16)
    result = iobench.compare(synthetic(rng, means), synthetic(rng, means), metrics=["iops"])
    assert {"p_adjusted", "detectable"} <= set(RESULT_COLUMNS) and list(
        result.columns[-len(RESULT_COLUMNS) :]
    ) == list(RESULT_COLUMNS)
    assert result["detectable"].notna().all()
    # 3 repeats with a 2 % spread cannot show a 1 % change among 16 tests
    assert (result["detectable"] > 0.01).all()
    assert (
        result["reason"]
        .str.contains(r"too few repeats for the minimum effect: 3 and 3 repeats could detect ±")
        .all()
    )
    tight = iobench.compare(
        synthetic(rng, means, cv=0.0005), synthetic(rng, means, cv=0.0005), metrics=["iops"]
    )
    assert (tight["detectable"] < 0.01).all()
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
    assert "Benjamini–Hochberg over 64 tests" in text
    assert "detectable" in text


def test_the_cli_takes_a_correction() -> None:
    from iobench.cli.commands import app

    done = CliRunner().invoke(app, ["compare", "a", "b", "--correction", "sidak"])
    assert done.exit_code == 2
    assert "holm" in done.output and "Traceback" not in done.output


def test_corrections_are_the_documented_three() -> None:
    assert CORRECTIONS == ("holm", "bh", "none")

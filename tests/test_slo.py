"""Searching the highest load that meets a latency target: the section, the search, a real run."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import iobench
from iobench.answers.slo import Z95, Answer, Probe, interval, search, sentence
from iobench.cli.commands import app
from iobench.errors import MatrixError
from iobench.matrix.model import load_matrix, parse_matrix
from iobench.matrix.slospec import LATENCY_METRICS, SloSpec
from iobench.plots.loadcurve import doubled, knee
from iobench.results import schema
from iobench.results.validity import fell_behind
from iobench.runner.probes import probe_combo

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


# --- the search, against a simulated device -------------------------------------------------------


def spec(**changes: Any) -> SloSpec:
    base = SloSpec("clat_p99_us", 5000.0, "5ms", "rate_iops", 0.02, 16, 100, 1_000_000)
    return dataclasses.replace(base, **changes)


def device(capacity: float, base_us: float = 100.0, width: float = 0.0) -> Callable[[int], Probe]:
    """A queue: p99 grows as base / (1 − load/capacity); at or past capacity it falls behind."""

    def probe(load: int) -> Probe:
        if load >= capacity:
            return Probe(load, 1e9, 1e9, 1e9, behind=True)
        value = base_us / (1 - load / capacity)
        return Probe(load, value, value * (1 - width), value * (1 + width))

    return probe


def exhaustive(check: Callable[[int], Probe], s: SloSpec) -> int:
    """Every load of a geometric grid at the search's resolution, the highest that passes."""
    best, load = 0, float(s.min_load)
    while load <= s.max_load:
        if check(round(load)).verdict(s.limit_us) == "pass":
            best = round(load)
        load *= 1 + s.resolution
    return best


@pytest.mark.parametrize("capacity", [350.0, 2_000.0, 20_000.0, 123_456.0, 700_000.0])
def test_the_search_lands_within_one_step_of_the_exhaustive_sweep_in_at_most_12_probes(
    capacity: float,
) -> None:
    s = spec()
    check = device(capacity)
    answer = search(check, s)
    truth = exhaustive(check, s)
    assert answer.status == "found"
    assert answer.max_load is not None and abs(answer.max_load - truth) <= s.resolution * truth + 1
    assert len(answer.probes) <= 12
    assert answer.ci_low == answer.max_load and answer.ci_high is not None
    assert answer.max_load < answer.ci_high <= answer.max_load * (1 + s.resolution) + 1


def test_loads_are_whole_multiples_of_the_jobs_sharing_them() -> None:
    seen: list[int] = []
    check = device(20_000.0)

    def probe(load: int) -> Probe:
        seen.append(load)
        return check(load)

    answer = search(probe, spec(min_load=90), step=6)
    assert seen[0] == 90 and all(load % 6 == 0 for load in seen)
    assert answer.max_load is not None and answer.max_load % 6 == 0


def test_a_straddling_probe_is_measured_again_then_decided_by_its_median() -> None:
    calls: dict[int, int] = {}

    def probe(load: int) -> Probe:
        calls[load] = calls.get(load, 0) + 1
        if load >= 1000:  # 5,200 µs ± 10 %: straddles 5 ms at every repeat
            return Probe(load, 5200.0, 4680.0, 5720.0)
        return Probe(load, 100.0, 90.0, 110.0)

    answer = search(probe, spec(max_load=1000))
    assert calls[100] == 1 and calls[1000] == 3 and all(n == 1 for load, n in calls.items() if load < 1000)
    # The median (5,200 µs) fails 1,000; no probe there was a sure fail, so the interval stays open above.
    assert answer.status == "found" and answer.max_load == 981 and answer.ci_high is None


def test_a_limit_the_idle_device_misses_is_below_min_and_no_knee_is_above_max() -> None:
    low = search(device(20_000.0, base_us=6000.0), spec())
    assert (low.status, low.max_load, len(low.probes)) == ("below-min", None, 1)
    assert low.probes[0].value == pytest.approx(6000.0 / (1 - 100 / 20_000))
    assert "not met at the lowest load 100 IOPS (6,030 µs)" in sentence(spec(), low)
    high = search(device(1e9), spec(max_load=50_000))
    assert (high.status, high.max_load, [p.load for p in high.probes]) == (
        "above-max",
        50_000,
        [100, 1000, 10_000, 50_000],
    )


def test_running_out_of_probes_is_unstable_with_the_best_load_so_far() -> None:
    answer = search(device(20_000.0), spec(max_probes=6))
    assert answer.status == "unstable" and len(answer.probes) == 6
    assert answer.max_load is not None and 10_000 <= answer.max_load < 19_600


def test_the_answer_reads_as_one_sentence() -> None:
    answer = Answer("found", 1720, 1680, 1760, tuple(Probe(n, 1.0) for n in range(7)))
    assert sentence(spec(), answer) == "clat_p99_us ≤ 5ms up to 1,720 IOPS (95 % CI 1,680–1,760), 7 probes"


def test_a_probe_behind_its_offered_load_for_two_seconds_fell_behind() -> None:
    # 10,000 offered: a Poisson count strays by 100 (1 sd); short is below 9,900 − 300.
    assert fell_behind(10_000.0, [10_000, 9_500, 10_000, 9_500, 10_000]) is None
    assert fell_behind(10_000.0, [10_000, 9_599, 9_000, 10_000]) == 1
    assert fell_behind(10_000.0, [9_601.0, 9_601.0]) is None
    # 20 offered: 20 ± 4.5 by chance alone, so only a count far below is short.
    assert fell_behind(20.0, [15.0, 14.0, 16.0]) is None
    assert fell_behind(20.0, [20.0, 5.0, 5.0]) == 1
    # Half-second windows hold half the count: the allowance in IOPS grows by √2.
    assert fell_behind(10_000.0, [9_500.0, 9_500.0], window_s=0.5) is None


def test_a_percentile_interval_comes_from_the_merged_bins_order_statistics() -> None:
    # 1,000 I/Os, 985 at 100 µs and 15 at 2,000 µs over two jobs' bins: ranks 990 ± 6.2 span both bins.
    cells = pd.Series(["100000:492,2000000:8", "100000:493,2000000:7"])
    assert interval(cells, "clat_p99_us") == (100.0, 2000.0)
    cells = pd.Series(["100000:4900,2000000:100", "100000:4900,2000000:100"])
    assert interval(cells, "clat_p99_us") == (2000.0, 2000.0)
    low, high = interval(cells, "clat_mean_us") or (0.0, 0.0)
    assert low < 138.0 < high and high - low == pytest.approx(2 * Z95 * 1900 * (0.02 * 0.98) ** 0.5 / 100)


# --- a real search, fio's null engine ---------------------------------------------------------------


@pytest.mark.fio
def test_a_real_search_runs_each_probe_as_a_saved_point_and_resumes_by_replaying(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_matrix(
        f"""
        version: 1
        name: slotest
        targets: [{{path: {tmp_path / "t.dat"}, size: 1M}}]
        fio: {{ioengine: "null", rw: randread, numjobs: 2, runtime: 1, time_based: 1}}
        slo: {{metric: clat_p99_us, limit: 10ms, min_load: 100, max_load: 10000}}
        """
    )
    m = load_matrix(path)
    result = iobench.run(m, out=tmp_path / "results")
    assert result.exit_code == 0 and result.counts == {"ok": 3}
    points = result.run_dir / "points"
    assert sorted(p.name for p in points.iterdir()) == ["0001-r1", "0002-r1", "0003-r1"]
    jobfile = (points / "0002-r1" / "job.fio").read_text()
    # 1,000 IOPS offered in all, split over the two jobs; Poisson arrivals.
    assert "rate_iops=500\n" in jobfile and "rate_process=poisson\n" in jobfile
    answers = iobench.slo(result.run_dir)
    assert list(answers.columns) == [
        "metric",
        "limit",
        "limit_us",
        "load",
        "max_load",
        "ci_low",
        "ci_high",
        "probes",
        "status",
        "sentence",
    ]
    row = answers.iloc[0]
    assert (row["status"], row["max_load"], row["probes"], row["limit"]) == ("above-max", 10_000, 3, "10ms")
    frame = iobench.load(result.run_dir)
    assert sorted(frame["rate_iops"].dropna().unique().tolist()) == [50, 500, 5000]
    figure = iobench.plots.draw("latency-load", result.run_dir)
    left, right = figure.axes[:2]
    assert left.get_yscale() == "log" and left.get_xlabel() == "offered IOPS"
    assert any(list(line.get_ydata()) == [10_000.0, 10_000.0] for line in left.get_lines())  # the limit
    p99 = next(line for line in left.get_lines() if line.get_label().endswith("p99"))
    assert list(p99.get_xdata()) == [100.0, 1000.0, 10_000.0]
    again = iobench.run(m, out=tmp_path / "results", resume=result.run_dir)
    assert again.counts == {"ok": 3}
    assert iobench.slo(again.run_dir).drop(columns="sentence").equals(answers.drop(columns="sentence"))


@pytest.mark.fio
def test_iobench_run_ends_with_the_answer(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    path = write_matrix(
        f"""
        version: 1
        name: slocli
        targets: [{{path: {tmp_path / "t.dat"}, size: 1M}}]
        fio: {{ioengine: "null", rw: randread, runtime: 1, time_based: 1}}
        matrix: {{bs: [4k]}}
        slo: {{metric: clat_p99_us, limit: 5ms, min_load: 100, max_load: 1000}}
        """
    )
    out = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    assert "slo: bs=4096: clat_p99_us ≤ 5ms up to 1,000 IOPS" in out.output
    assert "2 probes (met at max_load" in out.output


@pytest.mark.fio
@pytest.mark.parametrize("runtime", [4, 1], ids=["by-windows", "whole-point"])
def test_a_probe_that_cannot_keep_up_with_its_offered_load_is_behind(
    write_matrix: Callable[..., Path], tmp_path: Path, runtime: int
) -> None:
    # 10 ms of think time after every I/O: one job completes at most 100 IOPS, whatever it is offered.
    path = write_matrix(
        f"""
        version: 1
        name: slobehind
        targets: [{{path: {tmp_path / "t.dat"}, size: 1M}}]
        fio: {{ioengine: "null", rw: randread, thinktime: 10000, runtime: {runtime}, time_based: 1}}
        slo: {{metric: clat_p99_us, limit: 1s, min_load: 20, max_load: 500, max_probes: 3}}
        """
    )
    result = iobench.run(load_matrix(path), out=tmp_path / "results")
    frame = iobench.load(result.run_dir)
    verdicts = frame.groupby("rate_iops")["validity"].first().to_dict()
    assert "behind" not in str(verdicts[20]) and "behind" in str(verdicts[200])
    figure = iobench.plots.draw("latency-load", result.run_dir)
    hollow = [c for c in figure.axes[0].collections if len(c.get_offsets()) and not c.get_facecolors().size]
    assert [list(c.get_offsets()[:, 0]) for c in hollow] == [[200.0]] * 3  # p50, p99, p99.9 at 200 offered
    answer = iobench.slo(result.run_dir).iloc[0]
    assert answer["max_load"] < 200 and answer["ci_high"] == 200 and answer["probes"] == 3


def test_the_knee_of_a_queue_and_the_load_that_doubles_its_unloaded_p99() -> None:
    loads = np.array([100.0, 1000.0, 5000.0, 10_000.0, 15_000.0, 18_000.0, 19_000.0])
    p99 = 100.0 / (1 - loads / 20_000.0)
    found = knee(loads, p99)
    assert found is not None and 10_000 <= found <= 18_000
    assert doubled(loads, p99) == 15_000.0  # 200 µs at 10,000 is just short of 2 × 100.5
    assert knee(loads[:2], p99[:2]) is None and doubled(loads[:2], p99[:2]) is None


@pytest.mark.fio
def test_the_offered_total_is_split_over_the_jobs_and_a_rate_process_given_is_kept() -> None:
    m = matrix("slo: {metric: clat_p99_us, limit: 1ms}\nmatrix: {numjobs: [3]}\n")
    combo = probe_combo(m, {"numjobs": 3}, 900, 3)
    assert (combo["rate_iops"], combo["rate_process"]) == (300, "poisson")
    linear = parse_matrix(
        BASE.replace("rw: randread}", "rw: randread, rate_process: linear}")
        + "slo: {metric: clat_p99_us, limit: 1ms}\n",
        "t.yaml",
    )
    assert "rate_process" not in probe_combo(linear, {}, 100, 1)
    closed = matrix("slo: {metric: clat_p99_us, limit: 1ms, load: iodepth}\n")
    assert probe_combo(closed, {}, 16, 4) == {"iodepth": 16}

"""The figures, checked through what is drawn: lines, labels, bars, cells, error bars."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm, to_hex
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure
from test_plots import ci, frame, lines, texts

from iobench.errors import ResultsError
from iobench.plots import (
    busiest_threads,
    cpu_per_io,
    cpu_where,
    device_vs_fio,
    heatmap,
    latency_percentiles,
    local_vs_remote,
    plot,
    smt,
    sweep,
)
from iobench.plots.plotstyle import metric_text

NUMA_SHARE = {"local": 1.0, "remote": 0.75, "none": 0.9, "node:3": 0.6}


def numa_iops(p: dict[str, Any]) -> float:
    return 10_000.0 * p["iodepth"] * NUMA_SHARE[p["binding"]]


def numa_lat(p: dict[str, Any]) -> float:
    return 100.0 * p["iodepth"] / NUMA_SHARE[p["binding"]]


def numa(**axes: list[Any]) -> Any:
    return frame(iops=numa_iops, lat=numa_lat, repeats=3, **axes)


def whiskers(container: ErrorbarContainer) -> list[float]:
    """The full length of each vertical error bar."""
    return [float(seg[1][1] - seg[0][1]) for seg in container.lines[2][0].get_segments()]


def labels(ax: Axes) -> list[str]:
    return [str(line.get_label()) for line in lines(ax)]


# local vs remote


def test_local_vs_remote_draws_throughput_and_latency_per_binding() -> None:
    fig = local_vs_remote(numa(iodepth=[1, 4, 16], binding=["none", "remote", "local"]))
    top, bottom = fig.axes
    assert labels(top) == labels(bottom) == ["local", "remote", "none"]
    assert [to_hex(line.get_color()) for line in lines(top)] == ["#1f77b4", "#d62728", "#7f7f7f"]
    assert list(lines(top)[0].get_xdata()) == [1, 4, 16]
    assert list(lines(top)[1].get_ydata()) == pytest.approx([7500.0, 30_000.0, 120_000.0])
    assert list(lines(bottom)[0].get_ydata()) == pytest.approx([100.0, 400.0, 1600.0])
    assert top.get_ylabel() == "IOPS" and bottom.get_ylabel() == "Mean latency (µs)"
    assert bottom.get_xlabel() == "I/O depth" and top.get_xscale() == "log"
    assert fig.get_suptitle() == "NUMA binding: IOPS and mean latency vs I/O depth"


def test_local_vs_remote_error_bars_are_the_95_percent_ci_over_repeats() -> None:
    fig = local_vs_remote(numa(iodepth=[1, 4], binding=["local", "remote"]))
    top = fig.axes[0]
    bars = [c for c in top.containers if isinstance(c, ErrorbarContainer)]
    assert whiskers(bars[0]) == pytest.approx([2 * ci(10_000.0), 2 * ci(40_000.0)])
    assert whiskers(bars[1]) == pytest.approx([2 * ci(7500.0), 2 * ci(30_000.0)])
    assert any("mean of 3 repeats, bars: 95 % CI" in t for t in texts(fig))


def test_local_vs_remote_without_repeats_has_no_error_bars() -> None:
    df = frame(iops=numa_iops, lat=numa_lat, iodepth=[1, 4], binding=["local", "remote"])
    fig = local_vs_remote(df)
    assert not any(ax.containers for ax in fig.axes)
    assert any("1 run per point" in t for t in texts(fig))


def test_local_vs_remote_leaves_failed_points_out() -> None:
    df = numa(iodepth=[1, 4], binding=["local", "remote"])
    df.loc[df["point"] == 3, "status"] = "failed"
    top = local_vs_remote(df).axes[0]
    assert labels(top) == ["local", "remote"]
    assert list(lines(top)[0].get_xdata()) == [1]
    assert list(lines(top)[1].get_xdata()) == [1, 4]


def test_local_vs_remote_splits_other_axes_into_panels_then_line_styles() -> None:
    df = numa(iodepth=[1, 4], bs=[4096, 65536], numjobs=[1, 2], binding=["local", "node:3"])
    fig = local_vs_remote(df)
    assert len(fig.axes) == 4
    assert [ax.get_title() for ax in fig.axes[:2]] == ["bs=4k", "bs=64k"]
    top = fig.axes[0]
    assert labels(top) == [
        "local · numjobs=1",
        "local · numjobs=2",
        "node:3 · numjobs=1",
        "node:3 · numjobs=2",
    ]
    assert [line.get_linestyle() for line in lines(top)] == ["-", "--", "-", "--"]
    assert to_hex(lines(top)[2].get_color()) == "#2ca02c"


def test_local_vs_remote_into_an_axes_draws_the_asked_metric_only() -> None:
    fig = Figure()
    ax = fig.add_subplot()
    out = local_vs_remote(numa(iodepth=[1, 4], binding=["local", "remote"]), ax=ax, y="clat_p99_us")
    assert out is fig and len(fig.axes) == 1
    assert ax.get_ylabel() == "p99 completion latency (µs)"
    assert list(lines(ax)[0].get_ydata()) == pytest.approx([350.0, 1400.0])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["local", "remote"]


def test_local_vs_remote_in_bandwidth_uses_mib_per_second() -> None:
    df = numa(iodepth=[1], binding=["local", "remote"], bs=[1 << 20])
    top = local_vs_remote(df, y="bw_bytes").axes[0]
    assert top.get_ylabel() == "Throughput (MiB/s)"
    assert [float(line.get_ydata()[0]) for line in lines(top)] == pytest.approx([10_000.0, 7500.0])


# SMT


def smt_frame() -> Any:
    def iops(p: dict[str, Any]) -> float:
        return 100_000.0 * (p["numjobs"] if p["placement"] == "diff-cores" else 1 + p["numjobs"] / 4)

    return frame(iops=iops, repeats=3, numjobs=[1, 2, 4], placement=["diff-cores", "same-core"])


def test_smt_draws_same_core_against_different_cores_over_jobs() -> None:
    fig = smt(smt_frame())
    top, bottom = fig.axes
    assert labels(top) == [
        "same core (all jobs on one core's threads)",
        "different cores (one job per core)",
    ]
    assert list(lines(top)[0].get_xdata()) == [1, 2, 4]
    assert list(lines(top)[0].get_ydata()) == pytest.approx([125_000.0, 150_000.0, 200_000.0])
    assert list(lines(top)[1].get_ydata()) == pytest.approx([100_000.0, 200_000.0, 400_000.0])
    assert bottom.get_xlabel() == "Jobs" and top.get_xscale() == "log"
    assert [to_hex(line.get_color()) for line in lines(top)] == ["#ff7f0e", "#2ca02c"]


def test_smt_needs_same_core_or_diff_cores_points() -> None:
    with pytest.raises(ResultsError, match=r"no same-core or diff-cores points \(placements found: node\)"):
        smt(frame(numjobs=[1, 2], placement=["node"]))


# heatmap


def test_heatmap_cells_hold_the_mean_over_repeats() -> None:
    df = frame(
        iops=lambda p: 1000.0 * p["iodepth"] * p["numjobs"], repeats=3, iodepth=[1, 4, 16], numjobs=[1, 2]
    )
    fig = heatmap(df)
    ax = fig.axes[0]
    [image] = ax.images
    assert np.asarray(image.get_array()) == pytest.approx(
        np.array([[1000.0, 4000.0, 16_000.0], [2000.0, 8000.0, 32_000.0]])
    )
    means = ["1k", "4k", "16k", "2k", "8k", "32k"]
    spreads = [metric_text("iops", ci(v)) for v in (1000.0, 4000.0, 16_000.0, 2000.0, 8000.0, 32_000.0)]
    assert spreads[:2] == ["248", "994"]
    assert [t.get_text() for t in ax.texts] == [f"{m}\n± {s}" for m, s in zip(means, spreads, strict=True)]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4", "16"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2"]
    assert ax.get_xlabel() == "I/O depth" and ax.get_ylabel() == "Jobs"
    colorbar = fig.axes[1]
    assert colorbar.get_ylabel() == "IOPS"
    assert fig.get_suptitle() == "IOPS by I/O depth and jobs"


def test_heatmap_marks_a_combination_without_data() -> None:
    df = frame(iodepth=[1, 4], numjobs=[1, 2], failed={(4, 1)})
    ax = heatmap(df, "lat_mean_us").axes[0]
    assert np.ma.is_masked(ax.images[0].get_array()[1, 1])
    assert [t.get_text() for t in ax.texts] == ["1", "4", "1", "—"]


def test_heatmap_gives_other_axes_a_panel_on_a_shared_scale() -> None:
    df = frame(iodepth=[1, 4], numjobs=[1, 2], binding=["local", "remote"])
    fig = heatmap(df)
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["binding=local", "binding=remote"]
    assert panels[0].images[0].norm is panels[1].images[0].norm
    assert len(fig.axes) == 3


def test_heatmap_into_an_axes_refuses_to_average_other_axes() -> None:
    fig = Figure()
    df = frame(iodepth=[1, 4], numjobs=[1, 2], bs=[4096, 65536])
    with pytest.raises(ResultsError, match="bs also varies"):
        heatmap(df, ax=fig.add_subplot())


# latency percentiles


def test_latency_percentiles_draw_a_curve_per_point_on_a_nines_axis() -> None:
    df = frame(iodepth=[1, 8], repeats=3)
    fig = latency_percentiles(df)
    [ax] = fig.axes
    assert labels(ax) == ["iodepth=1", "iodepth=8"]
    assert list(lines(ax)[1].get_xdata()) == [50.0, 90.0, 99.0, 99.9]
    assert list(lines(ax)[1].get_ydata()) == pytest.approx([6.4, 12.8, 28.0, 56.0])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["p50", "p90", "p99", "p99.9"]
    assert ax.get_yscale() == "log" and ax.get_ylabel() == "Completion latency (µs)"
    _, x90, x99, x999 = ax.transData.transform([(p, 1) for p in (50.0, 90.0, 99.0, 99.9)])[:, 0]
    assert x999 - x99 == pytest.approx(x99 - x90)


def test_latency_percentiles_panel_per_binding_lines_per_iodepth() -> None:
    fig = latency_percentiles(numa(iodepth=[1, 4, 16], binding=["local", "remote"]))
    assert [ax.get_title() for ax in fig.axes] == ["binding=local", "binding=remote"]
    assert labels(fig.axes[1]) == ["iodepth=1", "iodepth=4", "iodepth=16"]
    assert fig.axes[0].get_ylim() == fig.axes[1].get_ylim()


def test_latency_percentiles_need_percentile_columns() -> None:
    df = frame(iodepth=[1]).drop(columns=["clat_p50_us", "clat_p90_us", "clat_p99_us", "clat_p99_9_us"])
    with pytest.raises(ResultsError, match="no clat_p"):
        latency_percentiles(df)


# CPU per I/O


def test_cpu_per_io_bars_per_scheduler_with_ci_whiskers() -> None:
    cost = {"none": 2.0, "mq-deadline": 3.5}
    df = frame(cpu=lambda p: cost[p["scheduler"]], repeats=3, scheduler=["mq-deadline", "none"])
    fig = cpu_per_io(df)
    [ax] = fig.axes
    [bars] = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [p.get_height() for p in bars.patches] == pytest.approx([2.0, 3.5])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["none", "mq-deadline"]
    assert whiskers(bars.errorbar) == pytest.approx([2 * ci(2.0), 2 * ci(3.5)])
    assert ax.get_ylabel() == "CPU per I/O (µs)" and ax.get_xlabel() == "I/O scheduler"
    assert [t.get_text() for t in ax.texts] == ["2", "3.5"]
    assert fig.get_suptitle() == "CPU per I/O by I/O scheduler"


def test_cpu_per_io_groups_bars_by_a_second_parameter() -> None:
    df = frame(cpu=lambda p: 9.0 if p["direct"] else 120.0 + p["numjobs"], direct=[0, 1], numjobs=[1, 4])
    fig = cpu_per_io(df)
    [ax] = fig.axes
    groups = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [str(g.get_label()) for g in groups] == ["numjobs=1", "numjobs=4"]
    assert [p.get_height() for p in groups[1].patches] == pytest.approx([124.0, 9.0])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["buffered", "O_DIRECT"]
    assert not any(g.errorbar for g in groups)


def test_cpu_per_io_panels_for_a_third_axis_and_explicit_by() -> None:
    df = frame(readahead_kb=[0, 128], bs=[4096, 131072], numjobs=[1, 2])
    fig = cpu_per_io(df, "readahead_kb", hue="numjobs")
    assert [ax.get_title() for ax in fig.axes] == ["bs=4k", "bs=128k"]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["0 KiB", "128 KiB"]


def test_cpu_per_io_without_a_varying_setting_asks_for_x() -> None:
    with pytest.raises(ResultsError, match="nothing varies.*pass x="):
        cpu_per_io(frame(iodepth=[4]))


# Drawing into a given Axes, and what each figure needs


def test_smt_into_an_axes_draws_the_throughput_lines() -> None:
    ax = Figure().add_subplot()
    assert smt(smt_frame(), ax=ax) is ax.figure
    assert labels(ax) == ["same core (all jobs on one core's threads)", "different cores (one job per core)"]
    assert ax.get_ylabel() == "IOPS" and ax.get_legend().get_title().get_text() == "CPU placement"


def test_heatmap_into_an_axes_draws_the_cells_and_a_colour_bar() -> None:
    fig = Figure()
    ax = fig.add_subplot()
    heatmap(frame(iodepth=[1, 4], numjobs=[1, 2], bs=[1 << 20]), "bw_bytes", ax=ax)
    assert [t.get_text() for t in ax.texts] == ["1,000", "4,000", "1,000", "4,000"]
    assert fig.axes[1].get_ylabel() == "Throughput (MiB/s)"


def test_heatmap_panels_far_apart_share_one_logarithmic_colour_scale() -> None:
    df = frame(
        iops=lambda p: 1000.0 * p["iodepth"] * p["bs"] / 4096,
        iodepth=[1, 4],
        numjobs=[1, 2],
        bs=[4096, 1 << 20],
    )
    fig = heatmap(df)
    panels = [ax for ax in fig.axes if ax.images]
    assert panels[0].images[0].norm is panels[1].images[0].norm
    assert isinstance(panels[0].images[0].norm, LogNorm)
    assert panels[0].images[0].norm.vmin == 1000.0 and panels[0].images[0].norm.vmax == 1_024_000.0
    assert len(fig.axes) == 3  # two panels, one colour bar


def test_heatmap_needs_a_metric_the_points_have() -> None:
    with pytest.raises(ResultsError, match=r"heatmap: y 'queue' is no column of these points; y takes iops"):
        heatmap(frame(iodepth=[1, 4], numjobs=[1, 2]), "queue")


def test_latency_percentiles_into_an_axes_turn_panels_into_curves() -> None:
    ax = Figure().add_subplot()
    latency_percentiles(numa(iodepth=[1, 4], binding=["local", "remote"]), ax=ax)
    assert labels(ax) == [
        "local · iodepth=1",
        "local · iodepth=4",
        "remote · iodepth=1",
        "remote · iodepth=4",
    ]


def test_latency_percentiles_of_one_direction() -> None:
    df = frame(iodepth=[1], directions=("read", "write"))
    df.loc[df["direction"] == "write", "clat_p99_us"] = 99.0
    [ax] = latency_percentiles(df, direction="write").axes
    assert list(lines(ax)[0].get_ydata())[2] == pytest.approx(99.0)
    with pytest.raises(ResultsError, match="no rows with direction 'trim'"):
        latency_percentiles(df, direction="trim")


def test_latency_percentiles_of_a_single_point_need_no_legend() -> None:
    ax = Figure().add_subplot()
    latency_percentiles(frame(iodepth=[1]), ax=ax)
    assert len(lines(ax)) == 1 and ax.get_legend() is None


def test_cpu_per_io_into_an_axes_with_a_legend_per_hue() -> None:
    ax = Figure().add_subplot()
    cpu_per_io(frame(scheduler=["none", "bfq"], direct=[0, 1]), "scheduler", hue="direct", ax=ax)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["buffered", "O_DIRECT"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["none", "bfq"]


def test_cpu_per_io_into_an_axes_refuses_a_third_axis() -> None:
    df = frame(scheduler=["none", "bfq"], direct=[0, 1], numjobs=[1, 2])
    with pytest.raises(ResultsError, match="cpu_per_io: numjobs also varies; one Axes shows one panel"):
        cpu_per_io(df, "scheduler", hue="direct", ax=Figure().add_subplot())


def test_cpu_per_io_needs_cpu_accounting() -> None:
    df = frame(scheduler=["none", "bfq"])
    with pytest.raises(ResultsError, match="y 'cpu_us_per_io' is no column.*usr_cpu/sys_cpu"):
        cpu_per_io(df.drop(columns="cpu_us_per_io"))
    with pytest.raises(ResultsError, match="y 'cpu_us_per_io' holds no value at any point"):
        cpu_per_io(df.assign(cpu_us_per_io=pd.NA))


# Regressions found in review (each failed before its fix).


def test_smt_names_placements_when_another_axis_gets_line_styles() -> None:
    df = frame(numjobs=[1, 2], placement=["same-core", "diff-cores"], iodepth=[1, 2], bs=[4096, 65536])
    top = smt(df).axes[0]
    assert labels(top)[:2] == [
        "same core (all jobs on one core's threads) · bs=4k",
        "same core (all jobs on one core's threads) · bs=64k",
    ]


def test_heatmap_gives_points_without_a_value_a_row_of_their_own() -> None:
    df = frame(iodepth=[1, 4], numjobs=[1, 2]).astype({"numjobs": "Int64"})
    df.loc[df["point"] == 4, "numjobs"] = pd.NA
    ax = heatmap(df).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2", "n/a"]
    assert [t.get_text() for t in ax.texts] == ["1k", "4k", "1k", "—", "—", "4k"]


def test_cpu_per_io_bars_keep_the_binding_colours() -> None:
    df = frame(scheduler=["none", "mq-deadline"], binding=["local", "remote"])
    ax = cpu_per_io(df, "scheduler", hue="binding").axes[0]
    groups = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [to_hex(g.patches[0].get_facecolor()) for g in groups] == ["#1f77b4", "#d62728"]


def test_cpu_per_io_draws_other_cpu_metrics() -> None:
    df = frame(scheduler=["none", "mq-deadline"]).assign(sys_cpu=[10.0, 20.0, 30.0, 30.0])
    ax = cpu_per_io(df, y="sys_cpu").axes[0]
    [bars] = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [p.get_height() for p in bars.patches] == [15.0, 30.0]
    assert ax.get_ylabel() == "System CPU (%)"


def test_latency_percentiles_of_one_direction_need_a_direction_column() -> None:
    with pytest.raises(ResultsError, match="no `direction` column"):
        latency_percentiles(frame(iodepth=[1]).drop(columns="direction"), direction="read")


# the rules every figure keeps (docs/figures.md): checked on what each draws

#: Per-repeat factors of a point whose repeats lie far apart: the 95 % CI reaches below zero.
WIDE = {1: 0.05, 2: 1.0, 3: 1.95}
METRICS = ("iops", "bw_bytes", "lat_mean_us", "clat_p50_us", "clat_p90_us", "clat_p99_us", "clat_p99_9_us")


def wide(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its repeats spread so far apart that a mean's CI runs past zero."""
    factor = df["repeat"].map(WIDE).astype(float).to_numpy()
    return df.assign(**{m: df[m] * factor for m in (*METRICS, "cpu_us_per_io")})


RULE_FIGURES: dict[str, Any] = {
    "local-vs-remote": lambda: local_vs_remote(
        wide(numa(iodepth=[1, 4, 16], binding=["local", "remote"], bs=[4096, 65536]))
    ),
    "smt": lambda: smt(
        wide(frame(repeats=3, numjobs=[1, 2], placement=["same-core", "diff-cores"], bs=[4096, 65536]))
    ),
    "heatmap": lambda: heatmap(
        wide(
            frame(
                repeats=3,
                iops=lambda p: 1e3 * p["iodepth"] * p["bs"],
                iodepth=[1, 4],
                numjobs=[1, 2],
                bs=[1, 256],
            )
        )
    ),
    "latency": lambda: latency_percentiles(
        wide(frame(repeats=3, iodepth=[1, 2, 4, 8, 16, 32], numjobs=[1, 2], binding=["local", "remote"]))
    ),
    "cpu-per-io": lambda: cpu_per_io(
        wide(
            frame(
                repeats=3,
                cpu=lambda p: 2.0 * p["bs"] / 4096,
                scheduler=["none", "mq-deadline"],
                bs=[4096, 65536],
            )
        ),
        col="bs",
    ),
    "sweep": lambda: sweep(wide(frame(repeats=3, iodepth=[1, 4, 16], numjobs=[1, 2], bs=[4096, 65536]))),
    "line": lambda: plot(
        wide(frame(repeats=3, iops=lambda p: 1e3 * p["iodepth"] * p["bs"], iodepth=[1, 4], bs=[1, 8])),
        col="bs",
    ),
    "device-vs-fio": lambda: device_vs_fio(_telemetry_frame(), col="bs"),
    "cpu-where": lambda: cpu_where(_telemetry_frame(), cpu_samples(_telemetry_frame()), col="bs"),
    "busiest-threads": lambda: busiest_threads(_telemetry_frame(), cpu_samples(_telemetry_frame())),
}


def panels(fig: Figure) -> list[Axes]:
    """The data panels of ``fig``: visible, not a colour bar."""
    return [ax for ax in fig.axes if ax.get_visible() and (ax.lines or ax.patches or ax.images)]


@pytest.mark.parametrize("name", RULE_FIGURES)
def test_every_mean_drawn_carries_its_uncertainty_and_no_bar_runs_below_zero(name: str) -> None:
    fig = RULE_FIGURES[name]()
    bars = [c for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer)]
    cells = [t.get_text() for ax in fig.axes if ax.images for t in ax.texts]
    assert bars or (cells and all("±" in t for t in cells))
    drawn = [line for ax in panels(fig) for line in lines(ax) if len(line.get_xdata()) > 0]
    assert len(bars) >= (len(drawn) if not cells else 0)
    lows = [min(s[0][1], s[1][1]) for c in bars for s in c.lines[2][0].get_segments()]
    assert lows and min(lows) >= 0 if bars else True
    assert any(low == 0 for low in lows) or cells, "the spread repeats must reach zero somewhere"


@pytest.mark.parametrize("name", [name for name in RULE_FIGURES if name != "busiest-threads"])
def test_panels_that_compare_one_metric_share_their_y_range_and_colour_scale(name: str) -> None:
    fig = RULE_FIGURES[name]()
    images = [image for ax in fig.axes for image in ax.images]
    assert len({id(image.norm) for image in images}) <= 1
    by_metric: dict[str, set[tuple[float, float]]] = {}
    for ax in panels(fig):
        if not ax.images:
            by_metric.setdefault(ax.get_ylabel(), set()).add(tuple(round(v, 9) for v in ax.get_ylim()))
    assert len(panels(fig)) >= 2
    assert all(len(limits) == 1 for limits in by_metric.values()), by_metric


@pytest.mark.parametrize("name", RULE_FIGURES)
def test_no_two_curves_of_a_panel_look_alike(name: str) -> None:
    fig = RULE_FIGURES[name]()
    for ax in panels(fig):
        looks = [
            (to_hex(line.get_color()), line.get_linestyle(), str(line.get_marker()))
            for line in lines(ax)
            if not str(line.get_label()).startswith("_")
        ]
        assert len(set(looks)) == len(looks), looks


def test_the_latency_figure_past_ten_curves_turns_to_the_next_line_style() -> None:
    fig = RULE_FIGURES["latency"]()
    ax = panels(fig)[0]
    curves = [line for line in lines(ax) if not str(line.get_label()).startswith("_")]
    assert len(curves) == 12
    assert len({to_hex(line.get_color()) for line in curves}) == 10
    assert [line.get_linestyle() for line in curves].count("--") == 2


def cpu_samples(df: pd.DataFrame) -> pd.DataFrame:
    """CPU and thread telemetry of ``df``'s points as iobench.telemetry gives it: one node, repeats far apart."""
    runs = df[["point", "repeat"]].drop_duplicates()
    kinds = pd.DataFrame(
        [
            {"source": "cpu", "entity": str(cpu), "node": 0, "metric": kind, "value": 10.0 + cpu}
            for cpu in range(2)
            for kind in ("user_pct", "system_pct", "irq_pct", "softirq_pct")
        ]
    )
    threads = pd.DataFrame(
        [
            {"source": "thread", "entity": f"worker{n}", "node": 0, "metric": "cpu_pct", "value": 20.0 * n}
            for n in range(1, 4)
        ]
    )
    out = runs.merge(pd.concat([kinds, threads], ignore_index=True), how="cross")
    out["value"] = out["value"] * out["repeat"].map(WIDE).astype(float)
    out["t_s"] = 1.0
    return out


def _telemetry_frame() -> pd.DataFrame:
    df = wide(frame(repeats=3, iodepth=[1, 4, 16], bs=[4096, 65536]))
    return df.assign(dev_iops=df["iops"] * 0.9)

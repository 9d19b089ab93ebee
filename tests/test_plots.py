"""Figures are checked through what is drawn, not pixels: point totals, the generic plot, figures_for."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

from iobench.errors import ResultsError
from iobench.plots import (
    KINDS,
    LABELS,
    caption,
    cpu_per_io,
    default_figures,
    draw,
    figures_for,
    heatmap,
    hosts,
    latency_percentiles,
    local_vs_remote,
    over_repeats,
    parameter_columns,
    plot,
    point_totals,
    save_figure,
    scale_out,
    smt,
    sweep,
    throughput_metric,
    timeline,
)
from iobench.plots.latheatmap import lat_heatmap
from iobench.plots.loadcurve import latency_load
from iobench.results.points import t975

Params = dict[str, Any]
#: Per-repeat factors: the mean of three repeats is the model value, the sample std 10 % of it.
SPREAD = (0.9, 1.0, 1.1)


def frame(
    *,
    repeats: int = 1,
    jobs: int = 2,
    iops: Callable[[Params], float] = lambda p: p.get("iodepth", 1) * 1000.0,
    lat: Callable[[Params], float] = lambda p: float(p.get("iodepth", 1)),
    cpu: Callable[[Params], float] = lambda p: 2.0,
    failed: Collection[tuple[int, int]] = (),
    directions: tuple[str, ...] = ("read",),
    **axes: list[Any],
) -> pd.DataFrame:
    """A tidy frame as :func:`iobench.load` returns it.

    ``iops(params)`` is a point's total (split evenly over ``jobs`` and
    ``directions``), ``lat`` its latency, scaled per repeat by :data:`SPREAD`.
    Percentiles are 0.8/1.6/3.5/7 × latency. ``failed`` holds (point, repeat)
    pairs whose rows carry status ``failed`` and an absurd IOPS value.
    """
    rows = []
    for point, values in enumerate(itertools.product(*axes.values()), start=1):
        params = dict(zip(axes, values, strict=True))
        for repeat in range(1, repeats + 1):
            factor = SPREAD[repeat - 1] if repeats == 3 else 1.0
            bad = (point, repeat) in failed
            for job, direction in itertools.product(range(jobs), directions):
                latency = lat(params) * factor
                rows.append(
                    {
                        "run_id": "run-1",
                        "point": point,
                        "repeat": repeat,
                        "host": "box",
                        "jobname": "nvme0n1",
                        "job_index": job,
                        "direction": direction,
                        "status": "failed" if bad else "ok",
                        **params,
                        "target": "/dev/nvme0n1",
                        "iops": 1e12 if bad else iops(params) * factor / jobs / len(directions),
                        "bw_bytes": iops(params) * factor / jobs / len(directions) * params.get("bs", 4096),
                        "lat_mean_us": latency,
                        "clat_p50_us": latency * 0.8,
                        "clat_p90_us": latency * 1.6,
                        "clat_p99_us": latency * 3.5,
                        "clat_p99_9_us": latency * 7.0,
                        "cpu_us_per_io": cpu(params) * factor,
                        "fio_version": "fio-3.33",
                    }
                )
    df = pd.DataFrame(rows)
    for column in ("point", "repeat", "job_index"):
        df[column] = df[column].astype("Int64")
    for column in ("run_id", "host", "jobname", "direction", "status", "target"):
        df[column] = df[column].astype("string")
    return df


def ci(value: float, n: int = 3) -> float:
    """The 95 % CI half-width of the :data:`SPREAD` repeats around ``value``."""
    return t975(n - 1) * 0.1 * value / math.sqrt(n)


def lines(ax: Axes) -> list[Line2D]:
    """The data lines of ``ax`` (not the caps of its error bars)."""
    caps = {id(cap) for c in ax.containers if isinstance(c, ErrorbarContainer) for cap in c.lines[1]}
    return [line for line in ax.lines if id(line) not in caps]


def texts(fig: Figure) -> list[str]:
    """Every non-empty text drawn anywhere in ``fig``."""
    return [t.get_text() for t in fig.findobj(Text) if t.get_text() and t.get_visible()]


def test_point_totals_sum_jobs_and_weight_latency() -> None:
    totals = point_totals(frame(iodepth=[1, 4]))
    assert totals["iops"].tolist() == [1000.0, 4000.0]
    assert totals["lat_mean_us"].tolist() == [1.0, 4.0]


def test_point_totals_weight_percentiles_and_cpu_by_iops() -> None:
    df = frame(iodepth=[1])
    df.loc[0, ["iops", "clat_p99_us", "cpu_us_per_io"]] = [300.0, 10.0, 1.0]
    df.loc[1, ["iops", "clat_p99_us", "cpu_us_per_io"]] = [100.0, 50.0, 5.0]
    [row] = point_totals(df).to_dict("records")
    assert row["iops"] == 400.0
    assert row["clat_p99_us"] == pytest.approx(20.0)
    assert row["cpu_us_per_io"] == pytest.approx(2.0)


def test_point_totals_drop_failed_runs_and_jobs_without_io() -> None:
    df = frame(iodepth=[1, 4], repeats=3, failed={(2, 3)})
    idle = df.iloc[[0]].assign(direction=pd.NA, iops=pd.NA)
    totals = point_totals(pd.concat([df, idle], ignore_index=True))
    assert len(totals) == 5 and totals["iops"].max() < 1e6
    assert totals["direction"].notna().all()


def test_point_totals_keep_the_device_settings_of_each_point() -> None:
    df = frame(iodepth=[1], scheduler_axis=["a", "b"]).drop(columns="scheduler_axis")
    df["scheduler"] = ["none", "none", "mq-deadline", "mq-deadline"]
    totals = point_totals(df)
    assert totals["scheduler"].tolist() == ["none", "mq-deadline"]
    assert totals["target"].tolist() == ["/dev/nvme0n1"] * 2


def test_point_totals_join_targets_a_point_spans() -> None:
    df = frame(iodepth=[1])
    df["target"] = ["/dev/a", "/dev/b"]
    assert point_totals(df)["target"].tolist() == ["/dev/a+/dev/b"]


def test_parameter_columns_are_the_matrix_axes() -> None:
    assert parameter_columns(frame(iodepth=[1], bs=[4096], binding=["local"])) == ["iodepth", "bs", "binding"]


def test_throughput_is_bandwidth_for_large_io() -> None:
    assert throughput_metric(point_totals(frame(iodepth=[1], bs=[4096]))) == "iops"
    assert throughput_metric(point_totals(frame(iodepth=[1], bs=[1 << 20]))) == "bw_bytes"


def test_plot_draws_one_line_per_hue_with_the_x_values() -> None:
    fig = plot(frame(iodepth=[1, 4, 16], bs=[4096, 65536]), x="iodepth", y="iops", hue="bs")
    [ax] = fig.axes
    assert [line.get_label() for line in ax.lines] == ["bs=4k", "bs=64k"]
    assert list(ax.lines[0].get_xdata()) == [1, 4, 16]
    assert list(ax.lines[0].get_ydata()) == [1000.0, 4000.0, 16000.0]
    assert ax.get_xlabel() == "I/O depth" and ax.get_ylabel() == "IOPS"
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4", "16"]


def test_plot_gives_unnamed_varying_axes_line_styles_not_averages() -> None:
    df = frame(iodepth=[1, 4], numjobs=[1, 2], iops=lambda p: 1000.0 * p["iodepth"] * p["numjobs"])
    [ax] = plot(df, x="iodepth").axes
    assert [line.get_label() for line in ax.lines] == ["numjobs=1", "numjobs=2"]
    assert [line.get_linestyle() for line in ax.lines] == ["-", "--"]
    assert list(ax.lines[1].get_ydata()) == [2000.0, 8000.0]


def test_plot_into_a_given_axes_scales_bandwidth_to_mib() -> None:
    fig = Figure()
    ax = fig.add_subplot()
    assert plot(frame(iodepth=[1, 2], bs=[1 << 20]), x="iodepth", y="bw_bytes", ax=ax) is fig
    assert list(ax.lines[0].get_ydata()) == [1000.0, 2000.0]
    assert ax.get_ylabel() == "Throughput (MiB/s)"


def test_a_series_keeps_its_colour_in_a_panel_that_lacks_another() -> None:
    df = frame(iodepth=[1, 4], numjobs=[1, 2], bs=[4096, 65536], failed={(3, 1), (7, 1)})
    left, right = plot(df, x="iodepth", hue="bs", col="numjobs").axes
    assert [line.get_label() for line in right.lines] == ["bs=64k"]
    assert right.lines[0].get_color() == left.lines[1].get_color() != left.lines[0].get_color()


def test_a_parsed_frame_takes_each_fio_output_as_a_point() -> None:
    df = frame(iodepth=[1]).drop(columns=["point", "run_id", "repeat", "iodepth"])
    df = pd.concat([df.assign(source="a/one.json"), df.assign(source="b/two.json", iops=df["iops"] * 2)])
    [ax, _] = sweep(df).axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["one.json", "two.json"]
    assert list(ax.lines[0].get_ydata()) == [1000.0, 2000.0]


def test_plot_names_a_missing_column() -> None:
    with pytest.raises(ResultsError, match=r"plot: x 'queue' is no column of these points; x takes iodepth"):
        plot(frame(iodepth=[1]), x="queue")


def test_sweep_never_averages_an_axis_away() -> None:
    df = frame(iodepth=[1, 8], bs=[4096, 65536], numjobs=[1, 2], binding=["local", "none"])
    fig = sweep(df)
    iops_panel = fig.axes[0]
    assert iops_panel.get_title() == "numjobs=1"
    assert [line.get_label() for line in iops_panel.lines] == [
        "bs=4k · local",
        "bs=4k · none",
        "bs=64k · local",
        "bs=64k · none",
    ]
    assert [line.get_linestyle() for line in iops_panel.lines] == ["-", "--", "-", "--"]
    assert len(fig.axes) == 4 and fig.axes[2].get_ylabel() == "Mean latency (µs)"
    assert fig.get_suptitle() == "IOPS and mean latency vs I/O depth"
    assert any(t.startswith("box · fio-3.33") for t in texts(fig))


def test_sweep_without_anything_varying_says_what_to_use() -> None:
    with pytest.raises(ResultsError, match=r"nothing varies.*plot\(df"):
        sweep(frame(iodepth=[1]))


def test_plot_draws_error_bars_only_for_repeated_points() -> None:
    [ax] = plot(frame(iodepth=[1, 4], repeats=3), x="iodepth").axes
    [bars] = ax.containers
    heights = [seg[1][1] - seg[0][1] for seg in bars.lines[2][0].get_segments()]
    assert heights == pytest.approx([2 * ci(1000.0), 2 * ci(4000.0)])
    [ax] = plot(frame(iodepth=[1, 4]), x="iodepth").axes
    assert not ax.containers


def test_caption_names_the_machine_and_counts_runs_that_failed() -> None:
    df = frame(iodepth=[1, 4], repeats=3, failed={(1, 2), (2, 2)})
    df.attrs["machine"] = {"cpu_model": "AMD EPYC 7702", "kernel": "6.1.0"}
    assert caption(df) == "box · AMD EPYC 7702 · Linux 6.1.0 · fio-3.33 · 2 runs failed (not shown)"
    # Points never run are counted once each, apart from failed runs, whatever their repeats.
    never = df.assign(
        status=df["status"].where(df["point"] != 2, "skipped"),
        reason=pd.Series(["same as point 1: one NUMA node"] * len(df), dtype="string").where(
            df["point"] == 2
        ),
    )
    assert caption(never).endswith(
        "fio-3.33 · 1 run failed (not shown) · 1 point the same as another here (run once)"
    )
    skipped = never.assign(reason=never["reason"].str.replace("same as point 1", "binding remote needs"))
    assert caption(skipped).endswith("fio-3.33 · 1 run failed (not shown) · 1 point skipped")
    mixed = pd.concat([frame(iodepth=[1]), frame(iodepth=[1]).assign(fio_version="fio-2.2.10")])
    assert "fio-2.2.10, fio-3.33" in caption(mixed)


@pytest.mark.parametrize(
    "df",
    [
        frame(iodepth=[1, 4, 16], numjobs=[1, 4], binding=["local", "remote"], repeats=3),
        frame(numjobs=[1, 2, 4], placement=["same-core", "diff-cores"], bs=[4096, 65536]),
        frame(scheduler=["none", "mq-deadline"], direct=[0, 1], repeats=3),
    ],
    ids=["numa", "smt", "settings"],
)
def test_every_text_is_readable_at_report_size(df: pd.DataFrame) -> None:
    for name, fig in figures_for(df).items():
        FigureCanvasAgg(fig).draw()
        small = [(t.get_text(), t.get_fontsize()) for t in fig.findobj(Text) if t.get_text()]
        assert all(size >= 9 for _, size in small), (name, [s for s in small if s[1] < 9])
        assert fig.get_figwidth() <= 14 and fig.get_dpi() == 150


def test_figure_legend_never_covers_a_panel() -> None:
    fig = local_vs_remote(frame(iodepth=[1, 4, 16], binding=["local", "remote", "none"]))
    FigureCanvasAgg(fig).draw()
    [legend] = fig.subfigs[0].legends
    box = legend.get_window_extent()
    assert [t.get_text() for t in legend.get_texts()] == ["local", "remote", "none"]
    [title] = [t for t in fig.findobj(Text) if t.get_text() == fig.get_suptitle()]
    assert not any(box.overlaps(ax.get_window_extent()) for ax in fig.axes)
    assert not box.overlaps(title.get_window_extent())


def test_figures_for_picks_the_figures_that_fit_the_axes() -> None:
    numa = frame(iodepth=[1, 4], numjobs=[1, 2], binding=["local", "remote"])
    assert list(figures_for(numa)) == ["local-vs-remote", "heatmap-iops", "latency-percentiles"]
    placement = frame(numjobs=[1, 2], placement=["same-core", "diff-cores"])
    assert list(figures_for(placement)) == ["smt", "latency-percentiles"]
    scheduler = frame(iodepth=[32], scheduler=["none", "mq-deadline"])
    assert list(figures_for(scheduler)) == ["sweep-scheduler", "latency-percentiles", "cpu-per-io-scheduler"]
    readahead = frame(readahead_kb=[0, 128]).drop(columns=["clat_p50_us", "clat_p90_us"])
    readahead[["clat_p99_us", "clat_p99_9_us"]] = pd.NA
    assert list(figures_for(readahead)) == ["sweep-readahead-kb", "cpu-per-io-readahead-kb"]


def test_figures_for_a_run_where_nothing_finished_is_empty() -> None:
    assert figures_for(frame(iodepth=[1, 4], failed={(1, 1), (2, 1)})) == {}


def test_default_figures_writes_every_format(tmp_path: Path) -> None:
    df = frame(iodepth=[1, 8], binding=["local", "none"])
    paths = default_figures(df, tmp_path / "figures", formats=("png", "svg", "pdf"))
    names = sorted(p.name for p in paths)
    assert names == sorted(
        f"{n}.{f}" for n in ("local-vs-remote", "latency-percentiles") for f in ("png", "svg", "pdf")
    )
    assert all(p.stat().st_size > 1000 for p in paths)
    assert paths[0].read_bytes().startswith(b"\x89PNG")


def test_default_figures_rejects_an_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="figure format bmp is not one of png, svg, pdf"):
        default_figures(frame(iodepth=[1, 2]), tmp_path, formats=("bmp",))


def test_kinds_map_the_cli_names_to_the_functions() -> None:
    assert KINDS == {
        "local-vs-remote": local_vs_remote,
        "smt": smt,
        "heatmap": heatmap,
        "latency": latency_percentiles,
        "cpu-per-io": cpu_per_io,
        "sweep": sweep,
        "line": plot,
        "timeline": timeline,
        "hosts": hosts,
        "scale-out": scale_out,
        "lat-heatmap": lat_heatmap,
        "latency-load": latency_load,
    }
    assert LABELS["bw_bytes"] == "Throughput (MiB/s)"


@pytest.mark.slow
def test_drawing_every_figure_never_imports_pyplot(tmp_path: Path) -> None:
    code = (
        "import sys, pandas as pd\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from test_plots import frame\n"
        "from iobench.plots import default_figures\n"
        "df = frame(iodepth=[1, 4], numjobs=[1, 2], binding=['local', 'remote'], scheduler=['none', 'bfq'])\n"
        "assert len(default_figures(df, sys.argv[2])) == 4\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(tmp_path)], check=True)


def test_over_repeats_gives_the_mean_and_a_t_based_ci() -> None:
    totals = point_totals(frame(iodepth=[1, 4], repeats=3))
    summary = over_repeats(totals, ["iodepth"], ["iops"])
    assert summary["iodepth"].tolist() == [1, 4]
    assert summary["iops"].tolist() == pytest.approx([1000.0, 4000.0])
    assert summary["iops_ci95"].tolist() == pytest.approx([ci(1000.0), ci(4000.0)])
    assert summary["iops_n"].tolist() == [3, 3]
    single = over_repeats(point_totals(frame(iodepth=[1])), ["iodepth"], ["iops"])
    assert math.isnan(single["iops_ci95"].iloc[0])


def test_point_totals_need_iops() -> None:
    with pytest.raises(ResultsError, match="no `iops` column"):
        point_totals(frame(iodepth=[1]).drop(columns="iops"))


def test_sweep_into_an_axes_draws_throughput_with_a_legend() -> None:
    ax = Figure().add_subplot()
    sweep(frame(iodepth=[1, 4], numjobs=[1, 2], repeats=3), ax=ax)
    assert [line.get_label() for line in lines(ax)] == ["numjobs=1", "numjobs=2"]
    assert ax.get_ylabel() == "IOPS" and ax.get_legend() is not None


ALL_FIGURES: dict[str, Callable[[pd.DataFrame], Figure]] = {
    "plot": lambda df: plot(df, x="iodepth"),
    "sweep": sweep,
    "local_vs_remote": local_vs_remote,
    "smt": smt,
    "heatmap": heatmap,
    "latency_percentiles": latency_percentiles,
    "cpu_per_io": cpu_per_io,
}


@pytest.mark.parametrize("name", ALL_FIGURES)
def test_every_figure_without_ok_rows_names_the_statuses(name: str) -> None:
    df = frame(iodepth=[1, 4], numjobs=[1, 2], binding=["local"], placement=["same-core"])
    df["status"] = ["failed"] * 4 + ["timeout"] * (len(df) - 4)
    with pytest.raises(ResultsError, match=rf"^{name}: no successful points to plot \(4 failed, 4 timeout\)"):
        ALL_FIGURES[name](df)


@pytest.mark.parametrize(
    ("name", "role", "missing"),
    [
        ("plot", "x", "iodepth"),
        ("local_vs_remote", "hue", "binding"),
        ("local_vs_remote", "x", "iodepth"),
        ("smt", "hue", "placement"),
        ("heatmap", "hue", "numjobs"),
    ],
)
def test_every_figure_names_the_column_it_lacks(name: str, role: str, missing: str) -> None:
    df = frame(iodepth=[1, 4], numjobs=[1, 2], binding=["local"], placement=["same-core"]).drop(
        columns=missing
    )
    with pytest.raises(
        ResultsError, match=rf"^{name}: {role} '{missing}' is no column of these points; {role} takes"
    ):
        ALL_FIGURES[name](df)


def test_draw_passes_the_cli_options_through() -> None:
    df = frame(iodepth=[1, 4], numjobs=[1, 2])
    ax = draw("heatmap", df, x="numjobs", hue="iodepth", y="lat_mean_us").axes[0]
    assert ax.get_xlabel() == "Jobs" and ax.get_ylabel() == "I/O depth"
    assert [line.get_label() for line in draw("line", df, x="numjobs", hue="iodepth").axes[0].lines] == [
        "iodepth=1",
        "iodepth=4",
    ]


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        ("bars", {}, "unknown figure kind 'bars'; use one of local-vs-remote, smt"),
        ("latency", {"x": "iodepth"}, r"latency_percentiles: x 'iodepth' cannot be chosen here"),
        ("sweep", {"hue": "bs"}, r"sweep: hue 'bs' is no column of these points; hue takes iodepth"),
        ("line", {"x": "queue"}, "plot: x 'queue' is no column of these points; x takes iodepth"),
        (
            "line",
            {"x": "iodepth", "col": "status"},
            "plot: col 'status' is not a category; col takes point",
        ),
    ],
)
def test_draw_says_what_is_wrong_with_the_options(kind: str, options: dict[str, str], message: str) -> None:
    with pytest.raises(ResultsError, match=message):
        draw(kind, frame(iodepth=[1, 4]), **options)


def test_save_figure_writes_the_same_bytes_twice_and_refuses_unknown_suffixes(tmp_path: Path) -> None:
    fig = plot(frame(iodepth=[1, 4]), x="iodepth")
    for suffix in ("svg", "pdf"):
        first, second = save_figure(fig, tmp_path / f"a.{suffix}"), save_figure(fig, tmp_path / f"b.{suffix}")
        assert first.read_bytes() == second.read_bytes()
    with pytest.raises(ResultsError, match=r"a\.bmp: cannot tell the figure format"):
        save_figure(fig, tmp_path / "a.bmp")


# Regressions found in review (each failed before its fix).


def test_point_totals_are_na_when_a_job_lacks_the_value() -> None:
    df = frame(iodepth=[1])
    df.loc[0, ["bw_bytes", "lat_mean_us"]] = pd.NA
    totals = point_totals(df)
    assert totals["iops"].tolist() == [1000.0]
    assert totals[["bw_bytes", "lat_mean_us"]].isna().all(axis=None)
    assert totals["bw_bytes"].dtype == "Float64"


def test_plot_into_an_axes_gives_col_a_line_each_instead_of_averaging_it() -> None:
    df = frame(iodepth=[1, 4], bs=[4096, 65536], iops=lambda p: p["iodepth"] * p["bs"] / 4.096)
    ax = Figure().add_subplot()
    plot(df, x="iodepth", col="bs", ax=ax)
    assert [(line.get_label(), list(line.get_ydata())) for line in lines(ax)] == [
        ("bs=4k", [1000.0, 4000.0]),
        ("bs=64k", [16000.0, 64000.0]),
    ]


def test_plot_draws_job_metrics_that_are_not_sums() -> None:
    df = frame(iodepth=[1, 4])
    df["usr_cpu"] = [4.0, 6.0] * 2
    df["ctx"] = 100
    df["runtime_ms"] = [1000, 1002] * 2
    [ax] = plot(df, x="iodepth", y="usr_cpu").axes
    assert list(ax.lines[0].get_ydata()) == [5.0, 5.0] and ax.get_ylabel() == "User CPU (%)"
    assert list(plot(df, x="iodepth", y="ctx").axes[0].lines[0].get_ydata()) == [200.0, 200.0]
    assert list(plot(df, x="iodepth", y="runtime_ms").axes[0].lines[0].get_ydata()) == [1002.0, 1002.0]


def test_plot_names_the_metrics_it_can_draw() -> None:
    with pytest.raises(
        ResultsError, match=r"plot: y 'queue' is no column of these points; y takes iops, bw_bytes"
    ):
        plot(frame(iodepth=[1, 4]), x="iodepth", y="queue")


def test_points_that_only_their_number_tells_apart_are_not_averaged_as_repeats() -> None:
    [ax] = plot(frame(iodepth=[1, 1], iops=lambda p: 1000.0), x="iodepth").axes
    assert [line.get_label() for line in lines(ax)] == ["point=1", "point=2"]
    assert not ax.containers


def test_a_point_without_a_value_of_x_is_drawn_at_n_a() -> None:
    df = frame(iodepth=[1, 4]).astype({"iodepth": "Int64"})
    df.loc[df["point"] == 2, "iodepth"] = pd.NA
    [ax] = plot(df, x="iodepth").axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "n/a"]
    assert list(ax.lines[0].get_ydata()) == [1000.0, 4000.0]
    assert ax.lines[0].get_linestyle() == "None"

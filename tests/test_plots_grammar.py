"""One figure grammar: x, y, hue, col and row mean the same in every figure, and are checked like a matrix.

Checked through what is drawn (line labels, tick labels, panel titles and
places), except for the size limit, which is a promise about pixels.
"""

from __future__ import annotations

import inspect
import io
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from test_plots import frame, lines, texts
from test_timeseries import DATA, make_run
from typer.testing import CliRunner

import iobench
from iobench.cli.commands import app
from iobench.errors import PlotOptionError, ResultsError
from iobench.plots import (
    KINDS,
    busiest_threads,
    cpu_per_io,
    cpu_where,
    device_vs_fio,
    draw,
    heatmap,
    hosts,
    latency_percentiles,
    local_vs_remote,
    plot,
    ratios,
    save_figure,
    scale_out,
    smt,
    sweep,
    timeline,
)
from iobench.plots.latheatmap import lat_heatmap
from iobench.plots.limits import MAX_CATEGORIES, MAX_PIXELS, MAX_SERIES
from iobench.results.fioout import parse_fio
from iobench.results.fioout.joboptions import OPTION_DTYPES

ROLES = ("x", "y", "hue", "col", "row")
FIGURES = (
    plot,
    sweep,
    local_vs_remote,
    smt,
    heatmap,
    latency_percentiles,
    cpu_per_io,
    cpu_where,
    device_vs_fio,
    busiest_threads,
    timeline,
    lat_heatmap,
    ratios,
    hosts,
    scale_out,
)


def panels(fig: Figure) -> list[Axes]:
    """The visible data panels of ``fig`` (not colour bars)."""
    return [
        ax
        for ax in fig.axes
        if ax.get_visible() and ax.get_subplotspec() is not None and ax.get_label() != "<colorbar>"
    ]


def place(ax: Axes) -> tuple[int, int]:
    spec = ax.get_subplotspec()
    assert spec is not None
    return spec.rowspan.start, spec.colspan.start


def grid_titles(fig: Figure) -> dict[tuple[int, int], str]:
    return {place(ax): ax.get_title() for ax in panels(fig) if ax.get_title()}


# --- the grammar -------------------------------------------------------------------------------


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.__name__)
def test_every_figure_takes_the_five_roles_and_an_axes(figure: Callable[..., Figure]) -> None:
    parameters = inspect.signature(figure).parameters
    assert set(ROLES) | {"ax"} <= set(parameters)


def test_the_cli_kinds_are_the_figure_functions() -> None:
    assert set(KINDS) == {
        "local-vs-remote",
        "smt",
        "heatmap",
        "latency",
        "cpu-per-io",
        "sweep",
        "line",
        "timeline",
        "hosts",
        "scale-out",
        "lat-heatmap",
        "latency-load",
    }


GRID = {"iodepth": [1, 4], "numjobs": [1, 2], "bs": [4096, 65536], "binding": ["local", "remote"]}


@pytest.mark.parametrize("kind", ["line", "sweep", "local-vs-remote", "heatmap", "latency", "cpu-per-io"])
def test_col_and_row_make_a_grid_of_panels_in_every_kind(kind: str) -> None:
    df = frame(**GRID)
    hue = {"heatmap": "binding"}.get(kind)  # the heatmap's rows of cells are numjobs by default
    fig = draw(kind, df, col="bs", row="numjobs", hue=hue)
    titles = grid_titles(fig)
    rows = {r for r, _ in titles}
    cols = {c for _, c in titles}
    for (r, c), title in titles.items():
        numjobs = "numjobs=1" if r == min(rows) else "numjobs=2"
        bs = "bs=4k" if c == min(cols) else "bs=64k"
        assert numjobs in title and bs in title, (kind, titles)
    assert len(titles) == 4 and len(cols) == 2


@pytest.mark.parametrize(
    ("kind", "options", "labels"),
    [
        ("line", {"x": "iodepth", "hue": "bs"}, ["bs=4k", "bs=64k"]),
        ("sweep", {"hue": "bs"}, ["bs=4k", "bs=64k"]),
        ("local-vs-remote", {"hue": "bs"}, ["bs=4k", "bs=64k"]),
        ("latency", {"hue": "bs"}, ["bs=4k", "bs=64k"]),
    ],
)
def test_hue_gives_each_value_a_colour_in_every_kind(
    kind: str, options: dict[str, str], labels: list[str]
) -> None:
    df = frame(iodepth=[1, 4], bs=[4096, 65536], binding=["local"])
    ax = draw(kind, df, **options).axes[0]
    assert [line.get_label() for line in lines(ax)] == labels


def test_hue_in_bars_and_cells_is_a_bar_group_and_a_row_of_cells() -> None:
    df = frame(iodepth=[1, 4], bs=[4096, 65536], scheduler_=["a"])
    bars = draw("cpu-per-io", df, x="iodepth", hue="bs").axes[0]
    assert [c.get_label() for c in bars.containers] == ["bs=4k", "bs=64k"]
    cells = draw("heatmap", df, x="iodepth", hue="bs").axes[0]
    assert [t.get_text() for t in cells.get_yticklabels()] == ["4k", "64k"]
    assert [t.get_text() for t in cells.get_xticklabels()] == ["1", "4"]


def test_the_defaults_of_each_figure_are_kept() -> None:
    numa = local_vs_remote(frame(iodepth=[1, 4], binding=["local", "remote"]))
    assert numa.axes[1].get_xlabel() == "I/O depth" and labels_of(numa.axes[0]) == ["local", "remote"]
    cores = smt(frame(numjobs=[1, 2], placement=["same-core", "diff-cores"]))
    assert cores.axes[1].get_xlabel() == "Jobs" and "same core" in labels_of(cores.axes[0])[0]
    df = frame(iodepth=[1, 4], numjobs=[1, 2])
    cells = heatmap(df).axes[0]
    assert cells.get_xlabel() == "I/O depth" and cells.get_ylabel() == "Jobs"
    assert heatmap(df, "lat_mean_us").axes[1].get_ylabel() == "Mean latency (µs)"  # the metric comes first
    assert cpu_per_io(df, "numjobs").axes[0].get_xlabel() == "Jobs"


def labels_of(ax: Axes) -> list[str]:
    return [str(line.get_label()) for line in lines(ax)]


def test_line_without_x_takes_the_main_axis_like_sweep() -> None:
    [ax] = draw("line", frame(iodepth=[1, 4], numjobs=[2])).axes
    assert ax.get_xlabel() == "I/O depth"


def test_y_is_the_metric_in_every_kind() -> None:
    df = frame(iodepth=[1, 4], numjobs=[1, 2], binding=["local", "remote"])
    assert draw("line", df, x="iodepth", y="lat_mean_us").axes[0].get_ylabel() == "Mean latency (µs)"
    assert draw("local-vs-remote", df, y="clat_p99_us").axes[0].get_ylabel() == "p99 completion latency (µs)"
    cells = draw("heatmap", df, y="lat_mean_us").axes
    assert any(ax.get_ylabel() == "Mean latency (µs)" for ax in cells)  # the colour bar
    assert draw("cpu-per-io", df, y="lat_mean_us").axes[0].get_ylabel() == "Mean latency (µs)"


def test_row_alone_stacks_panels_in_one_column() -> None:
    fig = plot(frame(iodepth=[1, 4], bs=[4096, 65536, 1 << 20]), x="iodepth", row="bs")
    assert sorted(grid_titles(fig)) == [(0, 0), (1, 0), (2, 0)]


def test_into_an_axes_col_and_row_become_line_styles() -> None:
    ax = Figure().add_subplot()
    plot(frame(iodepth=[1, 4], bs=[4096, 65536], numjobs=[1, 2]), x="iodepth", col="bs", row="numjobs", ax=ax)
    assert len(lines(ax)) == 4


# --- options checked like a matrix -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        (
            "line",
            {"y": "target"},
            r"plot: y 'target' is a category, not a metric; y takes iops, bw_bytes, lat_mean_us",
        ),
        ("line", {"hue": "iops"}, r"plot: hue 'iops' is a metric, not a category; hue takes iodepth, bs"),
        ("line", {"x": "queue"}, r"plot: x 'queue' is no column of these points; x takes iodepth, bs"),
        ("line", {"col": "jobname"}, r"plot: col 'jobname' is a column of fio's jobs, not of points"),
        ("line", {"x": "iodepth", "hue": "iodepth"}, r"plot: hue 'iodepth' is x already"),
        ("sweep", {"row": "lat_mean_us"}, r"sweep: row 'lat_mean_us' is a metric, not a category"),
        (
            "heatmap",
            {"hue": "iops"},
            r"heatmap: hue 'iops' is a metric, not a category; hue takes bs, binding",
        ),
        ("heatmap", {"y": "bs", "hue": "binding"}, r"heatmap: y 'bs' is a category, not a metric"),
        ("cpu-per-io", {"x": "cpu_us_per_io"}, r"cpu_per_io: x 'cpu_us_per_io' is a metric"),
        ("local-vs-remote", {"y": "status"}, r"local_vs_remote: y 'status' is not a metric"),
        (
            "latency",
            {"x": "iodepth"},
            r"latency_percentiles: x 'iodepth' cannot be chosen here: x is the percentile",
        ),
        ("latency", {"y": "iops"}, r"latency_percentiles: y 'iops' cannot be chosen here"),
    ],
)
def test_an_option_that_does_not_fit_names_the_column_and_those_that_fit(
    kind: str, options: dict[str, str], message: str
) -> None:
    df = frame(iodepth=[1, 4], bs=[4096, 65536], binding=["local", "remote"])
    with pytest.raises(PlotOptionError, match=message) as caught:
        draw(kind, df, **options)
    error = caught.value
    assert isinstance(error, ResultsError) and error.exit_code == 2
    assert error.figure and error.option in ROLES and error.column in options.values()


def test_the_error_carries_its_facts() -> None:
    with pytest.raises(PlotOptionError) as caught:
        plot(frame(iodepth=[1, 4], bs=[4096, 65536]), x="iodepth", hue="iops")
    error = caught.value
    assert (error.figure, error.option, error.column) == ("plot", "hue", "iops")
    assert error.problem == "is a metric, not a category"
    assert error.fits == ["bs", "point"]  # iodepth is x already


def test_a_figure_that_needs_a_column_says_which_axis_to_add() -> None:
    with pytest.raises(
        PlotOptionError, match=r"hue 'binding' is no column.*needs a run whose matrix has a `binding` axis"
    ):
        local_vs_remote(frame(iodepth=[1, 4]))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["line", "--y", "target"], "y 'target' is a category, not a metric; y takes iops"),
        (["line", "--hue", "iops"], "hue 'iops' is a metric, not a category; hue takes iodepth, numjobs, bs"),
        (["heatmap", "--row", "nope"], "row 'nope' is no column of these points"),
    ],
)
def test_the_cli_exits_2_with_the_message_and_no_traceback(
    tmp_path: Path, args: list[str], message: str
) -> None:
    source = tmp_path / "frame.parquet"
    frame(iodepth=[1, 4], numjobs=[1, 2], bs=[4096, 65536]).to_parquet(source)
    out = tmp_path / "f.png"
    result = CliRunner().invoke(app, ["plot", str(source), *args, "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output and not out.exists()


def test_the_cli_passes_row_through(tmp_path: Path) -> None:
    source = tmp_path / "frame.parquet"
    frame(iodepth=[1, 4], numjobs=[1, 2], bs=[4096, 65536]).to_parquet(source)
    out = tmp_path / "f.png"
    args = ["plot", str(source), "line", "--x", "iodepth", "--col", "bs", "--row", "numjobs", "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert png_size(out.read_bytes())[1] > png_size(save_png(plot(frame(iodepth=[1, 4]), x="iodepth")))[1]


# --- figures that stay figures -------------------------------------------------------------------

REAL = Path(__file__).parent / "data" / "fio" / "fio-3.33" / "randrw.json"
AXES: dict[str, list[Any]] = {
    "bs": [4096, 8192, 16384, 65536, 131072, 1 << 20],
    "iodepth": [1, 2, 4, 8, 16, 32, 64, 128],
    "numjobs": [1, 2, 4, 8, 16, 32],
    "binding": ["local", "remote", "none"],
    "placement": ["same-core", "diff-cores"],
    "scheduler": ["none", "mq-deadline"],
}


@pytest.fixture(scope="module")
def big() -> pd.DataFrame:
    """3,456 points × 2 repeats of a real fio-3.33 randrw job (read and write rows), scaled per point."""
    real = parse_fio([REAL]).drop(columns=["source", *OPTION_DTYPES])  # the grid's axes stand for them
    grid = pd.MultiIndex.from_product([*AXES.values(), [1, 2]], names=[*AXES, "repeat"]).to_frame(index=False)
    grid["point"] = (grid.index // 2 + 1).astype("Int64")
    grid["repeat"] = grid["repeat"].astype("Int64")
    df = grid.merge(real, how="cross")
    scale = (df["iodepth"] * df["numjobs"]).pow(0.5) * (1 + 0.01 * df["repeat"])
    for metric in ("iops", "bw_bytes", "io_bytes", "total_ios"):
        df[metric] = (df[metric] * scale).astype(df[metric].dtype if metric != "io_bytes" else "Float64")
    df["run_id"] = pd.array(["big"] * len(df), dtype="string")
    df["status"] = pd.array(["ok"] * len(df), dtype="string")
    df["host"] = pd.array(["box"] * len(df), dtype="string")
    df["target"] = pd.array(["/dev/nvme0n1"] * len(df), dtype="string")
    df["dev_iops"] = df["iops"] * 0.98
    return df


@pytest.fixture(scope="module")
def samples(big: pd.DataFrame) -> pd.DataFrame:
    """CPU samples per node and 20 threads a point × repeat, as iobench.telemetry gives them."""
    runs = big[["point", "repeat"]].drop_duplicates()
    cpu = runs.merge(
        pd.DataFrame(
            [
                {"source": "cpu", "entity": str(cpu), "node": cpu // 2, "metric": kind, "value": 10.0 + cpu}
                for cpu in range(4)
                for kind in ("user_pct", "system_pct", "irq_pct", "softirq_pct")
            ]
        ),
        how="cross",
    )
    threads = runs.merge(
        pd.DataFrame(
            [
                {"source": "thread", "entity": f"worker{n}", "node": 0, "metric": "cpu_pct", "value": 5.0 * n}
                for n in range(20)
            ]
        ),
        how="cross",
    )
    out = pd.concat([cpu, threads], ignore_index=True)
    out["t_s"] = 1.0
    return out


@pytest.fixture(scope="module")
def comparison() -> pd.DataFrame:
    """A comparison of 3,000 matched points (as iobench.compare gives it) for two metrics."""
    rows = []
    for metric in ("iops", "lat_mean_us"):
        for n in range(3000):
            ratio = 1 + (n % 50 - 25) / 100
            rows.append(
                {
                    "bs": 4096 * (1 + n % 6),
                    "iodepth": 1 + n // 6,
                    "metric": metric,
                    "match": "both",
                    "ratio": ratio,
                    "ratio_ci_low": ratio * 0.97,
                    "ratio_ci_high": ratio * 1.03,
                    "verdict": "better" if ratio > 1.01 else "worse" if ratio < 0.99 else "no change",
                }
            )
    result = pd.DataFrame(rows)
    result.attrs.update({"a": "A", "b": "B", "min_effect": 0.01})
    return result


def save_png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=150)
    return buffer.getvalue()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def check_size(fig: Figure, tmp_path: Path, name: str) -> str:
    """Save ``fig`` as iobench saves figures; assert each side fits; return its caption text."""
    path = save_figure(fig, tmp_path / f"{name}.png")
    width, height = png_size(path.read_bytes())
    assert 0 < width <= MAX_PIXELS and 0 < height <= MAX_PIXELS, (name, width, height)
    return " ".join(" ".join(texts(fig)).split())


BIG_FIGURES: dict[str, Callable[[pd.DataFrame, pd.DataFrame], Figure]] = {
    "line": lambda df, _: plot(df, x="iodepth"),
    "line-grid": lambda df, _: plot(df, x="iodepth", col="bs", row="numjobs"),
    "sweep": lambda df, _: sweep(df),
    "local-vs-remote": lambda df, _: local_vs_remote(df),
    "smt": lambda df, _: smt(df),
    "heatmap": lambda df, _: heatmap(df),
    "heatmap-many-cells": lambda df, _: heatmap(df, x="point", hue="iodepth"),
    "latency": lambda df, _: latency_percentiles(df),
    "cpu-per-io": lambda df, _: cpu_per_io(df),
    "cpu-where": lambda df, s: cpu_where(df, s),
    "device-vs-fio": lambda df, _: device_vs_fio(df),
    "busiest-threads": lambda df, s: busiest_threads(df, s, top=100),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", BIG_FIGURES)
def test_every_kind_of_thousands_of_points_stays_a_figure(
    name: str, big: pd.DataFrame, samples: pd.DataFrame, tmp_path: Path
) -> None:
    fig = BIG_FIGURES[name](big, samples)
    caption = check_size(fig, tmp_path, name)
    assert " shown" in caption, caption  # what was left out is said
    for ax in panels(fig):
        assert len(lines(ax)) <= MAX_SERIES * 2  # lines and their markers of steadiness at most
        assert len(ax.get_xticklabels()) <= MAX_CATEGORIES + 1


def test_lines_beyond_the_limit_keep_the_highest_and_say_so(big: pd.DataFrame) -> None:
    fig = plot(big, x="iodepth", hue="bs")
    [ax] = panels(fig)
    assert len(lines(ax)) == MAX_SERIES
    caption = " ".join(" ".join(texts(fig)).split())
    assert f"{MAX_SERIES} of 864 lines shown (the highest mean IOPS)" in caption


def test_panels_beyond_the_limit_are_the_first_and_said(big: pd.DataFrame) -> None:
    fig = plot(big, x="iodepth", col="point")
    caption = " ".join(" ".join(texts(fig)).split())
    assert "panels shown (the first by point)" in caption
    assert len(panels(fig)) < 3456


@pytest.mark.slow
def test_the_figures_of_a_big_run_stay_figures(big: pd.DataFrame, samples: pd.DataFrame) -> None:
    """The report's figures; each kind's saved pixels are checked above, here their size (saved as is)."""
    figures = iobench.plots.figures_for(big, samples)
    assert {"local-vs-remote", "heatmap-iops", "busiest-threads", "cpu-where"} <= set(figures)
    for name, fig in figures.items():
        width, height = fig.get_size_inches() * 150
        assert round(width) <= MAX_PIXELS and round(height) <= MAX_PIXELS, name


@pytest.mark.slow
def test_the_ratio_figure_of_thousands_of_points_keeps_the_largest_changes(
    comparison: pd.DataFrame, tmp_path: Path
) -> None:
    fig = ratios(comparison)
    caption = check_size(fig, tmp_path, "ratios")
    assert "of 3000 points shown (the largest changes)" in caption
    iops = panels(fig)[0]
    shown = [float(line.get_xdata()[0]) for line in iops.lines if line.get_marker() == "o"]
    assert len(shown) <= MAX_CATEGORIES and min(abs(r - 1) for r in shown) >= 0.2


@pytest.mark.slow
def test_the_timeline_of_hundreds_of_points_stays_a_figure(tmp_path: Path) -> None:
    logs = {p.name: p for p in (DATA / "logs").iterdir()}
    points = [
        {"point": n, "files": logs, "sections": ["offset", "prio", "shared"], "values": {"iodepth": n}}
        for n in range(1, 301)
    ]
    fig = timeline(make_run(tmp_path, points))
    caption = check_size(fig, tmp_path, "timeline")
    assert "12 of 300 points shown" in caption


# --- marks on points ---------------------------------------------------------------------------------


def test_a_point_not_steady_is_ringed_in_line_figures() -> None:
    df = frame(iodepth=[1, 4, 16], repeats=3)
    df["steady"] = pd.array([True] * len(df), dtype="boolean")
    df.loc[(df["point"] == 2) & (df["repeat"] == 3), "steady"] = False
    [ax, _] = sweep(df).axes
    rings = [line for line in ax.lines if line.get_gid() == "mark"]
    assert [(list(r.get_xdata()), r.get_label()) for r in rings] == [([4.0], "not steady (a repeat)")]

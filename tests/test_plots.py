"""Figures are checked through what is drawn, not pixels."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd

from iobench.plots import default_figures, plot, point_totals, sweep


def tidy(**axes: list[object]) -> pd.DataFrame:
    """A small tidy frame: two jobs per point, IOPS = iodepth × 1000 per job, latency = iodepth µs."""
    rows = []
    for point, values in enumerate(itertools.product(*axes.values()), start=1):
        params = dict(zip(axes, values, strict=True))
        for job in (0, 1):
            rows.append(
                {
                    "run_id": "r",
                    "point": point,
                    "repeat": 1,
                    "direction": "read",
                    "status": "ok",
                    "job_index": job,
                    **params,
                    "iops": params["iodepth"] * 1000.0,
                    "bw_bytes": 1.0,
                    "lat_mean_us": float(params["iodepth"]),
                    "host": "h",
                    "fio_version": "fio-3.33",
                }
            )
    return pd.DataFrame(rows)


def test_point_totals_sum_jobs_and_weight_latency() -> None:
    totals = point_totals(tidy(iodepth=[1, 4]))
    assert totals["iops"].tolist() == [2000.0, 8000.0]
    assert totals["lat_mean_us"].tolist() == [1.0, 4.0]


def test_plot_draws_one_line_per_hue_with_the_x_values() -> None:
    fig = plot(tidy(iodepth=[1, 4, 16], bs=[4096, 65536]), x="iodepth", y="iops", hue="bs")
    [ax] = fig.axes
    assert [line.get_label() for line in ax.lines] == ["bs=4k", "bs=64k"]
    assert list(ax.lines[0].get_xdata()) == [1, 4, 16]
    assert list(ax.lines[0].get_ydata()) == [2000.0, 8000.0, 32000.0]
    assert ax.get_xlabel() == "I/O depth" and ax.get_ylabel() == "IOPS"


def test_default_figure_never_averages_an_axis_away(tmp_path: Path) -> None:
    df = tidy(iodepth=[1, 8], bs=[4096, 65536], numjobs=[1, 2], binding=["local", "none"])
    [path] = default_figures(df, tmp_path)
    assert path.name == "sweep-iodepth.png" and path.stat().st_size > 0
    fig = sweep(df)
    iops_panel = fig.axes[0]
    assert iops_panel.get_title() == "numjobs=1"
    assert [line.get_label() for line in iops_panel.lines] == [
        "bs=4k binding=local",
        "bs=4k binding=none",
        "bs=64k binding=local",
        "bs=64k binding=none",
    ]
    assert "h · fio-3.33" in [t.get_text() for t in fig.texts]
    fig = plot(df, x="iodepth", y="iops", hue="binding", col="numjobs")
    assert len(fig.axes) == 2 and [ax.get_title() for ax in fig.axes] == ["numjobs=1", "numjobs=2"]

"""`iobench report` and `iobench plot` on a real (null-engine) run."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import NULL_MATRIX, FakeFio
from headless import measure
from typer.testing import CliRunner

from iobench.cli.commands import app
from iobench.errors import PlotOptionError, ResultsError
from iobench.matrix.model import load_matrix
from iobench.report.findings import with_validity
from iobench.report.page import write_report
from iobench.results.framecache import save_frame
from iobench.results.loading import load
from iobench.results.points import summarize
from iobench.runner.sweep import run
from iobench.store.rundir import RunDir

runner = CliRunner()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two iodepths × two numjobs, two repeats each: a heatmap, CI bars and a summary with n = 2."""
    base = tmp_path_factory.mktemp("report")
    text = NULL_MATRIX.format(target=base / "target.dat").replace("iodepth: [1, 2]", "iodepth: [1, 4]")
    text += "repeat: 2\n"  # NULL_MATRIX has iodepth and numjobs axes
    (base / "m.yaml").write_text(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(base / "state"))
        result = run(load_matrix(base / "m.yaml"), out=base / "r")
    assert result.counts == {"ok": 8}
    return result.run_dir


#: A demo-like sweep: 36 points × 3 repeats, the 12 ``remote`` ones skipped on one NUMA node (72 ran).
DEMO72 = """
version: 1
name: demo72
description: the demo's axes with remote binding and three repeats
targets:
  - path: {target}
    size: 8M
fio:
  ioengine: null
  rw: randread
  runtime: 1
  time_based: 1
matrix:
  bs: [4k, 64k]
  iodepth: [1, 8, 32]
  numjobs: [1, 2]
  binding: [local, none, remote]
repeat: 3
"""
#: What a 72-point report may take in a 1,400-px window: figures, the summary, every section folded.
HEIGHT_BUDGET_PX = 9000


def _fake_run(base: Path, text: str) -> Path:
    (base / "m.yaml").write_text(text.format(target=base / "target.dat"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(base / "state"))
        result = run(load_matrix(base / "m.yaml"), out=base / "r", executor=FakeFio())
    return result.run_dir


@pytest.fixture(scope="module")
def demo72(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """72 point-runs (fio's output stood in for), 36 of them skipped: remote binding needs a second node."""
    return _fake_run(tmp_path_factory.mktemp("demo72"), DEMO72)


@pytest.mark.fio
def test_a_72_point_report_fits_a_1400_px_window_in_chromium(demo72: Path, tmp_path: Path) -> None:
    report = write_report(demo72, tmp_path / "out")
    page = report.html.read_text()
    found = measure(report.html, tmp_path)
    assert found["scrollWidth"] <= found["clientWidth"], f"wider than the window: {found['wide']}"
    assert found["images"] == len(report.figures) >= 3 and found["broken"] == []
    assert found["errors"] == []
    assert found["height"] <= HEIGHT_BUDGET_PX, f"{found['height']} px tall"
    # Per-point tables are folded, and one note is written once, not once per point.
    assert page.count("<details") >= 3
    assert max(page.count(line) for line in re.findall(r"note: [^<]{20,}", page) or [""]) <= 1


@pytest.mark.fio
def test_skipped_points_are_counted_once_each_and_never_as_not_finished(demo72: Path, tmp_path: Path) -> None:
    page = write_report(demo72, tmp_path / "out").html.read_text()
    header = page.split('<p class="counts">')[1].split("</p>")[0]
    # 108 point-runs planned: 12 remote points skipped (36 runs), 12 `none` points the same as `local`.
    assert "ok: 36 runs" in header and "skipped: 12 points" in header
    assert "same as another here (run once): 12 points" in header and "108" not in header
    assert "Points that did not finish ok" not in page
    skipped = page.split("<h3>Points skipped</h3>")[1].split("</table>")[0]
    assert "binding remote needs a second NUMA node" in skipped and '<td class="num">12</td>' in skipped


@pytest.mark.fio
def test_a_run_whose_only_axis_is_binding_gets_a_report_with_its_figures(tmp_path: Path) -> None:
    only_binding = re.sub(r"  (bs|iodepth|numjobs): .*\n", "", DEMO72)
    run_dir = _fake_run(tmp_path, only_binding)
    result = runner.invoke(app, ["report", str(run_dir), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "out" / "report.html").read_text()
    # On one NUMA node `none` is `local` run once and `remote` is skipped: one binding ran, and the
    # figures that contrast bindings are left out saying why, never the end of the report.
    assert "<h2>Matrix</h2>" in page and 'alt="' in page
    assert "local-vs-remote" not in re.findall(r'alt="([^"]+)"', page)


@pytest.mark.fio
def test_a_figure_that_does_not_fit_is_left_out_with_why_and_the_rest_is_written(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from iobench.plots import figures

    drawn = figures.figure_builders

    def one_refused(frame: pd.DataFrame, telemetry: pd.DataFrame | None = None) -> dict[str, object]:
        def refuse() -> None:
            raise PlotOptionError("heatmap", "hue", "numjobs", "is x already", ["iodepth"])

        return {**drawn(frame, telemetry), "heatmap-iops": refuse}

    monkeypatch.setattr(figures, "figure_builders", one_refused)
    report = write_report(run_dir, tmp_path / "out")
    page = report.html.read_text()
    assert "heatmap-iops" not in [p.stem for p in report.figures] and 'alt="sweep-iodepth"' in page
    left_out = page.split('<ul class="left-out">')[1].split("</ul>")[0]
    assert "<code>heatmap-iops</code>" in left_out and "is x already" in left_out
    assert "<h2>Summary</h2>" in page and "<h2>Matrix</h2>" in page


@pytest.mark.fio
def test_summary_csv_says_which_points_a_validity_check_doubts(demo72: Path, tmp_path: Path) -> None:
    report = write_report(demo72, tmp_path / "out")
    table = pd.read_csv(report.summary, keep_default_na=False)
    frame = load(demo72)
    assert {"validity", "validity_judged"} <= set(table.columns)
    for point, codes in zip(table["point"], table["validity"], strict=True):
        rows = frame[frame["point"] == point]
        found = {c for text in rows["validity"].dropna() for c in str(text).split()}
        assert set(str(codes).split()) == found


@pytest.mark.fio
def test_report_page_is_self_contained_with_every_figure_and_the_summary(
    run_dir: Path, tmp_path: Path
) -> None:
    report = write_report(run_dir, tmp_path / "out", formats=["png", "svg"])
    page = report.html.read_text()
    names = sorted(p.stem for p in report.figures)
    assert {"heatmap-iops", "sweep-iodepth"} <= set(names)
    assert [p.suffix for p in report.figures] == [".png", ".svg"] * (len(report.figures) // 2)
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)
    assert sorted(alt for alt, _ in images) == sorted(set(names))
    assert all(base64.b64decode(data).startswith(b"\x89PNG") for _, data in images)
    assert not re.search(r'(src|href)="(?!data:)', page), "the page must not load anything from outside"
    summary = page.split("<h2>Summary</h2>")[1].split("<h2>")[0]
    assert summary.count('<tr class="') == 4 and "± " in summary
    assert "fio-3" in page and "nulltest" in page and "iodepth: [1, 4]" in page


@pytest.mark.fio
def test_report_lists_points_that_did_not_run(run_dir: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(run_dir, tmp_path / "run"))
    meta_path = next(copy.glob("points/0001-r1/meta.json"))
    meta = json.loads(meta_path.read_text())
    meta.update(status="failed", reason="fio exited with status 1: boom")
    meta_path.write_text(json.dumps(meta))
    (copy / "results.parquet").unlink()
    page = write_report(copy).html.read_text()
    problems = page.split("Points that did not finish ok")[1]
    assert "<td>1</td><td>1</td><td>failed</td><td>fio exited with status 1: boom</td>" in problems


@pytest.mark.fio
def test_summary_csv_is_summarize_of_the_run_and_the_table_shows_its_numbers(
    run_dir: Path, tmp_path: Path
) -> None:
    report = write_report(run_dir, tmp_path / "out")
    frame = load(run_dir)
    summary = with_validity(summarize(frame), frame)
    assert report.summary == tmp_path / "out" / "summary.csv"
    assert report.summary.read_text() == summary.to_csv(index=False)
    assert {"point", "iodepth", "numjobs", "direction", "n", "iops_mean", "iops_ci95", "pct_exact"} <= set(
        pd.read_csv(report.summary).columns
    )
    table = report.html.read_text().split("<h2>Summary</h2>")[1].split("<h2>")[0]
    rows = re.findall(r'<tr class="[^"]*">(.*?)</tr>', table, re.DOTALL)
    assert len(rows) == len(summary) == 4
    for html_row, (_, row) in zip(rows, summary.sort_values("point").iterrows(), strict=True):
        cells = re.findall(r'<td class="num">([^<]*)</td>', html_row)
        n, iops = cells[:2]
        assert int(n) == row["n"] == 2
        assert iops == f"{row['iops_mean']:,.0f} ± {row['iops_ci95']:,.0f}"
    # Percentiles that are not fio's own are flagged on the page, never silently shown.
    assert ("approx. percentiles" in table) == bool(summary["pct_exact"].eq(False).any())


@pytest.mark.fio
def test_user_text_on_the_page_is_escaped(run_dir: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(run_dir, tmp_path / "run"))
    matrix = copy / "matrix.yaml"
    matrix.write_text(
        matrix.read_text().replace(
            "name: nulltest\n", "name: nulltest\ndescription: <script>alert(1)</script>\n"
        )
    )
    meta_path = copy / "points" / "0001-r1" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta.update(status="failed", reason="fio: <script>boom()</script> & more")
    meta_path.write_text(json.dumps(meta))
    (copy / "results.parquet").unlink()
    frame = load(copy)
    frame["target"] = "/data/<b>target</b>.dat"
    frame["jobname"] = "<script>job</script>"
    save_frame(RunDir(copy), frame)
    page = write_report(copy, tmp_path / "out").html.read_text()
    assert "<script" not in page and "<b>" not in page
    assert '<p class="sub">&lt;script&gt;alert(1)&lt;/script&gt;</p>' in page
    assert "<td>fio: &lt;script&gt;boom()&lt;/script&gt; &amp; more</td>" in page
    assert "<td>/data/&lt;b&gt;target&lt;/b&gt;.dat</td>" in page
    assert "description: &lt;script&gt;alert(1)&lt;/script&gt;" in page.split("<h2>Matrix</h2>")[1]


def test_report_of_a_folder_that_is_no_run_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="run directory"):
        write_report(tmp_path)
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output


@pytest.mark.fio
@pytest.mark.parametrize("suffix", ["png", "svg", "pdf"])
def test_plot_writes_the_format_its_name_asks_for(run_dir: Path, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"qd.{suffix}"
    result = runner.invoke(
        app, ["plot", str(run_dir), "line", "--x", "iodepth", "--hue", "numjobs", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    magic = {"png": b"\x89PNG", "svg": b"<?xml", "pdf": b"%PDF"}[suffix]
    assert out.read_bytes().startswith(magic)


@pytest.mark.fio
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bars"], "unknown figure kind 'bars'"),
        (["latency", "--x", "iodepth"], "x 'iodepth' cannot be chosen here: x is the percentile"),
        (
            ["line", "--x", "queue_depth"],
            "x 'queue_depth' is no column of these points; x takes iodepth, numjobs",
        ),
        (["line", "--y", "target"], "y 'target' is a category, not a metric; y takes iops"),
        (["line", "--hue", "iops"], "hue 'iops' is a metric, not a category; hue takes iodepth, numjobs"),
        (["heatmap", "--y", "iops"], "cannot tell the figure format"),
    ],
)
def test_plot_mistakes_exit_2_and_write_nothing(
    run_dir: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    suffix = ".txt" if "heatmap" in args else ".png"
    out = tmp_path / f"figure{suffix}"
    result = runner.invoke(app, ["plot", str(run_dir), *args, "-o", str(out)])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split()) and "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.fio
def test_plot_reads_a_parsed_frame_file(run_dir: Path, tmp_path: Path) -> None:
    outputs = sorted(str(p) for p in run_dir.glob("points/*/fio*.json"))
    frame_file = tmp_path / "parsed.parquet"
    assert runner.invoke(app, ["parse", *outputs, "-o", str(frame_file)]).exit_code == 0
    out = tmp_path / "lat.png"
    result = runner.invoke(app, ["plot", str(frame_file), "latency", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0


@pytest.mark.fio
def test_loaded_frames_carry_the_machine_for_captions(run_dir: Path) -> None:
    machine = load(run_dir).attrs["machine"]
    assert machine["fio_version"].startswith("fio-") and machine["kernel"]
    assert "topology" not in machine

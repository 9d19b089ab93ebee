"""The history store, its series, and change points found, explained, and never invented."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner, Result

from iobench.answers import history
from iobench.answers.changepoints import change_points, noise
from iobench.cli.commands import app
from iobench.errors import HistoryError


def cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


# --- change points --------------------------------------------------------------------------


def _step_series(
    seed: int, runs: int = 40, step: float = 0.10, noise_cv: float = 0.02
) -> tuple[np.ndarray, int]:
    rng = np.random.default_rng(seed)
    at = int(rng.integers(5, runs - 4))
    values = rng.normal(1000, 1000 * noise_cv, runs)
    values[at:] *= 1 + step
    return values, at


def _found(values: np.ndarray) -> list[int]:
    return [cp.index for cp in change_points(values, min_magnitude=history.NOISE_FACTOR * noise(values))]


def test_a_ten_percent_step_in_two_percent_noise_is_found_within_one_run() -> None:
    hits = 0
    for seed in range(100):
        values, at = _step_series(seed)
        hits += any(abs(index - at) <= 1 for index in _found(values))
    assert hits >= 90


def test_fifty_runs_where_nothing_changed_report_no_change() -> None:
    invented = [seed for seed in range(200) if _found(np.random.default_rng(seed).normal(1000, 20, 50))]
    assert invented == []


def test_no_change_is_reported_below_the_smallest_change_its_series_can_show() -> None:
    # Steps of 0-10 % in 2 % noise: whatever is found moves the mean by at least three times the
    # series' own noise, the smallest change the series states it can show.
    for seed in range(60):
        values, _ = _step_series(seed, step=seed / 600)
        floor = history.NOISE_FACTOR * noise(values)
        found = change_points(values, min_magnitude=floor)
        assert all(abs(cp.change) >= floor for cp in found), seed


def test_two_steps_are_two_change_points_with_the_means_between_them() -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.normal(100, 1, 20), rng.normal(120, 1, 20), rng.normal(90, 1, 20)])
    found = change_points(values, min_magnitude=0.05)
    assert [cp.index for cp in found] == [20, 40]
    assert found[0].before == pytest.approx(100, rel=0.02) and found[0].after == pytest.approx(120, rel=0.02)
    assert found[1].change == pytest.approx(90 / 120 - 1, abs=0.02)


def test_the_noise_of_a_series_is_not_inflated_by_its_steps() -> None:
    values, _ = _step_series(3, runs=60, step=0.5)
    assert noise(values) == pytest.approx(0.02, rel=0.35)


# --- the store, with rows made here ---------------------------------------------------------


def _rows(
    run: int, *, matrix: str = "nightly", kernel: str = "6.1", iops: float | None = None, series: int = 2
) -> history.RunRows:
    key = f"k{run:05d}"
    frame = pd.DataFrame(
        {
            "run_key": key,
            "run_id": f"{matrix}-{run:05d}",
            "started": f"2026-01-01T00:00:00+00:00#{run:05d}",
            "series": [f"s{i}" for i in range(series)],
            "point": [f"bs={4 * (i + 1)}k" for i in range(series)],
            "host": "",
            "direction": "read",
            "n": 3,
            "key": "{}",
            "events": json.dumps({"kernel": kernel}, sort_keys=True),
            "volatile": json.dumps({"hostname": f"h{run}"}),
            "iops": [iops if iops is not None else 1000.0 + i for i in range(series)],
            "bw_bytes": 4096.0,
            "lat_mean_us": 100.0,
            "clat_p99_us": 300.0,
        }
    )
    return history.RunRows(key, f"{matrix}-{run:05d}", matrix, frame)


def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_adding_a_run_twice_changes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert history.add_rows(store, [_rows(1), _rows(2)]) == ["k00001", "k00002"]
    before = _listing(store)
    assert history.add_rows(store, [_rows(2), _rows(1)]) == []
    assert _listing(store) == before
    frame = history.load(store)
    assert len(frame) == 4 and sorted(set(frame["run_id"])) == ["nightly-00001", "nightly-00002"]


def test_many_adds_are_merged_into_few_files_and_every_row_is_kept_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    runs = history.PARTS_PER_SEGMENT * 2 + 5
    for run in range(runs):
        history.add_rows(store, [_rows(run)])
    files = history.open_store(store).files()
    assert len(files) < history.PARTS_PER_SEGMENT + history.SEGMENTS_PER_BASE
    frame = history.load(store)
    assert len(frame) == 2 * runs and not frame.duplicated(["run_key", "series"]).any()
    one = history.load(store, series="s1")
    assert set(one["series"]) == {"s1"} and len(one) == runs


def test_rows_written_before_a_crash_kept_their_key_are_not_doubled(tmp_path: Path) -> None:
    store = tmp_path / "store"
    history.add_rows(store, [_rows(1)])
    (store / "keys.txt").write_text("")  # the crash: the part is in place, its key never written
    assert history.add_rows(store, [_rows(1)]) == ["k00001"]
    assert len(history.load(store)) == 2


def test_concurrent_adds_from_several_processes_each_land_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    history.add_rows(store, [_rows(0)])
    code = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[3])
        from test_history import _rows
        from iobench.answers import history
        first = int(sys.argv[2])
        for run in range(first, first + 20):
            history.add_rows(sys.argv[1], [_rows(run)])
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(store), str(first), str(Path(__file__).parent)], env=env
        )
        for first in (1, 21, 41, 61)
    ]
    assert [w.wait(timeout=120) for w in workers] == [0, 0, 0, 0]
    frame = history.load(store)
    assert sorted(set(frame["run_key"])) == [f"k{run:05d}" for run in range(81)]
    assert not frame.duplicated(["run_key", "series"]).any()


def test_a_folder_that_is_not_a_store_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"meow")
    with pytest.raises(HistoryError, match="not a history store"):
        history.add_rows(folder, [_rows(1)])
    assert _listing(folder) == {"cat.jpg": b"meow"}
    with pytest.raises(HistoryError, match="no history store here"):
        history.load(tmp_path / "missing")


def test_a_store_written_by_a_newer_iobench_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    history.add_rows(store, [_rows(1)])
    marker = json.loads((store / history.MARKER).read_text())
    (store / history.MARKER).write_text(json.dumps({**marker, "version": history.VERSION + 1}))
    before = _listing(store)
    with pytest.raises(HistoryError, match="newer iobench"):
        history.add_rows(store, [_rows(2)])
    with pytest.raises(HistoryError, match="newer iobench"):
        history.changes(store)
    assert _listing(store) == before


def test_a_run_of_another_matrix_is_refused_and_nothing_of_its_batch_is_added(tmp_path: Path) -> None:
    store = tmp_path / "store"
    history.add_rows(store, [_rows(1)])
    before = _listing(store)
    with pytest.raises(HistoryError, match="one matrix's history.*'other'"):
        history.add_rows(store, [_rows(2), _rows(3, matrix="other")])
    assert _listing(store) == before
    with pytest.raises(HistoryError, match="'other'"):
        history.check_store(store, "other")
    history.check_store(store, "nightly")
    history.check_store(tmp_path / "new", "anything")


def test_a_change_is_found_in_its_series_and_explained_by_the_event_around_it(tmp_path: Path) -> None:
    store = tmp_path / "store"
    rng = np.random.default_rng(11)
    batch = []
    for run in range(30):
        kernel = "6.1.0" if run < 15 else "6.6.0"
        level = 1000.0 if run < 15 else 1200.0
        rows = _rows(run, kernel=kernel, series=1)
        rows.rows["iops"] = level * (1 + rng.normal(0, 0.02))
        batch.append(rows)
    history.add_rows(store, batch)
    found = history.changes(store)
    iops = found[found["metric"] == "iops"]
    assert len(iops) == 1
    change = iops.iloc[0]
    assert change["run_id"] == "nightly-00015" and change["explained_by"] == "kernel 6.1.0 → 6.6.0"
    assert change["change_pct"] == pytest.approx(20, abs=4)
    assert found[found["metric"] != "iops"].empty  # the other metrics did not move
    table = history.noise_table(store)
    row = table[table["metric"] == "iops"].iloc[0]
    assert row["runs"] == 30 and row["smallest_change_pct"] == pytest.approx(3 * row["noise_pct"])


def test_unexplained_changes_come_first(tmp_path: Path) -> None:
    store = tmp_path / "store"
    rng = np.random.default_rng(5)
    batch = []
    for run in range(30):
        rows = _rows(run, kernel="6.1" if run < 10 else "6.6", series=2)
        rows.rows.loc[0, "iops"] = (1000 if run < 10 else 1500) * (1 + rng.normal(0, 0.01))
        rows.rows.loc[1, "iops"] = (1000 if run < 20 else 800) * (1 + rng.normal(0, 0.01))
        batch.append(rows)
    history.add_rows(store, batch)
    iops = history.changes(store).query("metric == 'iops'")
    assert iops["explained_by"].tolist() == ["", "kernel 6.1 → 6.6"]
    assert iops["series"].tolist() == ["s1", "s0"]


def test_the_figure_marks_each_change_point_and_puts_every_series_as_a_ratio(tmp_path: Path) -> None:
    from iobench.plots.overruns import history_figure

    store = tmp_path / "store"
    batch = []
    for run in range(20):
        rows = _rows(run, kernel="a" if run < 10 else "b", series=2)
        rows.rows.loc[0, "iops"] = 1000.0 + (run % 3) + (400 if run >= 10 else 0)
        batch.append(rows)
    history.add_rows(store, batch)
    fig = history_figure(history.load(store), history.changes(store))
    axes = [a for a in fig.axes if a.get_visible()]
    assert len(axes) == 3
    first, ratio = axes[0], axes[-1]
    dashed = [line for line in first.get_lines() if line.get_linestyle() == "--"]
    assert [line.get_xdata()[0] for line in dashed] == [9.5]
    assert any("kernel a → b" in text.get_text() for text in first.texts)
    ratios = [line.get_ydata() for line in ratio.get_lines() if len(line.get_ydata()) == 20]
    assert len(ratios) == 2 and all(r[0] == pytest.approx(1.0) for r in ratios)


# --- real runs ------------------------------------------------------------------------------

MATRIX = """\
version: 1
name: nightly
targets:
  - path: {target}
    size: 8M
fio:
  ioengine: psync
  rw: randread
  runtime: 1
  time_based: 1
matrix:
  bs: [4k]
repeat: 2
"""


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory, _cache_dir: Path) -> list[Path]:
    from iobench.matrix.model import load_matrix
    from iobench.runner.sweep import NullProgress, run

    base = tmp_path_factory.mktemp("history")
    matrix = base / "nightly.yaml"
    matrix.write_text(MATRIX.format(target=base / "t.dat"))
    runs = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(base / "state"))
        patch.setenv("XDG_CACHE_HOME", str(_cache_dir))
        for _ in range(2):
            result = run(load_matrix(matrix), out=base / "results", progress=NullProgress())
            assert result.exit_code == 0, result.counts
            runs.append(result.run_dir)
    return runs


@pytest.mark.fio
def test_runs_of_one_machine_join_one_series_whatever_its_hostname(
    two_runs: list[Path], tmp_path: Path
) -> None:
    renamed = tmp_path / "renamed"
    shutil.copytree(two_runs[1], renamed)
    manifest = json.loads((renamed / "manifest.json").read_text())
    manifest["machine"]["host"] = "another-name"
    manifest["machine"]["kernel"] = "9.9.9"
    (renamed / "manifest.json").write_text(json.dumps(manifest))
    first, second = history.run_rows(two_runs[0]).rows, history.run_rows(renamed).rows
    assert first["series"].tolist() == second["series"].tolist()
    assert json.loads(second["events"].iloc[0])["kernel"] == "9.9.9"
    assert json.loads(second["volatile"].iloc[0])["hostname"] == "another-name"
    key = json.loads(first["key"].iloc[0])
    assert key["workload"]["params"] == {"bs": 4096} and key["workload"]["fio"]["ioengine"] == "psync"
    assert "another-name" not in first["key"].iloc[0] + second["key"].iloc[0]


@pytest.mark.fio
def test_adding_runs_by_the_command_line_twice_adds_them_once(two_runs: list[Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    done = cli("history", "add", "--store", str(store), *map(str, two_runs))
    assert done.exit_code == 0 and "2 runs added" in done.output, done.output
    again = cli("history", "add", "--store", str(store), str(two_runs[0]))
    assert again.exit_code == 0 and "0 runs added" in again.output and "1 already there" in again.output
    frame = history.load(store)
    assert len(frame) == 2 and frame["run_id"].tolist() == [p.name for p in two_runs]
    shown = cli("history", "changes", "--store", str(store), "--json")
    assert shown.exit_code == 0 and json.loads(shown.output) == []
    drawn = cli("history", "plot", "--store", str(store), "-o", str(tmp_path / "h.png"))
    assert drawn.exit_code == 0 and (tmp_path / "h.png").stat().st_size > 0
    page = cli("report", str(two_runs[1]), "-o", str(tmp_path / "page"), "--history", str(store))
    assert page.exit_code == 0, page.output
    assert 'alt="history"' in (tmp_path / "page" / "report.html").read_text()
    elsewhere = cli(
        "report", str(two_runs[1]), "-o", str(tmp_path / "none"), "--history", str(tmp_path / "new")
    )
    assert elsewhere.exit_code == 2 and "no history store" in elsewhere.output


@pytest.mark.fio
def test_an_incomplete_or_damaged_run_is_refused_and_nothing_is_added(
    two_runs: list[Path], tmp_path: Path
) -> None:
    cut = tmp_path / "cut"
    shutil.copytree(two_runs[0], cut)
    shutil.rmtree(sorted((cut / "points").iterdir())[-1])
    (cut / "results.parquet").unlink()
    damaged = tmp_path / "damaged"
    shutil.copytree(two_runs[1], damaged)
    next((damaged / "points").glob("*/fio.json")).write_text("{ not json")
    (damaged / "results.parquet").unlink()
    store = tmp_path / "store"
    done = cli("history", "add", "--store", str(store), str(cut), str(damaged))
    assert done.exit_code == 2
    assert "not complete" in done.output and "damaged" in done.output and "nothing was added" in done.output
    assert not store.exists()


@pytest.mark.fio
def test_run_with_history_adds_the_run_and_a_bad_store_refuses_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(request.getfixturevalue("_cache_dir")))
    matrix = tmp_path / "nightly.yaml"
    matrix.write_text(MATRIX.format(target=tmp_path / "t.dat"))
    not_a_store = tmp_path / "photos"
    not_a_store.mkdir()
    (not_a_store / "cat.jpg").write_bytes(b"meow")
    refused = cli("run", str(matrix), "--out", str(tmp_path / "out"), "--history", str(not_a_store))
    assert refused.exit_code == 2 and "not a history store" in refused.output
    assert not (tmp_path / "out").exists()
    store = tmp_path / "store"
    done = cli("run", str(matrix), "--out", str(tmp_path / "out"), "--history", str(store), "-q")
    assert done.exit_code == 0, done.output
    (run_dir,) = (tmp_path / "out").iterdir()
    assert history.load(store)["run_id"].tolist() == [run_dir.name]

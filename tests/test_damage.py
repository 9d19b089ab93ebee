"""Damaged, copied, half-synced and killed runs: every point on disk accounted for, nothing hidden, no traceback.

Every test damages a copy of one real run (fio's null engine, 2 iodepths × 2
numjobs × 2 repeats = 8 point-runs) the way run directories get damaged when
they are copied, synced, read while their sweep runs, or killed: and checks
what ``iobench.load``, ``iobench report``, ``iobench compare`` and ``iobench
plot`` say. The CLI exits 0, 2 (bad input) or 3 (environment), never with a
traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from conftest import NULL_MATRIX
from typer.testing import CliRunner, Result

import iobench
from iobench.cli.commands import app
from iobench.errors import ResultsError, SafetyError
from iobench.results.loading import RunWarning
from iobench.results.points import summarize
from iobench.store.rundir import RunDir

pytestmark = pytest.mark.fio
runner = CliRunner()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("damage")
    (base / "m.yaml").write_text(NULL_MATRIX.format(target=base / "target.dat") + "repeat: 2\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(base / "state"))
        result = iobench.run(iobench.load_matrix(base / "m.yaml"), out=base / "r")
    assert result.counts == {"ok": 8}
    return result.run_dir


@pytest.fixture
def copy(real_run: Path, tmp_path: Path) -> Path:
    """A copy of the real run that keeps its files' times (as ``cp -a`` and ``rsync -a`` do)."""
    target = tmp_path / real_run.name
    shutil.copytree(real_run, target)
    return target


def cli(*args: object) -> Result:
    """``iobench ARGS`` in this process; fails the test on a traceback."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


def rows_of(frame: pd.DataFrame, point: int, repeat: int) -> pd.DataFrame:
    return frame[frame["point"].eq(point) & frame["repeat"].eq(repeat)]


def no_ok_row_without_numbers(frame: pd.DataFrame) -> bool:
    return not (frame["status"].eq("ok") & frame["direction"].notna() & frame["iops"].isna()).any()


def test_a_copy_that_kept_its_times_keeps_its_cache_and_is_complete(copy: Path) -> None:
    frame = iobench.load(copy)  # no RunWarning (they are errors here)
    assert frame.attrs["notes"] == []
    run = frame.attrs["run"]
    assert run["complete"] and (run["planned"], run["done"], run["missing"]) == (8, 8, 0)
    assert run["saved"] == {"ok": 8} and not run["running"]


FIO_DAMAGE: dict[str, tuple[Callable[[str], str], str]] = {
    "truncated": (lambda text: text[: len(text) // 2], "not fio output"),
    "empty": (lambda text: "", "empty"),
    "text": (lambda text: "this is not what fio wrote\n", "not fio output"),
}


@pytest.mark.parametrize("damage", sorted(FIO_DAMAGE))
def test_an_unreadable_fio_output_makes_its_point_damaged_naming_the_file(
    copy: Path, real_run: Path, damage: str
) -> None:
    output = copy / "points" / "0002-r1" / "fio.json"
    rewrite, words = FIO_DAMAGE[damage]
    output.write_text(rewrite(output.read_text()))
    with pytest.warns(RunWarning, match="1 point-run damaged") as said:
        frame = iobench.load(copy)
    assert "results.parquet is out of date: 1 point changed (0002-r1)" in str(said[0].message)
    damaged = rows_of(frame, 2, 1)
    assert damaged["status"].tolist() == ["damaged"]
    assert damaged["reason"].iloc[0].startswith(f"{output}: {words}")
    assert damaged["iodepth"].tolist() == rows_of(frame, 2, 2)["iodepth"].unique().tolist()
    assert no_ok_row_without_numbers(frame)
    assert summarize(frame).set_index("point")["n"].to_dict() == {1: 2, 2: 1, 3: 2, 4: 2}
    assert frame.attrs["run"]["saved"] == {"damaged": 1, "ok": 7}
    assert (frame.attrs["run"]["done"], frame.attrs["run"]["missing"]) == (7, 1)

    shown = cli("report", copy, "-o", copy / "report")
    assert shown.exit_code == 0
    assert "1 point-run damaged" in shown.output and str(output) in shown.output
    page = (copy / "report" / "report.html").read_text()
    assert "damaged: 1" in page and "ok: 7" in page and f"{output}: {words}" in page
    compared = cli("compare", real_run, copy)
    assert compared.exit_code == 0
    assert "B:" in compared.output and "1 point-run damaged" in compared.output


@pytest.mark.parametrize("damage", ["fio.json", "meta.json"])
def test_the_command_given_runs_a_damaged_point_again(real_run: Path, copy: Path, damage: str) -> None:
    (copy / "points" / "0002-r1" / damage).write_text("")
    said = " ".join(cli("report", copy, "-o", copy / "report").output.split())
    argv = shlex.split(said.split("to finish: `")[1].split("`")[0])
    # As the same user would: its state (the created-files registry) knows the target it made.
    same_user = {**os.environ, "XDG_STATE_HOME": str(real_run.parents[1] / "state")}
    resumed = subprocess.run(
        [sys.executable, "-m", "iobench", *argv[1:], "--quiet"],
        capture_output=True,
        text=True,
        check=False,
        env=same_user,
    )
    assert resumed.returncode == 0, resumed.stderr
    frame = iobench.load(copy)  # complete and whole again: no warning
    assert frame["status"].eq("ok").all() and len(frame.drop_duplicates(["point", "repeat"])) == 8


def test_a_point_without_its_record_is_a_damaged_row(copy: Path) -> None:
    (copy / "points" / "0003-r2" / "meta.json").unlink()
    with pytest.warns(RunWarning, match="meta.json: missing"):
        frame = iobench.load(copy)
    damaged = rows_of(frame, 3, 2)
    assert damaged["status"].tolist() == ["damaged"]
    assert (
        damaged["reason"].iloc[0]
        == f"{copy / 'points' / '0003-r2' / 'meta.json'}: missing (the point's record)"
    )
    sibling = rows_of(frame, 3, 1).iloc[0]
    assert (damaged["iodepth"].iloc[0], damaged["numjobs"].iloc[0]) == (
        sibling["iodepth"],
        sibling["numjobs"],
    )
    assert len(frame.drop_duplicates(["point", "repeat"])) == 8  # none dropped
    assert frame.attrs["run"]["missing"] == 1


def test_a_truncated_record_is_a_damaged_row_naming_the_file(copy: Path) -> None:
    meta = copy / "points" / "0001-r1" / "meta.json"
    meta.write_text(meta.read_text()[:100])
    with pytest.warns(RunWarning, match="damaged"):
        frame = iobench.load(copy)
    reason = rows_of(frame, 1, 1)["reason"].iloc[0]
    assert reason.startswith(f"{meta}: truncated or not JSON")
    assert rows_of(frame, 1, 1)["status"].tolist() == ["damaged"]


def test_a_run_whose_points_folder_is_gone_says_so_and_claims_no_ok_point(copy: Path) -> None:
    shutil.rmtree(copy / "points")
    with pytest.warns(RunWarning, match="incomplete: 0 of 8 point-runs done, 8 missing"):
        frame = iobench.load(copy)
    assert (
        frame.empty and frame.attrs["notes"][-1] == f"{copy / 'points'} is missing: no point-run is on disk"
    )
    shown = cli("report", copy, "-o", copy / "report")
    assert shown.exit_code == 0
    said = " ".join(shown.output.split())
    assert "incomplete: 0 of 8 point-runs done, 8 missing; its points folder is gone" in said
    assert re.search(rf"to finish: `iobench run \S+\.yaml --resume {re.escape(str(copy))}`", said)
    page = (copy / "report" / "report.html").read_text()
    assert "ok: 8" not in page and "No point finished ok" in page and "Incomplete run" in page


def test_a_frame_cache_that_cannot_be_read_is_rebuilt_with_a_note(copy: Path, real_run: Path) -> None:
    (copy / "results.parquet").write_bytes(b"PAR1 this is no parquet file")
    with pytest.warns(RunWarning, match=r"results.parquet cannot be read \(.*\): rebuilt from the points"):
        frame = iobench.load(copy)
    assert frame["status"].eq("ok").all() and len(frame.drop_duplicates(["point", "repeat"])) == 8
    iobench.load(copy)  # saved again: no note the second time
    for args in (
        ("report", copy, "-o", copy / "report"),
        ("plot", copy, "heatmap", "-o", copy / "h.png"),
        ("compare", real_run, copy),
    ):
        (copy / "results.parquet").write_bytes(b"garbage")
        result = cli(*args)
        assert result.exit_code == 0, result.output
        assert "results.parquet cannot be read" in result.output


def test_an_unreadable_telemetry_file_gives_na_and_a_note(copy: Path) -> None:
    samples = copy / "points" / "0001-r1" / "telemetry.parquet"
    samples.write_bytes(b"not parquet at all")
    with pytest.warns(RunWarning, match="supporting files that cannot be read"):
        frame = iobench.load(copy)
    bad = rows_of(frame, 1, 1)
    assert bad["status"].eq("ok").all() and bad["iops"].notna().all()
    assert bad["cpu_busy_pct"].isna().all() and bad["telemetry_note"].str.startswith(str(samples)).all()
    assert rows_of(frame, 1, 2)["cpu_busy_pct"].notna().all()
    samples_frame = iobench.telemetry(copy)
    assert samples_frame.attrs["notes"][0].startswith(str(samples))
    assert set(samples_frame["point"]) == {1, 2, 3, 4}
    assert cli("report", copy, "-o", copy / "report").exit_code == 0


def test_an_unreadable_fio_log_leaves_steady_na_with_a_note(copy: Path) -> None:
    log = copy / "points" / "0002-r2" / "target.dat_clat.1.log"
    log.write_text("this, is, no\nfio log at all\n")
    with pytest.warns(RunWarning, match="supporting files that cannot be read"):
        frame = iobench.load(copy)
    reason = rows_of(frame, 2, 2)["steady_reason"].iloc[0]
    assert reason.startswith(f"not judged: {log}:")
    assert rows_of(frame, 2, 2)["steady"].isna().all() and rows_of(frame, 2, 2)["status"].eq("ok").all()
    assert cli("report", copy, "-o", copy / "report").exit_code == 0
    assert str(log) in iobench.timeseries(copy).attrs["notes"][0]


def test_a_copied_point_directory_is_an_error_naming_both(copy: Path, real_run: Path) -> None:
    shutil.copytree(copy / "points" / "0001-r1", copy / "points" / "0001-r1 (copy)")
    with pytest.raises(
        ResultsError, match=r"two directories hold point-run 0001-r1: 0001-r1 and 0001-r1 \(copy\)"
    ):
        iobench.load(copy)
    with pytest.raises(ResultsError, match="two directories hold point-run 0001-r1"):
        iobench.telemetry(copy)  # not counted twice
    for args in (
        ("report", copy),
        ("compare", real_run, copy),
        ("plot", copy, "heatmap", "-o", copy / "h.png"),
    ):
        result = cli(*args)
        assert result.exit_code == 2 and "0001-r1 (copy)" in result.output


def test_a_frame_saved_before_more_points_arrived_is_rebuilt(copy: Path, real_run: Path) -> None:
    """A frame saved while points were missing (mid-sweep, half-synced) stays a cache of those points only."""
    shutil.rmtree(copy / "points" / "0004-r2")
    (copy / "results.parquet").unlink()
    with pytest.warns(RunWarning, match="7 of 8 point-runs done, 1 missing"):
        assert len(iobench.load(copy).drop_duplicates(["point", "repeat"])) == 7
    assert (copy / "results.parquet").is_file()
    shutil.copytree(real_run / "points" / "0004-r2", copy / "points" / "0004-r2")
    with pytest.warns(RunWarning, match=r"out of date: 1 point added \(0004-r2\)"):
        frame = iobench.load(copy)
    assert len(frame.drop_duplicates(["point", "repeat"])) == 8 and frame.attrs["run"]["complete"]


def test_a_frame_is_not_saved_while_a_sweep_runs(copy: Path) -> None:
    (copy / "results.parquet").unlink()
    with RunDir(copy).sweeping():
        with pytest.warns(RunWarning, match="its sweep is still running") as said:
            frame = iobench.load(copy)
        assert "built in memory and not saved" in str(said[0].message)
        assert frame.attrs["run"]["running"] and not (copy / "results.parquet").exists()
        shown = cli("report", copy, "-o", copy / "report")
        assert shown.exit_code == 0 and "still running" in shown.output and "--resume" not in shown.output
    assert not (copy / "results.parquet").exists()
    iobench.load(copy)  # the sweep has ended (its lock is gone): complete, saved
    assert (copy / "results.parquet").is_file()


def test_two_sweeps_of_one_run_directory_are_refused(copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("iobench.store.rundir.SWEEP_LOCK_WAIT_S", 0.2)
    with RunDir(copy).sweeping():
        assert RunDir(copy).sweep_running()
        with pytest.raises(SafetyError, match="another iobench run is sweeping this run directory"):
            with RunDir(copy).sweeping():
                pass
    assert not RunDir(copy).sweep_running()


@pytest.fixture
def killed(null_matrix: Callable[..., Path], tmp_path: Path) -> Path:
    """A real sweep of 8 point-runs killed (SIGKILL, its whole process group) once 3 of them are saved."""
    matrix = null_matrix("repeat: 2\n")
    out = tmp_path / "out"
    child = subprocess.Popen(
        [sys.executable, "-m", "iobench", "run", str(matrix), "--out", str(out), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            saved = [p for p in out.glob("*/points/*") if not p.name.startswith(".")]
            if len(saved) >= 3:
                break
            time.sleep(0.05)
    finally:
        # iobench starts fio in a process group of its own: kill that one too. iobench is stopped first,
        # so that it starts nothing more while its processes are listed.
        os.killpg(child.pid, signal.SIGSTOP)
        groups = {os.getpgid(pid) for pid in _descendants(child.pid)} | {child.pid}
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        child.wait()
    [run_dir] = out.iterdir()
    return run_dir


def _descendants(pid: int) -> list[int]:
    """Every living process under ``pid`` (from /proc's children lists)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with contextlib.suppress(OSError):
                children = [int(c) for c in (task / "children").read_text().split()]
                found += children
                todo += children
    alive = []
    for child in found:
        with contextlib.suppress(ProcessLookupError):
            os.getpgid(child)
            alive.append(child)
    return alive


def test_a_killed_sweep_is_incomplete_and_the_command_given_finishes_it(killed: Path) -> None:
    with pytest.warns(RunWarning, match="its sweep ended without recording an end") as said:
        frame = iobench.load(killed)
    run = frame.attrs["run"]
    assert not run["complete"] and run["planned"] == 8 and run["done"] + run["missing"] == 8
    assert run["done"] == len(frame.drop_duplicates(["point", "repeat"])) >= 3
    assert f"{run['done']} of 8 point-runs done, {run['missing']} missing" in str(said[0].message)
    shown = cli("report", killed, "-o", killed / "report").output.replace("\n", " ")
    command = shown.split("to finish: `")[1].split("`")[0]
    argv = shlex.split(command)
    assert argv[:2] == ["iobench", "run"] and argv[-2:] == ["--resume", str(killed)]
    finished = subprocess.run(
        [sys.executable, "-m", "iobench", *argv[1:], "--quiet"], capture_output=True, text=True, check=False
    )
    assert finished.returncode == 0, finished.stderr
    frame = iobench.load(killed)  # complete: no warning
    assert frame.attrs["run"]["complete"] and len(frame.drop_duplicates(["point", "repeat"])) == 8


def test_report_takes_a_run_directory_and_a_directory_to_write(copy: Path, tmp_path: Path) -> None:
    frame_file = tmp_path / "frame.parquet"
    iobench.load(copy).to_parquet(frame_file)
    given_a_file = cli("report", frame_file)
    assert given_a_file.exit_code == 2
    assert "takes a run directory" in given_a_file.output and "iobench plot" in given_a_file.output
    existing = tmp_path / "taken.html"
    existing.write_text("mine")
    into_a_file = cli("report", copy, "-o", existing)
    assert into_a_file.exit_code == 2 and "a file is there" in into_a_file.output
    assert existing.read_text() == "mine"


def test_compare_into_a_closed_pipe_ends_quietly(copy: Path, real_run: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "iobench", "compare", str(real_run), str(copy)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    with child.stdout, child.stderr:
        child.stdout.readline()
        child.stdout.close()  # as `| head -1` does
        error = child.stderr.read().decode()
    assert child.wait() == 0 and error == ""


def test_a_file_targets_size_is_the_files(copy: Path, real_run: Path) -> None:
    facts = {f["fact"]: f for f in iobench.compare(real_run, copy).attrs["machines"]}
    manifest = json.loads((real_run / "manifest.json").read_text())
    [target] = manifest["machine"]["targets"]
    assert target["kind"] == "file"
    assert facts["target 1 size (bytes)"]["a"] == str(target["size"]) == str(8 * 2**20)
    assert facts["target 1 disk size (bytes)"]["a"] == str(target["disks"][0]["size_bytes"])

"""A run directory someone hands over is input: every shape of it is read in bounded time, never trusted.

Each test shapes a copy of one real run (fio's null engine, 2 points) as a
hostile user could — FIFOs, devices and links where its files are, a table of
millions of rows in a small file, values that TeX or a spreadsheet would
interpret, numbers and nesting no record has, a directory another user owns —
and reads it through the library (``iobench.load``, ``write_report``,
``compare``) and the CLI (``iobench report``, ``compare``, ``plot``,
``plan``). Each must end within :data:`BOUND_S` with a clear message: the
file named with the reason where its numbers would be, or a refusal naming the
path, and nothing written outside the directories iobench may write.
"""

from __future__ import annotations

import csv
import os
import pickle
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import NULL_MATRIX
from typer.testing import CliRunner, Result

import iobench
from iobench.cli.commands import app
from iobench.errors import IobenchError, ResultsError
from iobench.report.page import write_report
from iobench.results.loading import RunWarning
from iobench.store.untrusted import (
    FIO_TEXT,
    MAX_ROWS,
    RECORD,
    UnreadableRunFile,
    csv_cell,
    own_directory,
    read_bytes,
)

pytestmark = pytest.mark.fio
runner = CliRunner()
#: Long enough for any of these reads on a loaded machine; a hang (a FIFO waited on) never ends.
BOUND_S = 120.0


def bounded(call: Callable[[], Any]) -> Any:
    """``call()``'s result; the test fails (instead of hanging) when it has not returned in :data:`BOUND_S`."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    assert not thread.is_alive(), f"still reading after {BOUND_S:.0f} s (a hang)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def cli(*args: object) -> Result:
    """``iobench ARGS`` in this process, bounded in time; fails the test on a traceback."""
    result: Result = bounded(lambda: runner.invoke(app, [str(a) for a in args]))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result


def said(result: Result) -> str:
    return " ".join(result.output.split())


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("hostile")
    (base / "m.yaml").write_text(
        NULL_MATRIX.format(target=base / "target.dat").replace("numjobs: [1, 2]", "numjobs: [1]")
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(base / "state"))
        result = iobench.run(iobench.load_matrix(base / "m.yaml"), out=base / "r")
    assert result.counts == {"ok": 2}
    return result.run_dir


@pytest.fixture
def copy(real_run: Path, tmp_path: Path) -> Path:
    target = tmp_path / real_run.name
    shutil.copytree(real_run, target)
    (target / "results.parquet").unlink()  # every read below is of the points themselves
    return target


def load_quietly(path: Path) -> pd.DataFrame:
    with pytest.warns(RunWarning):
        frame: pd.DataFrame = bounded(lambda: iobench.load(path))
    return frame


def reason_of(frame: pd.DataFrame, point: int) -> str:
    rows = frame[frame["point"].eq(point)]
    assert rows["status"].tolist() == ["damaged"], rows[["status", "reason"]]
    return str(rows["reason"].iloc[0])


# --- special files where a point's files are -------------------------------------------------

SPECIAL: dict[str, Callable[[Path], None]] = {
    "fifo": lambda path: os.mkfifo(path),
    "link to /dev/zero": lambda path: path.symlink_to("/dev/zero"),
    "link to a regular file outside": lambda path: path.symlink_to("/etc/hostname"),
    "directory": lambda path: path.mkdir(),
}


def plant(path: Path, shape: str) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    SPECIAL[shape](path)


@pytest.mark.parametrize("shape", sorted(SPECIAL))
@pytest.mark.parametrize("name", ["fio.json", "meta.json"])
def test_a_special_file_for_a_points_record_or_output_is_a_damaged_point(
    copy: Path, real_run: Path, name: str, shape: str
) -> None:
    planted = copy / "points" / "0001-r1" / name
    plant(planted, shape)
    frame = load_quietly(copy)
    reason = reason_of(frame, 1)
    assert reason.startswith(str(planted)) and ("not a regular file" in reason or "symbolic link" in reason)
    assert frame[frame["point"].eq(2)]["status"].tolist() == ["ok"]
    shown = cli("report", copy, "-o", copy / "report")
    assert shown.exit_code == 0 and str(planted) in said(shown)
    compared = cli("compare", real_run, copy)
    assert compared.exit_code == 0 and "1 point-run damaged" in said(compared)


@pytest.mark.parametrize("shape", ["fifo", "link to /dev/zero"])
@pytest.mark.parametrize("name", ["telemetry.parquet", "stderr.txt", "job.fio", "target.dat_clat.1.log"])
def test_a_special_supporting_file_leaves_na_and_a_note(copy: Path, name: str, shape: str) -> None:
    planted = copy / "points" / "0001-r1" / name
    plant(planted, shape)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        frame = bounded(lambda: iobench.load(copy))
    assert frame["status"].eq("ok").all()
    cells = frame.select_dtypes(include=["object", "string"]).stack().tolist()
    notes = " ".join(str(w.message) for w in warned) + " ".join(map(str, cells))
    if name != "job.fio":  # a job file read for its options only: the options are NA
        assert str(planted) in notes
    if shape == "fifo":
        assert cli("report", copy, "-o", copy / "report").exit_code == 0
    assert bounded(lambda: iobench.telemetry(copy)) is not None
    assert bounded(lambda: iobench.timeseries(copy)) is not None


@pytest.mark.root
def test_a_character_device_node_in_a_point_is_not_read(copy: Path) -> None:
    """A device node itself (no link to follow): ``mknod`` of /dev/zero's numbers as the fio output."""
    planted = copy / "points" / "0001-r1" / "fio.json"
    planted.unlink()
    os.mknod(planted, stat.S_IFCHR | 0o644, os.makedev(1, 5))
    assert "a character device, not a regular file" in reason_of(load_quietly(copy), 1)


@pytest.mark.parametrize("name", ["manifest.json", "matrix.yaml", "results.parquet"])
def test_a_fifo_for_a_run_file_is_refused_or_noted(copy: Path, real_run: Path, name: str) -> None:
    plant(copy / name, "fifo")
    shown = cli("report", copy, "-o", copy / "report")
    compared = cli("compare", real_run, copy)
    if name == "manifest.json":  # nothing is known of the run: refused, naming the file
        for result in (shown, compared):
            assert result.exit_code == 2
            assert f"{copy / name}" in said(result) and "a FIFO, not a regular file" in said(result)
        with pytest.raises(ResultsError, match="a FIFO"):
            bounded(lambda: iobench.load(copy))
    else:
        assert shown.exit_code == 0 and compared.exit_code == 0
    if name == "results.parquet":
        assert "results.parquet cannot be read (a FIFO, not a regular file" in said(shown)


def test_a_link_in_place_of_a_point_directory_is_a_damaged_point(copy: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.move(copy / "points" / "0002-r1", elsewhere)
    (copy / "points" / "0002-r1").symlink_to(elsewhere)
    frame = load_quietly(copy)
    assert "a symbolic link, not a point directory" in reason_of(frame, 2)


# --- contents no run of iobench holds -----------------------------------------------------------


def test_a_matrix_yaml_linked_to_a_private_file_is_not_put_in_the_page(copy: Path, tmp_path: Path) -> None:
    secret = tmp_path / "private.txt"
    secret.write_text("the-secret-words\n")
    secret.chmod(0o600)
    (copy / "matrix.yaml").unlink()
    (copy / "matrix.yaml").symlink_to(secret)
    report = bounded(lambda: write_report(copy, tmp_path / "out"))
    page = report.html.read_text()
    assert "the-secret-words" not in page
    assert "matrix.yaml: a symbolic link" in page


def test_a_telemetry_table_of_too_many_rows_is_not_read(copy: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    samples = copy / "points" / "0001-r1" / "telemetry.parquet"
    rows = MAX_ROWS + 1  # all null: a small file whose footer says millions of rows
    pq.write_table(pa.table({"t_s": pa.nulls(rows, pa.float64())}), samples, row_group_size=rows)
    assert samples.stat().st_size < 1 << 20
    with pytest.warns(RunWarning, match=f"footer says {rows:,} rows"):
        frame = bounded(lambda: iobench.load(copy))
    assert frame["status"].eq("ok").all()
    assert cli("report", copy, "-o", copy / "report").exit_code == 0


def rewrite_meta(copy: Path, change: Callable[[str], str]) -> Path:
    meta = copy / "points" / "0001-r1" / "meta.json"
    meta.write_text(change(meta.read_text()))
    return meta


def test_a_record_with_a_4300_digit_integer_is_a_damaged_point(copy: Path) -> None:
    meta = rewrite_meta(copy, lambda text: text.replace('"point": 1', '"point": 1' + "0" * 4299, 1))
    frame = load_quietly(copy)  # the point number is the long integer: the reason is on a row of its own
    reason = " ".join(frame["reason"].dropna().astype(str))
    assert f"{meta}: cannot read the point record" in reason and "4,300 digits" in reason
    assert cli("report", copy, "-o", copy / "report").exit_code == 0


def test_a_manifest_that_plans_a_4300_digit_count_is_refused(copy: Path) -> None:
    manifest = copy / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"points": 2', '"points": 2' + "0" * 4299, 1))
    result = cli("report", copy, "-o", copy / "report")
    assert result.exit_code == 2 and "4,300 digits" in said(result) and str(manifest) in said(result)


def test_a_record_nested_thousands_deep_is_a_damaged_point(copy: Path) -> None:
    meta = copy / "points" / "0001-r1" / "meta.json"
    meta.write_text("[" * 100_000 + "]" * 100_000)
    assert "nested too deeply" in reason_of(load_quietly(copy), 1)


@pytest.mark.parametrize(
    "text",
    ["a: " + "[" * 3000 + "]" * 3000 + "\n", "description: x\nfio:\n  size: 1" + "0" * 4300 + "\n"],
    ids=["3000-deep", "4301-digit"],
)
def test_a_hostile_matrix_yaml_in_the_run_is_shown_never_a_traceback(
    copy: Path, real_run: Path, text: str
) -> None:
    (copy / "matrix.yaml").write_text(text)
    assert cli("report", copy, "-o", copy / "report").exit_code == 0
    assert cli("compare", real_run, copy).exit_code == 0
    assert cli("compare", copy, real_run).exit_code == 0


def set_param(copy: Path, value: str) -> None:
    for point in ("0001-r1", "0002-r1"):
        meta = copy / "points" / point / "meta.json"
        text = meta.read_text()
        meta.write_text(
            text.replace('"iodepth": 1', f'"iodepth": "{value}1"').replace(
                '"iodepth": 2', f'"iodepth": "{value}2"'
            )
        )


def test_a_tex_value_is_drawn_as_written(copy: Path, tmp_path: Path) -> None:
    set_param(copy, r"$\\frac{$")
    report = bounded(lambda: write_report(copy, tmp_path / "out"))
    assert report.figures, "no figure was drawn"
    frame = bounded(lambda: iobench.load(copy))
    fig = bounded(lambda: iobench.plots.plot(frame, x="iodepth", y="iops"))
    fig.savefig(tmp_path / "drawn.png")


def test_a_formula_in_a_value_is_text_in_every_csv(copy: Path, real_run: Path, tmp_path: Path) -> None:
    formula = '=HYPERLINK(""http://x"",""y"")'
    set_param(copy, formula.replace('"', '\\"'))
    report = bounded(lambda: write_report(copy, tmp_path / "report"))
    assert report.summary is not None
    cells = [cell for row in csv.reader(report.summary.read_text().splitlines()) for cell in row]
    assert any(cell.startswith("'=HYPERLINK") for cell in cells)
    assert not any(cell.startswith(("=", "+", "@")) for cell in cells)
    compared = cli("compare", copy, copy, "-o", tmp_path / "compare")  # the same axes on both sides
    assert compared.exit_code == 0, compared.output
    text = (tmp_path / "compare" / "compare.csv").read_text()
    cells = [cell for row in csv.reader(text.splitlines()) for cell in row]
    assert any(cell.startswith("'=HYPERLINK") for cell in cells)
    assert not any(cell.startswith(("=", "+", "@", "\t", "\r")) for cell in cells)


def test_a_csv_cell_is_text_only_when_it_would_start_a_formula() -> None:
    assert [csv_cell(v) for v in ("=1+1", "+1", "-x", "@SUM(A1)", "\tx", "\rx", "ok", -1.5, 3)] == [
        "'=1+1",
        "'+1",
        "'-x",
        "'@SUM(A1)",
        "'\tx",
        "'\rx",
        "ok",
        -1.5,
        3,
    ]


# --- where iobench writes ------------------------------------------------------------------------


def test_a_report_link_planted_in_the_run_is_not_followed(copy: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (copy / "report").symlink_to(victim)
    result = cli("report", copy)
    assert result.exit_code == 2
    assert f"{copy / 'report'}: a symbolic link" in said(result) and "-o" in said(result)
    assert list(victim.iterdir()) == []
    with pytest.raises(ResultsError, match="a symbolic link"):
        bounded(lambda: write_report(copy))
    assert list(victim.iterdir()) == []
    assert cli("report", copy, "-o", tmp_path / "mine").exit_code == 0


@pytest.fixture
def shared(real_run: Path) -> Iterator[Path]:
    """A copy of the run that user ``nobody`` owns, in a folder of ours that nobody may enter (not list)."""
    base = Path(tempfile.mkdtemp(prefix="iobench-shared-"))
    try:
        base.chmod(0o711)
        run = base / real_run.name
        shutil.copytree(real_run, run)
        (run / "results.parquet").unlink()
        nobody = pwd.getpwnam("nobody")
        for folder, _, files in os.walk(run):
            for name in [folder, *(os.path.join(folder, f) for f in files)]:
                os.chown(name, nobody.pw_uid, nobody.pw_gid)
        yield run
    finally:
        shutil.rmtree(base)


def as_nobody(*argv: str) -> None:
    subprocess.run(["runuser", "-u", "nobody", "--", *argv], check=True, timeout=BOUND_S)


@pytest.mark.root
def test_a_run_directory_of_another_user_is_read_but_never_written(shared: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    as_nobody("ln", "-s", str(victim), str(shared / "report"))  # planted by the run's owner
    before = sorted(p.name for p in shared.iterdir())
    result = cli("report", shared)
    assert result.exit_code == 2 and f"{shared}: belongs to user nobody" in said(result)
    assert "-o" in said(result) and list(victim.iterdir()) == []
    with pytest.warns(RunWarning, match="the frame was not saved: .*belongs to user nobody"):
        frame = bounded(lambda: iobench.load(shared))
    assert frame["status"].eq("ok").all()
    assert sorted(p.name for p in shared.iterdir()) == before  # no results.parquet, nothing else
    assert cli("report", shared, "-o", tmp_path / "mine").exit_code == 0
    assert list(victim.iterdir()) == []


@pytest.mark.root
def test_a_hard_link_to_a_third_users_file_is_not_read(shared: Path, tmp_path: Path) -> None:
    secret = tmp_path / "private.txt"
    secret.write_text("the-secret-words\n")
    secret.chmod(0o600)
    (shared / "matrix.yaml").unlink()
    os.link(secret, shared / "matrix.yaml")  # a regular file in place, root's
    report = bounded(lambda: write_report(shared, tmp_path / "out"))
    page = report.html.read_text()
    assert "the-secret-words" not in page
    assert "matrix.yaml: belongs to root (uid 0), not to the run directory&#39;s owner (nobody" in page


# --- the matrix path -----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["fifo", "/dev/zero", "directory"])
def test_a_special_file_as_the_matrix_is_refused_at_once(tmp_path: Path, shape: str) -> None:
    path = tmp_path / "m.yaml"
    if shape == "fifo":
        os.mkfifo(path)
    elif shape == "directory":
        path.mkdir()
    else:
        path = Path("/dev/zero")
    words = {"fifo": "a FIFO", "/dev/zero": "a character device", "directory": "a directory"}[shape]
    result = cli("plan", path)
    assert result.exit_code == 2 and f"{path}: cannot read the matrix: {words}" in said(result)
    with pytest.raises(IobenchError, match=words):
        bounded(lambda: iobench.load_matrix(path))
    ran = subprocess.run(
        [sys.executable, "-m", "iobench", "plan", str(path)],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        check=False,
    )
    assert ran.returncode == 2 and words in ran.stderr + ran.stdout and "Traceback" not in ran.stderr


def test_a_matrix_larger_than_a_matrix_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    with path.open("wb") as handle:
        handle.truncate(64 << 30)  # sparse: 64 GiB that would read as zeros
    result = cli("plan", path)
    assert result.exit_code == 2 and "more than the 1,048,576 a matrix may have" in said(result)


def test_the_reader_refuses_what_is_not_a_regular_file_in_the_run(copy: Path) -> None:
    fifo = copy / "points" / "0001-r1" / "x"
    os.mkfifo(fifo)
    with pytest.raises(UnreadableRunFile, match="a FIFO") as raised:
        read_bytes(fifo, RECORD, copy)
    assert isinstance(raised.value, OSError) and raised.value.filename == str(fifo)


def test_a_fio_number_of_4300_digits_is_no_number(copy: Path) -> None:
    output = copy / "points" / "0001-r1" / "fio.json"
    text = output.read_text()
    start = text.index('"iops" : ') + len('"iops" : ')
    end = text.index(",", start)
    output.write_text(text[:start] + "1" + "0" * 4299 + text[end:])
    frame = bounded(lambda: iobench.load(copy))
    point = frame[frame["point"].eq(1)]
    assert point["status"].eq("ok").all() and point["iops"].isna().any()
    assert cli("report", copy, "-o", copy / "report").exit_code == 0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
        ("version: 1\nname: " + "1" * 4301 + "\n", "4300"),
    ],
    ids=["3000-deep", "4301-digit"],
)
def test_a_matrix_too_deep_or_with_too_long_an_integer_is_refused(
    tmp_path: Path, text: str, words: str
) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    result = cli("plan", path)
    assert result.exit_code == 2 and str(path) in said(result) and words in said(result)


def test_a_file_reached_through_a_linked_directory_below_the_run_is_not_read(
    copy: Path, tmp_path: Path
) -> None:
    """What a point directory swapped for a link after it was listed would give: the file is not read."""
    elsewhere = tmp_path / "elsewhere"
    shutil.move(copy / "points" / "0001-r1", elsewhere)
    (copy / "points" / "0001-r1").symlink_to(elsewhere)
    with pytest.raises(UnreadableRunFile, match=f"reached through a symbolic link \\(it is {elsewhere}"):
        read_bytes(copy / "points" / "0001-r1" / "meta.json", RECORD, copy)
    assert read_bytes(elsewhere / "meta.json", RECORD, None)  # the same file, named by the user: read


def test_a_record_past_its_cap_is_not_read(copy: Path) -> None:
    meta = copy / "points" / "0001-r1" / "meta.json"
    with meta.open("r+b") as handle:
        handle.truncate(RECORD.max_bytes + 1)  # sparse: it costs no disk
    assert f"{RECORD.max_bytes + 1:,} bytes, more than the {RECORD.max_bytes:,}" in reason_of(
        load_quietly(copy), 1
    )


def test_a_refusal_survives_a_trip_between_processes() -> None:
    refused = pickle.loads(pickle.dumps(UnreadableRunFile("/run/x", "a FIFO, not a regular file; not read")))
    assert isinstance(refused, OSError) and isinstance(refused, ResultsError)
    assert str(refused) == "/run/x: a FIFO, not a regular file; not read"


@pytest.mark.root
def test_a_directory_others_may_write_is_not_written_unless_sticky(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ResultsError, match="other users may write in it"):
        own_directory(shared / "report")
    assert not (shared / "report").exists()
    shared.chmod(0o1777)  # sticky: others cannot rename what is not theirs
    assert own_directory(shared / "report").is_dir()
    group = tmp_path / "group"
    group.mkdir()
    os.chown(group, 0, pwd.getpwnam("nobody").pw_gid)
    group.chmod(0o770)
    with pytest.raises(ResultsError, match="other users may write in it"):
        own_directory(group)


def test_fio_output_past_its_cap_is_refused_by_parse(tmp_path: Path) -> None:
    output = tmp_path / "fio.json"
    with output.open("wb") as handle:
        handle.truncate(FIO_TEXT.max_bytes + 1)  # sparse: zeros that would fill memory
    with pytest.raises(ResultsError, match=f"fio.json: {FIO_TEXT.max_bytes + 1:,} bytes, more than"):
        bounded(lambda: iobench.parse_fio(output))
    result = cli("parse", output)
    assert result.exit_code == 2 and "more than the" in said(result)

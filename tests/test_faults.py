"""Faults a run meets on a real machine: each ends in one message and exit status 3, never a traceback.

The faults are real where that is cheap: a small tmpfs that fills up, a
read-only remount, a removed directory, fio and its workers SIGKILLed, a target
file deleted and a loop device detached between points. Every test checks that
what finished was kept, that no file is left half written under its final name,
and that the run can be finished afterwards.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from loopdev import LoopFactory
from typer.testing import CliRunner

import iobench
from iobench.cli.commands import app
from iobench.errors import EnvironmentFault, RunStorageError, TargetVanished
from iobench.matrix.model import load_matrix
from iobench.results.loading import RunWarning
from iobench.runner.sweep import NullProgress, PointOutcome, run
from iobench.system.process import Completed, descendants, run_process
from iobench.system.tuning import read_settings

pytestmark = pytest.mark.fio
cli = CliRunner()
GOLDEN = (Path(__file__).parent / "data" / "fio" / "fio-3.33" / "read.json").read_text()
OOM = "killed by signal 9 (out of memory?)"


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[Path, str], Path]]:
    """``tmpfs(dir, "256k")`` mounts a tmpfs of that size on ``dir``; every mount is undone after the test."""
    mounted: list[Path] = []

    def mount(where: Path, size: str) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        _sh("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where))
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        if subprocess.run(["umount", str(where)], capture_output=True, timeout=30, check=False).returncode:
            subprocess.run(["umount", "--lazy", str(where)], capture_output=True, timeout=30, check=False)


def fill(directory: Path) -> Path:
    """A file that takes every byte left on ``directory``'s file system."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * chunk):
                    pass
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="No space left") as full:
        (directory / "probe").write_bytes(b"x" * 4096)
    assert full.value.errno == errno.ENOSPC
    return filler


class Fio:
    """A fake fio writing real fio-3.33 JSON; ``hooks[n](cwd)`` runs after the n-th call wrote its output."""

    def __init__(self, hooks: dict[int, Callable[[Path], None]] | None = None) -> None:
        self.hooks = hooks or {}
        self.calls = 0

    def __call__(self, argv: tuple[str, ...], *, cwd: Path, **kwargs: Any) -> Completed:
        self.calls += 1
        output = next(a for a in argv if a.startswith("--output=")).removeprefix("--output=")
        (Path(cwd) / output).write_text(GOLDEN)
        if self.calls in self.hooks:
            self.hooks[self.calls](Path(cwd))
        return Completed(tuple(argv), 0, "", "", 0.01, False)


def run_dir_of(point_cwd: Path) -> Path:
    """``<run>/points/.0001-r1.partial`` → ``<run>``."""
    return point_cwd.parent.parent


def saved_points(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Every point saved under its final name, with its meta.json (which must parse)."""
    return {
        p.name: json.loads((p / "meta.json").read_text())
        for p in sorted((run_dir / "points").iterdir())
        if not p.name.startswith(".")
    }


def assert_nothing_half_written(run_dir: Path) -> None:
    """No temporary or staging file is left, and every final name holds a whole file."""
    leftovers = [str(p) for p in run_dir.rglob("*") if ".partial" in p.name or p.name.endswith(".tmp")]
    assert leftovers == []
    json.loads((run_dir / "manifest.json").read_text())
    if (run_dir / "results.parquet").exists():
        pd.read_parquet(run_dir / "results.parquet")
    for png in run_dir.rglob("*.png"):
        assert png.read_bytes().endswith(b"IEND\xaeB`\x82"), png


def one_message(stdout: str, stderr: str) -> None:
    """No traceback, and exactly one message on stderr."""
    assert "Traceback" not in stdout + stderr
    assert stderr.startswith("iobench: ") and stderr.count("iobench:") == 1, stderr


@pytest.mark.root
def test_disk_full_mid_sweep_keeps_every_finished_point_and_resume_finishes(
    null_matrix: Callable[..., Path], tmpfs: Callable[[Path, str], Path], tmp_path: Path
) -> None:
    """A real `iobench run` (real fio) whose run directory's disk fills after two points."""
    matrix = null_matrix()
    disk = tmpfs(tmp_path / "small", "4m")
    out = disk / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "iobench", "run", str(matrix), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(out.glob("*/points/0002-r1")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        filler = fill(disk)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, stdout + stderr
    one_message(stdout, stderr)
    run_dir = next(out.iterdir())
    assert f"disk full (no space left on device) while saving point 0003-r1: {run_dir}/points/" in stderr
    assert (
        f"free space on {disk}, then `iobench run {matrix} --resume {run_dir}` runs the 2 points left"
        in stderr
    )
    assert f"`iobench report {run_dir}` draws the figures" in stderr
    saved = saved_points(run_dir)
    assert sorted(saved) == ["0001-r1", "0002-r1"] and {m["status"] for m in saved.values()} == {"ok"}
    assert "kept: 2 points (2 ok) in " + str(run_dir) in stderr
    assert_nothing_half_written(run_dir)

    filler.unlink()
    with pytest.warns(RunWarning, match="incomplete: 2 of 4 point-runs done, 2 missing"):
        frame = iobench.load(run_dir)
    assert sorted(frame["point"].unique()) == [1, 2] and frame["status"].eq("ok").all()
    assert frame["iops"].gt(0).all()
    report = cli.invoke(app, ["report", str(run_dir)])
    assert report.exit_code == 0, report.output
    assert (run_dir / "report" / "report.html").is_file()
    resumed = cli.invoke(app, ["run", str(matrix), "--resume", str(run_dir)])
    assert resumed.exit_code == 0, resumed.output
    assert {m["status"] for m in saved_points(run_dir).values()} == {"ok"} and len(saved_points(run_dir)) == 4
    assert sorted(iobench.load(run_dir)["point"].unique()) == [1, 2, 3, 4]


@pytest.mark.root
def test_a_small_disk_fills_up_on_its_own(
    write_matrix: Callable[..., Path], tmpfs: Callable[[Path, str], Path], tmp_path: Path
) -> None:
    """64 points on 512 KiB: the disk fills part-way; space added, --resume runs only the rest."""
    matrix = load_matrix(
        write_matrix(
            f"""
            version: 1
            name: many
            targets: [{{path: {tmp_path}/t.dat, size: 1M}}]
            fio: {{ioengine: "null", rw: randread, runtime: 1, time_based: 1}}
            matrix:
              iodepth: [1, 2, 3, 4, 5, 6, 7, 8]
              numjobs: [1, 2, 3, 4, 5, 6, 7, 8]
            """
        )
    )
    disk = tmpfs(tmp_path / "small", "512k")
    with pytest.raises(RunStorageError) as caught:
        run(matrix, out=disk, executor=Fio())
    fault = caught.value
    assert fault.exit_code == 3 and fault.errno == errno.ENOSPC
    assert fault.run_dir is not None and fault.path.startswith(fault.run_dir)
    run_dir = Path(fault.run_dir)
    saved = saved_points(run_dir)
    assert 0 < len(saved) < 64 and fault.counts == {"ok": len(saved)}
    assert {m["status"] for m in saved.values()} == {"ok"}
    assert fault.steps[0].action == "resume" and fault.steps[0].left == 64 - len(saved)
    assert fault.steps[0].run_dir == str(run_dir)
    assert_nothing_half_written(run_dir)

    _sh("mount", "-o", "remount,size=16m", str(disk))
    again = Fio()
    result = run(matrix, resume=run_dir, executor=again)
    assert again.calls == 64 - len(saved) and result.counts == {"ok": 64}
    assert len(iobench.load(run_dir).drop_duplicates(["point", "repeat"])) == 64


class FillAfterLastPoint(NullProgress):
    """Fills the disk once the last point is saved: only the frame and the manifest are left to write."""

    def __init__(self, disk: Path, last: str) -> None:
        self.disk, self.last = disk, last
        self.filler: Path | None = None

    def point_finished(self, run: Any, outcome: PointOutcome) -> None:
        if outcome.key == self.last:
            self.filler = fill(self.disk)


@pytest.mark.root
def test_disk_full_at_the_frame_leaves_no_half_written_frame_and_report_rebuilds_it(
    null_matrix: Callable[..., Path], tmpfs: Callable[[Path, str], Path], tmp_path: Path
) -> None:
    disk = tmpfs(tmp_path / "small", "1m")
    progress = FillAfterLastPoint(disk, "0004-r1")
    with pytest.raises(RunStorageError) as caught:
        run(load_matrix(null_matrix()), out=disk, executor=Fio(), progress=progress)
    fault = caught.value
    run_dir = Path(str(fault.run_dir))
    assert fault.errno == errno.ENOSPC and fault.path == str(run_dir / "results.parquet")
    assert (
        fault.kept
        == f"every point: 4 points (4 ok) in {run_dir}; the frame (results.parquet) was not written"
    )
    assert (fault.steps[0].action, fault.steps[0].run_dir) == ("report", str(run_dir))
    assert fault.steps[0].does == "rebuilds the frame and draws the figures"
    assert not (run_dir / "results.parquet").exists()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    assert_nothing_half_written(run_dir)

    report = cli.invoke(app, ["report", str(run_dir)])
    assert report.exit_code == 3, report.output
    one_message(report.stdout, report.stderr)
    assert "report not written: disk full" in report.output and "again" in report.output
    assert not (run_dir / "report" / "report.html").exists()
    assert_nothing_half_written(run_dir)

    assert progress.filler is not None
    progress.filler.unlink()
    assert cli.invoke(app, ["report", str(run_dir)]).exit_code == 0
    assert (run_dir / "results.parquet").is_file() and (run_dir / "report" / "report.html").is_file()
    assert len(pd.read_parquet(run_dir / "results.parquet").drop_duplicates(["point"])) == 4


@pytest.mark.root
def test_figures_that_do_not_fit_keep_points_and_frame(
    null_matrix: Callable[..., Path],
    tmpfs: Callable[[Path, str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`iobench run --figures` draws figures last; a full disk there costs only the figures."""

    def small_figures_dir(cwd: Path) -> None:
        tmpfs(run_dir_of(cwd) / "figures", "4k")

    monkeypatch.setattr("iobench.runner.sweep.run_process", Fio({1: small_figures_dir}))
    result = cli.invoke(app, ["run", str(null_matrix()), "--out", str(tmp_path / "r"), "--figures"])
    assert result.exit_code == 3, result.output
    one_message(result.stdout, result.stderr)
    run_dir = next((tmp_path / "r").iterdir())
    assert f"figures not drawn: disk full (no space left on device): {run_dir}/figures/" in result.output
    assert f"kept: every point: 4 points (4 ok) and the frame (results.parquet) in {run_dir}" in result.output
    assert f"`iobench report {run_dir}` draws them" in result.output
    assert list((run_dir / "figures").iterdir()) == []
    assert pd.read_parquet(run_dir / "results.parquet")["status"].eq("ok").all()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "finished"

    _sh("umount", str(run_dir / "figures"))
    report = cli.invoke(app, ["report", str(run_dir)])
    assert report.exit_code == 0, report.output
    assert list((run_dir / "report").glob("*.png"))


@pytest.mark.root
def test_run_directory_made_read_only_between_points(
    null_matrix: Callable[..., Path], tmpfs: Callable[[Path, str], Path], tmp_path: Path
) -> None:
    disk = tmpfs(tmp_path / "disk", "4m")

    def read_only(cwd: Path) -> None:
        _sh("mount", "-o", "remount,ro", str(disk))

    matrix = load_matrix(null_matrix())
    with pytest.raises(RunStorageError) as caught:
        run(matrix, out=disk, executor=Fio({2: read_only}))
    fault = caught.value
    run_dir = Path(str(fault.run_dir))
    assert fault.errno == errno.EROFS and fault.exit_code == 3
    assert str(fault).startswith(
        f"the file system is read-only while saving point 0002-r1: {run_dir}/points/.0002-r1.partial/"
    )
    assert fault.kept == f"1 point (1 ok) in {run_dir}; the frame (results.parquet) was not written"
    assert fault.remedy == f"make {disk} writable again"
    assert (fault.steps[0].action, fault.steps[0].matrix) == ("resume", matrix.source)
    assert sorted(saved_points(run_dir)) == ["0001-r1"]
    with pytest.warns(RunWarning, match="incomplete: 1 of 4 point-runs done, 3 missing"):
        frame = iobench.load(run_dir)  # a read-only run directory still reads
    assert frame["point"].tolist() == [1] and not (run_dir / "results.parquet").exists()

    _sh("mount", "-o", "remount,rw", str(disk))
    again = Fio()
    assert run(matrix, resume=run_dir, executor=again).counts == {"ok": 4} and again.calls == 3
    assert_nothing_half_written(run_dir)


def test_run_directory_removed_mid_run(
    null_matrix: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def remove(cwd: Path) -> None:
        shutil.rmtree(run_dir_of(cwd))

    matrix = null_matrix()
    monkeypatch.setattr("iobench.runner.sweep.run_process", Fio({2: remove}))
    result = cli.invoke(app, ["run", str(matrix), "--out", str(tmp_path / "r")])
    assert result.exit_code == 3, result.output
    one_message(result.stdout, result.stderr)
    assert "the run directory was removed during the run: " + str(tmp_path / "r") in result.output
    assert "kept: nothing: the directory and every point saved in it are gone" in result.output
    assert f"start again with `iobench run {matrix}`" in result.output
    assert list((tmp_path / "r").iterdir()) == []


NULL_SLOW = """
version: 1
name: killed
timeout: 5
targets: [{{path: {target}, size: 1M}}]
fio: {{ioengine: "null", rw: randread, runtime: 2, time_based: 1, numjobs: 2}}
matrix:
  iodepth: [1, 2]
"""


class KillFio:
    """Runs the real fio; on the first call SIGKILLs fio itself, or one of its workers, once they run.

    ``victim`` is ``fio``, ``worker`` (as soon as the workers exist: while they
    start) or ``running-worker`` (half a second later, while it does I/O).
    """

    def __init__(self, victim: str) -> None:
        self.victim = victim
        self.seen_at: float | None = None
        self.calls = 0
        self.workers: list[int] = []
        self.alive_at_next_point: list[int] = []

    def __call__(self, argv: tuple[str, ...], *, poll: Callable[[int], None], **kwargs: Any) -> Completed:
        self.calls += 1
        if self.calls > 1:
            self.alive_at_next_point = [p for p in self.workers if _running(p)]
            return run_process(argv, poll=poll, **kwargs)

        def kill_once(pid: int) -> None:
            poll(pid)
            tree = descendants(pid)
            if self.workers or len(tree) < 3:  # fio and both workers
                return
            self.seen_at = self.seen_at or time.monotonic()
            if self.victim == "running-worker" and time.monotonic() - self.seen_at < 0.5:
                return
            self.workers = tree[1:]
            os.kill(pid if self.victim == "fio" else self.workers[0], signal.SIGKILL)

        return run_process(argv, poll=kill_once, **kwargs)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("victim", ["fio", "worker", "running-worker"])
def test_fio_killed_by_the_oom_killer_fails_the_point_and_the_run_goes_on(
    victim: str, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    killer = KillFio(victim)
    matrix = load_matrix(write_matrix(NULL_SLOW.format(target=tmp_path / "t.dat")))
    result = run(matrix, out=tmp_path / "r", executor=killer)
    assert killer.workers, "fio's workers never showed up"
    assert result.counts == {"failed": 1, "ok": 1} and result.exit_code == 1
    meta = saved_points(result.run_dir)["0001-r1"]
    if victim == "fio":
        assert meta["status"] == "failed" and meta["reason"] == f"fio {OOM}"
    elif victim == "running-worker":
        assert meta["status"] == "failed" and meta["reason"] == f"fio worker (pid {killer.workers[0]}) {OOM}"
    else:
        # A worker killed while starting leaves fio waiting for it: then the timeout stops fio.
        assert meta["status"] == "failed" and meta["reason"] in (
            f"fio worker (pid {killer.workers[0]}) {OOM}",
            f"fio worker (pid {killer.workers[0]}) {OOM}; fio then hung and was stopped after 5 s",
        )
    # fio's workers outlive a SIGKILLed fio by the rest of their runtime unless iobench stops them.
    assert killer.alive_at_next_point == []
    assert saved_points(result.run_dir)["0002-r1"]["status"] == "ok"


def test_file_target_deleted_mid_run(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    target = tmp_path / "t.dat"
    matrix = load_matrix(
        write_matrix(
            f"""
            version: 1
            name: vanish
            targets: [{{path: {target}, size: 4M}}]
            fio: {{ioengine: psync, rw: randread, runtime: 1, time_based: 1}}
            matrix:
              bs: [4k, 8k, 16k]
            """
        )
    )
    calls = 0

    def delete_after_second(argv: tuple[str, ...], **kwargs: Any) -> Completed:
        nonlocal calls
        calls += 1
        done = run_process(argv, **kwargs)
        if calls == 2:
            target.unlink()
        return done

    with pytest.raises(TargetVanished) as caught:
        run(matrix, out=tmp_path / "r", executor=delete_after_second)
    fault = caught.value
    run_dir = Path(str(fault.run_dir))
    assert isinstance(fault, EnvironmentFault) and fault.exit_code == 3
    assert str(fault).startswith(
        f"target vanished (deleted, or its device removed, during the run): {target}"
    )
    assert fault.kept == f"2 points (2 ok) in {run_dir}"  # the frame was saved too
    assert fault.remedy == f"bring {target} back" and fault.steps[0].action == "resume"
    assert calls == 2 and sorted(saved_points(run_dir)) == ["0001-r1", "0002-r1"]
    assert len(pd.read_parquet(run_dir / "results.parquet").drop_duplicates("point")) == 2
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "stopped"

    result = run(matrix, resume=run_dir)
    assert result.counts == {"ok": 3} and target.is_file()


@pytest.mark.root
@pytest.mark.loopdev
def test_loop_device_detached_mid_run_restores_settings(
    loops: LoopFactory, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    loop = loops.attach(16)
    before = dict(read_settings(loop.name))
    matrix = load_matrix(
        write_matrix(
            f"""
            version: 1
            name: detached
            targets: [{{path: {loop.path}}}]
            fio: {{ioengine: psync, direct: 1, rw: randread, bs: 4k, runtime: 1, time_based: 1}}
            matrix:
              readahead_kb: [0, 512, 1024]
            """
        )
    )
    calls = 0

    def detach_after_first(argv: tuple[str, ...], **kwargs: Any) -> Completed:
        nonlocal calls
        calls += 1
        done = run_process(argv, **kwargs)
        if calls == 1:
            _sh("losetup", "--detach", loop.path)
        return done

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("iobench.runner.sweep.run_process", detach_after_first)
            result = cli.invoke(app, ["run", str(matrix.source), "--out", str(tmp_path / "r")])
        assert result.exit_code == 3, result.output
        one_message(result.stdout, result.stderr)
        assert (
            f"target has no medium (device detached or removed during the run): {loop.path}" in result.output
        )
        assert "kept: 1 point (1 ok)" in result.output
        assert dict(read_settings(loop.name)) == before
        assert calls == 1
    finally:
        if not Path(f"/sys/block/{loop.name}/loop").exists():
            _sh("losetup", loop.path, str(loop.backing))  # attached again, for the fixture to detach

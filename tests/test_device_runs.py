"""Device settings on real loop devices: applied per point, recorded, always put back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from loopdev import Loop, LoopFactory
from typer.testing import CliRunner

from iobench.cli.commands import app
from iobench.errors import SafetyError, TuningError
from iobench.matrix.model import load_matrix
from iobench.planner.plans import plan
from iobench.runner.sweep import run
from iobench.system.locks import device_lock
from iobench.system.tuning import read_settings

pytestmark = [pytest.mark.loopdev, pytest.mark.root, pytest.mark.fio]
runner = CliRunner()

MATRIX = """
version: 1
name: tuned
targets: [{{path: {device}}}]
fio: {{ioengine: psync, direct: 1, rw: randread, bs: 4k, runtime: {runtime}, time_based: 1}}
matrix:
  scheduler: [none, mq-deadline]
  readahead_kb: [0, 512]
"""


@pytest.fixture
def loop(loops: LoopFactory) -> Loop:
    return loops.attach(32)


def originals(loop: Loop) -> dict[str, object]:
    return dict(read_settings(loop.name))


def test_settings_are_applied_per_point_recorded_and_restored(
    loop: Loop, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    before = originals(loop)
    result = run(load_matrix(write_matrix(MATRIX.format(device=loop.path, runtime=1))), out=tmp_path)
    assert result.counts == {"ok": 4}
    assert originals(loop) == before
    for meta_path in (result.run_dir / "points").glob("*/meta.json"):
        meta = json.loads(meta_path.read_text())
        assert meta["settings"][loop.name] == {
            "scheduler": meta["params"]["scheduler"],
            "readahead_kb": meta["params"]["readahead_kb"],
        }
        assert "--readonly" in meta["processes"][0]["argv"]
    frame = result.frame
    assert frame is not None
    assert (frame["scheduler"] == frame["scheduler"]).all()
    assert sorted(set(zip(frame["scheduler"], frame["readahead_kb"], strict=True))) == [
        ("mq-deadline", 0),
        ("mq-deadline", 512),
        ("none", 0),
        ("none", 512),
    ]
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["settings_restored"][loop.name]["readahead_kb"] == before["readahead_kb"]


def test_a_scheduler_the_device_does_not_offer_is_refused_before_anything(
    loop: Loop, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    before = originals(loop)
    path = write_matrix(MATRIX.format(device=loop.path, runtime=1).replace("mq-deadline", "bfq-nonexistent"))
    with pytest.raises(TuningError, match=f"{loop.name}.*bfq-nonexistent"):
        run(load_matrix(path), out=tmp_path / "r")
    assert originals(loop) == before and not (tmp_path / "r").exists()


def test_settings_on_a_target_without_a_block_device_are_refused(write_matrix: Callable[..., Path]) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm tmpfs here")
    path = write_matrix(
        f"version: 1\nname: t\ntargets: [{{path: {shm}/iobench-test.dat, size: 1M}}]\n"
        "fio: {ioengine: psync, rw: read}\nmatrix:\n  scheduler: [none]\n"
    )
    with pytest.raises(TuningError, match="no block device under it"):
        plan(load_matrix(path))


def test_a_second_run_on_the_same_device_is_refused(
    loop: Loop, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    m = load_matrix(write_matrix(MATRIX.format(device=loop.path, runtime=1)))
    with device_lock([loop.name]), pytest.raises(SafetyError, match=f"another iobench run .* {loop.name}"):
        run(m, out=tmp_path / "r")
    assert not (tmp_path / "r").exists()


def _start(path: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "iobench", "run", str(path), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )


def _wait_for_second_point(out: Path, proc: subprocess.Popen[str], loop: Loop) -> None:
    """Until point 1 is saved and point 2's settings (scheduler none, readahead 512) are on the disk."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        list(out.glob("*/points/0001-r1/meta.json")) and _point_two_on(loop)
    ):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    assert _point_two_on(loop), "point 2 never began"


def _point_two_on(loop: Loop) -> bool:
    now = originals(loop)
    return (now["scheduler"], now["readahead_kb"]) == ("none", 512)


def test_sigterm_restores_settings(loop: Loop, write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    before = originals(loop)
    proc = _start(write_matrix(MATRIX.format(device=loop.path, runtime=2)), tmp_path / "r")
    _wait_for_second_point(tmp_path / "r", proc, loop)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert originals(loop) == before


def test_after_sigkill_run_refuses_and_restore_puts_settings_back(
    loop: Loop, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    before = originals(loop)
    path = write_matrix(MATRIX.format(device=loop.path, runtime=2))
    proc = _start(path, tmp_path / "r")
    _wait_for_second_point(tmp_path / "r", proc, loop)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    subprocess.run(["pkill", "-KILL", "-f", str(loop.path)], check=False)  # fio left orphaned by SIGKILL
    assert originals(loop) != before, "the killed run should have left a changed setting behind"

    refused = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "again")])
    assert refused.exit_code == 2 and "iobench restore" in refused.output
    assert not (tmp_path / "again").exists()

    restored = runner.invoke(app, ["restore"])
    assert restored.exit_code == 0 and f"{loop.name}: restored" in restored.output
    assert originals(loop) == before
    assert "nothing to restore" in runner.invoke(app, ["restore"]).output

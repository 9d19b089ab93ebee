"""Running a plan: real fio on the null engine, and a fake fio for failures and interrupts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from iobench.errors import IobenchError
from iobench.matrix.model import load_matrix
from iobench.runner.sweep import RunInterrupted, run
from iobench.system.process import Completed

pytestmark = pytest.mark.fio


def test_real_sweep_leaves_the_spec_run_directory(null_matrix: Callable[..., Path], tmp_path: Path) -> None:
    m = load_matrix(null_matrix())
    result = run(m, out=tmp_path / "results")
    assert result.exit_code == 0 and result.counts == {"ok": 4}
    run_dir = result.run_dir
    assert run_dir.parent == tmp_path / "results" and run_dir.name.startswith("nulltest-")
    assert (run_dir / "matrix.yaml").read_text() == m.text
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["schema_version"] == 2 and manifest["status"] == "finished"
    assert manifest["machine"]["fio_version"].startswith("fio-3")
    assert manifest["machine"]["kernel"] and manifest["machine"]["topology"]["nodes"]
    assert manifest["counts"] == {"ok": 4}
    point = run_dir / "points" / "0003-r1"
    assert {p.name for p in point.iterdir()} >= {
        "job.fio",
        "argv.json",
        "fio.json",
        "stderr.txt",
        "meta.json",
    }
    meta = json.loads((point / "meta.json").read_text())
    assert meta["params"] == {"iodepth": 2, "numjobs": 1} and meta["status"] == "ok"
    assert meta["processes"][0]["cpus_observed"]
    frame = pd.read_parquet(run_dir / "results.parquet")
    spec = [
        "run_id",
        "point",
        "repeat",
        "host",
        "jobname",
        "job_index",
        "direction",
        "status",
        "iodepth",
        "numjobs",
        "target",
        "target_node",
        "cpu_node",
        "cpus",
        "cpus_observed",
        "scheduler",
        "readahead_kb",
        "iops",
        "bw_bytes",
        "io_bytes",
        "runtime_ms",
        "lat_mean_us",
        "clat_mean_us",
        "slat_mean_us",
        "clat_p50_us",
        "clat_p90_us",
        "clat_p99_us",
        "clat_p99_9_us",
        "usr_cpu",
        "sys_cpu",
        "ctx",
        "error",
        "fio_version",
        "cpu_us_per_io",
        "inflight",
    ]
    assert [c for c in spec if c not in frame.columns] == []
    # numjobs=2 points report two jobs: 1 + 2 + 1 + 2 rows, all reads
    assert len(frame) == 6 and set(frame["direction"]) == {"read"}
    assert (frame["iops"] > 0).all() and frame["target"].eq(m.targets[0].path).all()
    assert sorted(frame.groupby("point")["numjobs"].first().tolist()) == [1, 1, 2, 2]
    # the runner never draws; the CLI and the report call the figure files module
    assert not (run_dir / "figures").exists()
    from iobench.plots.files import run_figures

    assert run_figures(run_dir, frame, {"ok": 4}) and list((run_dir / "figures").glob("*.png"))


def test_failures_are_recorded_and_the_run_goes_on(
    fake_fio: type[Any], null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    fake = fake_fio(fail={2}, timeout={3})
    result = run(load_matrix(null_matrix()), out=tmp_path, executor=fake)
    assert len(fake.calls) == 4
    assert result.counts == {"ok": 2, "failed": 1, "timeout": 1} and result.exit_code == 1
    metas = {p.name: json.loads((p / "meta.json").read_text()) for p in (result.run_dir / "points").iterdir()}
    assert "error=EIO" in metas["0002-r1"]["reason"] and metas["0002-r1"]["status"] == "failed"
    assert metas["0003-r1"]["status"] == "timeout"
    frame = result.frame
    assert frame is not None
    failed = frame[frame["status"] == "failed"]
    assert len(failed) == 1 and failed["iops"].isna().all()


def test_fail_fast_stops_at_the_first_failure(
    fake_fio: type[Any], null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    fake = fake_fio(fail={2})
    result = run(load_matrix(null_matrix()), out=tmp_path, executor=fake, fail_fast=True)
    assert len(fake.calls) == 2 and result.counts == {"ok": 1, "failed": 1}


def test_interrupt_keeps_finished_points_and_resume_runs_only_the_rest(
    fake_fio: type[Any], null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    m = load_matrix(null_matrix())
    with pytest.raises(RunInterrupted) as caught:
        run(m, out=tmp_path, executor=fake_fio(interrupt=3))
    interrupted = caught.value.result
    assert caught.value.exit_code == 130
    assert interrupted.counts == {"ok": 2, "interrupted": 1}
    run_dir = interrupted.run_dir
    assert (run_dir / "results.parquet").is_file()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    assert "resume the run" in str(caught.value)  # the CLI words the command (test_cli)

    again = fake_fio()
    result = run(m, resume=run_dir, executor=again)
    assert len(again.calls) == 2
    assert result.run_dir == run_dir and result.counts == {"ok": 4}
    assert sorted(pd.read_parquet(run_dir / "results.parquet")["point"].unique()) == [1, 2, 3, 4]


def test_resume_refuses_a_different_matrix(
    fake_fio: type[Any], null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    result = run(load_matrix(null_matrix()), out=tmp_path, executor=fake_fio())
    other = null_matrix("repeat: 2\n")
    with pytest.raises(IobenchError, match="matrix differs"):
        run(load_matrix(other), resume=result.run_dir, executor=fake_fio())


def test_real_timeout_stops_fio(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    path = write_matrix(
        f"""
        version: 1
        name: slow
        timeout: 1
        targets: [{{path: {tmp_path}/t.dat, size: 1M}}]
        fio: {{ioengine: null, rw: read, runtime: 30, time_based: 1}}
        """
    )
    result = run(load_matrix(path), out=tmp_path / "r")
    assert result.counts == {"timeout": 1}
    assert result.exit_code == 1


def test_repeats_are_kept_apart(
    fake_fio: type[Any], null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    result = run(load_matrix(null_matrix("repeat: 2\n")), out=tmp_path, executor=fake_fio())
    assert result.frame is not None
    assert sorted(set(zip(result.frame["point"], result.frame["repeat"], strict=True))) == [
        (p, r) for p in (1, 2, 3, 4) for r in (1, 2)
    ]


def test_per_target_launch_runs_one_fio_per_target_at_once(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_matrix(
        f"""
        version: 1
        name: pertarget
        launch: per-target
        targets:
          - {{path: {tmp_path}/a.dat, size: 8M}}
          - {{path: {tmp_path}/b.dat, size: 8M}}
        fio: {{ioengine: "null", rw: randread, runtime: 1, time_based: 1}}
        matrix:
          numjobs: [1, 2]
        """
    )
    m = load_matrix(path)
    result = run(m, out=tmp_path / "r")
    assert result.counts == {"ok": 2}
    point = result.run_dir / "points" / "0002-r1"
    assert {p.name for p in point.glob("*.json")} >= {"fio-a.dat.json", "fio-b.dat.json"}
    meta = json.loads((point / "meta.json").read_text())
    starts = [p["duration_s"] for p in meta["processes"]]
    assert len(starts) == 2 and meta["duration_s"] < sum(starts)  # concurrent, not one after another
    frame = result.frame
    assert frame is not None
    rows = frame[frame["point"] == 2]
    assert sorted(rows["target"]) == sorted([m.targets[0].path] * 2 + [m.targets[1].path] * 2)
    from iobench.plots import point_totals

    totals = point_totals(frame)
    assert float(totals.loc[totals["point"] == 2, "iops"].iloc[0]) == pytest.approx(
        float(rows["total_ios"].sum()) / float(rows["runtime_ms"].max()) * 1000
    )


def test_a_fio_that_aborts_but_exits_0_fails_its_point(
    fake_fio: type[Any], null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    """fio refuses a job (a target that appears mounted, say), prints "Aborting" and may exit 0: no ok point."""

    class Aborting(fake_fio):  # type: ignore[misc,valid-type]
        def __call__(self, argv: tuple[str, ...], *, cwd: Path, **kwargs: Any) -> Completed:
            done = super().__call__(argv, cwd=cwd, **kwargs)
            said = "/dev/loop9 appears mounted, and 'allow_mounted_write' isn't set. Aborting.\n"
            return Completed(done.argv, 0, done.stdout, said, done.duration_s, False)

    result = run(load_matrix(null_matrix()), out=tmp_path, executor=Aborting())
    assert result.counts == {"failed": 4}
    metas = [json.loads(p.read_text()) for p in sorted(result.run_dir.glob("points/*/meta.json"))]
    assert all(m["reason"].startswith("fio aborted: /dev/loop9 appears mounted") for m in metas)

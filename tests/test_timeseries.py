"""fio's own logs of every point: job files that ask for them, and `iobench.timeseries` reading them."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import iobench
from iobench.errors import MatrixError, ResultsError
from iobench.matrix.model import load_matrix
from iobench.planner.plans import plan
from iobench.planner.timelogs import DEFAULT_LOG_AVG_MSEC, LOG_FILE
from iobench.results.timeseries import COLUMNS, timeseries
from iobench.system.process import run_process

DATA = Path(__file__).parent / "data" / "timeseries" / "fio-3.33"


def make_run(
    base: Path,
    points: list[dict[str, Any]],
    *,
    name: str = "synthetic",
) -> Path:
    """A run directory of ``ok`` points, each from ``files`` (name → text, or a Path to copy)."""
    run = base / name
    (run / "points").mkdir(parents=True)
    machine = {"host": "testhost", "fio_version": "fio-3.33", "kernel": "6.1", "cpu_model": "test CPU"}
    manifest = {"schema_version": 1, "name": name, "machine": machine, "status": "finished"}
    (run / "manifest.json").write_text(json.dumps(manifest))
    for spec in points:
        point, repeat = spec.get("point", 1), spec.get("repeat", 1)
        where = run / "points" / f"{point:04d}-r{repeat}"
        where.mkdir()
        for file_name, content in spec["files"].items():
            if isinstance(content, Path):
                shutil.copy(content, where / file_name)
            else:
                (where / file_name).write_text(textwrap.dedent(content).lstrip())
        if "job.fio" not in spec["files"]:
            options = spec.get("options", {"log_avg_msec": "1000"})
            (where / "job.fio").write_text(
                "[global]\n" + "".join(f"{k}={v}\n" for k, v in options.items()) + "\n[t]\nfilename=/x\n"
            )
        sections = spec.get("sections", ["t"])
        meta = {
            "schema_version": 1,
            "key": where.name,
            "point": point,
            "repeat": repeat,
            "status": spec.get("status", "ok"),
            "params": spec.get("values", {}),
            "values": spec.get("values", {}),
            "processes": [
                {
                    "argv": ["fio", "--output=fio.json", "job.fio"],
                    "jobfile_name": "job.fio",
                    "output": "fio.json",
                    "sections": sections,
                    "targets": [f"/dev/{s}" for s in sections],
                }
            ],
        }
        (where / "meta.json").write_text(json.dumps(meta))
    return run


def _copies(directory: Path) -> dict[str, Any]:
    return {p.name: p for p in directory.iterdir()}


# --- the job file asks fio for its logs -------------------------------------------------------


@pytest.mark.fio
def test_every_section_writes_its_logs_averaged_over_one_second(
    null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    m = load_matrix(null_matrix())
    process = plan(m).runs[0].processes[0]
    (section,) = process.sections
    lines = process.jobfile.splitlines()
    assert f"log_avg_msec={DEFAULT_LOG_AVG_MSEC}" in lines
    after = lines[lines.index(f"[{section}]") :]
    for option in ("write_bw_log", "write_iops_log", "write_lat_log"):
        assert f"{option}={section}" in after


@pytest.mark.fio
def test_log_avg_msec_is_a_matrix_option_and_zero_is_refused(
    null_matrix: Callable[..., Path], write_matrix: Callable[..., Path]
) -> None:
    def axis(values: str) -> Path:
        text = null_matrix().read_text().replace("matrix:\n", f"matrix:\n  log_avg_msec: {values}\n")
        return write_matrix(text, f"axis-{len(values)}.yaml")

    m = load_matrix(axis("[250, 500]"))
    jobfiles = [r.processes[0].jobfile for r in plan(m).runs]
    windows = [line for text in jobfiles for line in text.splitlines() if line.startswith("log_avg_msec=")]
    assert sorted(set(windows)) == ["log_avg_msec=250", "log_avg_msec=500"] and len(windows) == len(jobfiles)
    with pytest.raises(MatrixError, match=r"log_avg_msec must be at least 1"):
        load_matrix(axis("[0]"))
    text = null_matrix().read_text().replace("fio:\n", "fio:\n  write_iops_log: mine\n")
    with pytest.raises(MatrixError, match=r"write_iops_log.*set by iobench.*log_avg_msec"):
        load_matrix(write_matrix(text, "own-logs.yaml"))


# --- parsing fio's log lines ------------------------------------------------------------------


def test_real_logs_of_every_layout_parse_with_their_units(tmp_path: Path) -> None:
    """fio 3.33 logs: log_offset (6 fields), log_prio (hex priority), per_job_logs=0, short last windows."""
    run = make_run(
        tmp_path,
        [{"files": _copies(DATA / "logs"), "sections": ["offset", "prio", "shared"], "values": {"bs": 4096}}],
    )
    ts = timeseries(run)
    assert list(ts.columns) == [*COLUMNS, "bs"]
    assert set(ts["metric"]) == {"iops", "bw_bytes", "lat_mean_us", "clat_mean_us"}  # null engine: no slat
    assert set(ts["direction"]) == {"read", "write"} and set(ts["jobname"]) == {"offset", "prio", "shared"}
    rows = {name: len(p.read_text().splitlines()) for name, p in _copies(DATA / "logs").items()}
    assert len(ts) == sum(n for name, n in rows.items() if name.endswith(".log"))
    # units: bandwidth KiB/s → bytes/s, latency ns → µs; the raw lines are the reference
    first = {
        name: [float(x) for x in (DATA / "logs" / name).read_text().splitlines()[0].split(",")[:3]]
        for name in ("prio_bw.2.log", "offset_clat.1.log")
    }
    bw = ts[(ts.jobname == "prio") & (ts.metric == "bw_bytes")].iloc[0]
    assert bw["value"] == first["prio_bw.2.log"][1] * 1024 and bw["job"] == 2
    clat = ts[(ts.jobname == "offset") & (ts.metric == "clat_mean_us")].iloc[0]
    assert clat["value"] == pytest.approx(first["offset_clat.1.log"][1] / 1000)
    assert clat["direction"] == ("write" if first["offset_clat.1.log"][2] == 1 else "read")
    # the short last window of a latency log (at 2.5 s) is kept, in window 3
    lat = ts[(ts.jobname == "offset") & (ts.metric == "lat_mean_us") & (ts.direction == "read")]
    assert lat["t_s"].tolist() == [1.0, 2.0, 2.5] and lat["window"].tolist() == [1, 2, 3]
    assert ts["bs"].eq(4096).all()
    assert ts.attrs["timing"][0]["window_s"] == 1.0


def test_per_job_logs_0_splits_the_shared_file_where_time_starts_again(tmp_path: Path) -> None:
    run = make_run(tmp_path, [{"files": _copies(DATA / "logs"), "sections": ["offset", "prio", "shared"]}])
    ts = timeseries(run)
    shared = ts[(ts.jobname == "shared") & (ts.metric == "iops")]
    assert sorted(set(shared["job"])) == [1, 2]
    for _, rows in shared.groupby("job"):
        assert rows["t_s"].tolist() == [1.0, 1.0, 2.0, 2.0]
        assert sorted(rows["direction"]) == ["read", "read", "write", "write"]


def test_a_repeated_time_stamp_keeps_its_first_row_only(tmp_path: Path) -> None:
    """fio logs a rate of 0 for a window of no time (spent = 0): the repeat is dropped, per direction."""
    log = """\
        1000, 400, 0, 4096, 0
        1000, 398, 1, 4096, 0
        2000, 401, 0, 4096, 0
        2000, 0, 0, 4096, 0
        2000, 402, 1, 4096, 0
        3000, 399, 0, 4096, 0
        3000, 0, 0, 4096, 0
        """
    run = make_run(tmp_path, [{"files": {"t_iops.1.log": log}}])
    ts = timeseries(run)
    reads = ts[ts.direction == "read"]
    assert reads["t_s"].tolist() == [1.0, 2.0, 3.0] and reads["value"].tolist() == [400, 401, 399]
    assert ts[ts.direction == "write"]["value"].tolist() == [398, 402]


def test_window_rounds_to_the_point_s_log_avg_msec(tmp_path: Path) -> None:
    log = "498, 10, 0, 0, 0\n1003, 11, 0, 0, 0\n1489, 12, 0, 0, 0\n2011, 13, 0, 0, 0\n"
    run = make_run(tmp_path, [{"files": {"t_iops.1.log": log}, "options": {"log_avg_msec": "500"}}])
    ts = timeseries(run)
    assert ts["window"].tolist() == [1, 2, 3, 4]
    assert ts.attrs["timing"][0]["window_s"] == 0.5


def test_a_broken_log_is_left_out_with_a_note_naming_its_file_and_line(tmp_path: Path) -> None:
    good = "1000, 400, 0, 0, 0\n2000, 410, 0, 0, 0\n"
    broken = {"t_iops.1.log": "1000, 400, 0, 0, 0\n2000, lots, 0, 0, 0\n", "t_lat.1.log": good}
    run = make_run(tmp_path, [{"files": broken}, {"point": 2, "files": {"t_iops.1.log": good}}])
    ts = timeseries(run)
    [note] = ts.attrs["notes"]
    assert re.search(r"points/0001-r1/t_iops\.1\.log:2: not a fio log line", note)
    # the point's other log and the other point's are read
    assert set(zip(ts["point"], ts["metric"], strict=True)) == {(1, "lat_mean_us"), (2, "iops")}
    run = make_run(tmp_path, [{"files": {"t_iops.1.log": "1000, 400, 7, 0, 0\n"}}], name="ddir")
    ts = timeseries(run)
    assert ts.empty and "t_iops.1.log: data direction 7" in ts.attrs["notes"][0]


def test_a_frame_is_not_a_run_and_the_message_does_not_print_it() -> None:
    frame = pd.DataFrame({"iops": range(100), "point": range(100)})
    with pytest.raises(ResultsError) as refused:
        timeseries(frame)
    message = str(refused.value)
    assert message.startswith("a DataFrame is not a run directory: give its path")
    assert "iops" not in message and "\n" not in message


def test_points_not_ok_and_runs_without_logs(tmp_path: Path) -> None:
    log = "1000, 400, 0, 0, 0\n"
    run = make_run(
        tmp_path,
        [
            {"point": 1, "files": {"t_iops.1.log": log}},
            {"point": 2, "files": {"t_iops.1.log": log}, "status": "failed"},
            {"point": 3, "files": {}},
        ],
    )
    ts = timeseries(run)
    assert ts["point"].tolist() == [1]
    assert [t["point"] for t in ts.attrs["timing"]] == [1, 3]
    empty = timeseries(make_run(tmp_path, [{"files": {}}], name="old"))
    assert empty.empty and list(empty.columns) == list(COLUMNS)
    with pytest.raises(ResultsError, match="not an iobench run directory"):
        timeseries(tmp_path)


def test_log_file_names_follow_the_planner_s_convention() -> None:
    names = {
        "nvme0n1_iops.3.log": ("nvme0n1", "iops", "3"),
        "iobench.dat_clat.12.log": ("iobench.dat", "clat", "12"),
        "my_bw_bw.1.log": ("my_bw", "bw", "1"),
        "shared_lat.log": ("shared", "lat", None),
    }
    for name, expected in names.items():
        match = LOG_FILE.match(name)
        assert match is not None and (match["section"], match["kind"], match["job"]) == expected
    assert LOG_FILE.match("fio.json") is None and LOG_FILE.match("x_hist.1.log") is None


def test_many_logs_parse_in_one_vectorised_pass(tmp_path: Path) -> None:
    """1,000 windows × 5 logs × 4 jobs × 20 points: one buffer, one C parse, numbers intact."""
    windows = np.arange(1, 1001) * 1000
    text = "".join(f"{t}, {400 + (t // 1000) % 7}, 0, 4096, 0\n" for t in windows)
    points = [
        {
            "point": p,
            "files": {
                f"t_{kind}.{job}.log": text
                for kind in ("iops", "bw", "lat", "clat", "slat")
                for job in range(1, 5)
            },
        }
        for p in range(1, 21)
    ]
    run = make_run(tmp_path, points)
    ts = timeseries(run)
    assert len(ts) == 20 * 5 * 4 * 1000
    iops = ts[(ts.metric == "iops") & (ts.point == 7) & (ts.job == 3)]
    assert iops["value"].tolist() == [400 + (t // 1000) % 7 for t in windows]
    assert iops["window"].tolist() == list(range(1, 1001))


# --- a real rate-limited run ------------------------------------------------------------------


RATED = """
version: 1
name: rated
targets:
  - path: {target}
    size: 8M
fio:
  ioengine: null
  rw: randread
  bs: 4k
  runtime: 4
  time_based: 1
  rate_iops: 400
matrix:
  numjobs: [1, 2]
repeat: 3
"""


@pytest.fixture(scope="module")
def rated_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("rated")
    (base / "m.yaml").write_text(RATED.format(target=base / "target.dat"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(base / "state"))
        result = iobench.run(load_matrix(base / "m.yaml"), out=base / "r")
    assert result.counts == {"ok": 6}
    return result.run_dir


@pytest.mark.fio
def test_a_rate_limited_run_logs_at_least_three_windows_at_the_set_rate(rated_run: Path) -> None:
    ts = iobench.timeseries(rated_run)
    iops = ts[ts.metric == "iops"]
    assert (iops.groupby(["point", "repeat", "job"]).size() >= 3).all()
    # rate_iops is per job; a host as busy as this shared one is slows a window now and then
    assert iops["value"].median() == pytest.approx(400, rel=0.02)
    assert iops["value"].between(360, 440).mean() >= 0.75
    assert set(zip(iops["point"], iops["repeat"], strict=True)) == {(p, r) for p in (1, 2) for r in (1, 2, 3)}
    assert ts.groupby("point")["numjobs"].first().tolist() == [1, 2]
    files = sorted(p.name for p in (rated_run / "points" / "0002-r1").glob("*.log"))
    assert files == sorted(
        f"target.dat_{k}.{j}.log" for k in ("bw", "iops", "lat", "clat", "slat") for j in (1, 2)
    )


@pytest.mark.fio
def test_the_tidy_frame_says_every_4_s_repeat_is_too_short_to_judge(rated_run: Path) -> None:
    """4 s at 1 s windows: fewer than the 5 windows SNIA's rule judges, so no repeat reads as steady."""
    frame = iobench.load(rated_run)
    assert frame["steady"].dtype == "boolean" and frame["steady"].isna().all(), frame[
        "steady_reason"
    ].tolist()
    assert frame["steady_reason"].str.contains(r"^too short to judge \([34] windows of 1 s, 5 needed\)").all()
    assert "steady" not in iobench.plots.parameter_columns(frame)
    summary = iobench.summarize(frame)
    assert summary["unsteady"].tolist() == [0, 0] and summary["n"].tolist() == [3, 3]


@pytest.mark.fio
def test_per_job_logs_0_with_real_fio(tmp_path: Path) -> None:
    job = tmp_path / "job.fio"
    job.write_text(
        "[global]\nioengine=null\nsize=1m\nrw=randread\ntime_based=1\nruntime=2500ms\nrate_iops=100\n"
        "numjobs=3\nper_job_logs=0\nlog_avg_msec=500\n[t]\nfilename=/tmp/iobench-null\n"
        "write_iops_log=t\nwrite_lat_log=t\n"
    )
    done = run_process(
        ["fio", "--output-format=json", "--output=fio.json", "job.fio"], cwd=tmp_path, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "t_iops.log").is_file() and not list(tmp_path.glob("t_iops.*.log"))
    run = make_run(
        tmp_path,
        [{"files": {p.name: p for p in tmp_path.iterdir() if p.suffix in (".log", ".fio", ".json")}}],
        name="shared",
    )
    ts = timeseries(run)
    iops = ts[ts.metric == "iops"]
    assert sorted(set(iops["job"])) == [1, 2, 3]
    assert (iops.groupby("job").size() >= 3).all()
    assert iops.groupby("job")["t_s"].apply(lambda t: t.is_monotonic_increasing).all()
    # most windows at the set rate (a loaded 2-CPU machine delays fio now and then)
    assert pd.Series(iops["value"]).between(80, 120).mean() >= 0.7

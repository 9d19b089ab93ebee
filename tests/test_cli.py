"""The command line: exit codes, messages without tracebacks, and data that never becomes code."""

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
from closedpipe import run_into_closed_pipe
from typer.testing import CliRunner

from iobench.cli.commands import app

pytestmark = pytest.mark.fio
runner = CliRunner()
COMMANDS = ["run", "plan", "topology", "parse", "restore", "system show", "system tune", "system reset"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_and_is_in_the_readme(command: str) -> None:
    result = runner.invoke(app, [*command.split(), "--help"])
    assert result.exit_code == 0 and "Usage" in result.output
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert f"iobench {command}" in readme


def test_plan_json(null_matrix: Callable[..., Path]) -> None:
    result = runner.invoke(app, ["plan", str(null_matrix()), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [d["point"] for d in data] == [1, 2, 3, 4]
    assert all(d["status"] == "run" and d["processes"][0]["argv"] for d in data)


def test_plan_summarizes_the_points_and_why_some_are_skipped(null_matrix: Callable[..., Path]) -> None:
    path = null_matrix()
    path.write_text(path.read_text().replace("  numjobs: [1, 2]\n", "  binding: [none, 'node:9']\n"))
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "2 points to run, 2 skipped:" in lines
    points = [line.split() for line in lines if line.startswith("  ")]
    assert [p[:3] for p in points] == [
        ["1", "iodepth=1", "binding=none"],
        ["2", "iodepth=1", "binding=node:9"],
        ["3", "iodepth=2", "binding=none"],
        ["4", "iodepth=2", "binding=node:9"],
    ]
    assert all(
        line.endswith("target node 0") or "skipped: " in line for line in lines if line.startswith("  ")
    )
    assert sum("skipped: " in line and "node" in line.split("skipped: ")[1] for line in lines) == 2
    # No job file and no fio command line unless asked for.
    assert "[global]" not in result.stdout and "--output-format" not in result.stdout
    assert "add --jobfiles" in result.stdout


def test_plan_shows_argv_and_job_files_on_request(null_matrix: Callable[..., Path]) -> None:
    result = runner.invoke(app, ["plan", str(null_matrix()), "--jobfiles"])
    assert result.exit_code == 0
    assert "--output-format=json+ --output=fio.json job.fio" in result.stdout
    assert "[global]" in result.stdout and "0004-r1  run  iodepth=2 numjobs=2" in result.stdout


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("command", ["plan", "plan --jobfiles", "topology", "parse"])
def test_a_closed_pipe_ends_a_command_quietly_with_0(
    command: str, unbuffered: bool, null_matrix: Callable[..., Path]
) -> None:
    """`iobench plan M | head -1`: the reader leaving early is no error."""
    fixtures = sorted(str(p) for p in (Path(__file__).parent / "data" / "fio" / "fio-3.33").glob("*.json"))
    argv = {
        "plan": ["plan", str(null_matrix())],
        "plan --jobfiles": ["plan", str(null_matrix()), "--jobfiles"],
        "topology": ["topology"],
        "parse": ["parse", *fixtures],
    }[command]
    done = run_into_closed_pipe(argv, unbuffered=unbuffered)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_a_run_whose_reader_left_runs_to_its_end(
    unbuffered: bool, null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    """`iobench run M | head -1`: the display stops, not the run; its exit status is the run's."""
    path = null_matrix()
    path.write_text(path.read_text().replace("  numjobs: [1, 2]\n", ""))
    done = run_into_closed_pipe(["run", str(path), "--out", str(tmp_path / "r")], unbuffered=unbuffered)
    assert (done.returncode, done.stderr) == (0, "")
    [run_dir] = (tmp_path / "r").iterdir()
    assert (run_dir / "results.parquet").is_file() and len(list((run_dir / "points").iterdir())) == 2


def test_invalid_matrix_exits_2_without_traceback(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    path = write_matrix("version: 1\nname: x\nrepeats: 2\ntargets: [{path: /tmp/x, size: 1M}]\n")
    out = tmp_path / "results"
    for command in (["run", str(path), "--out", str(out)], ["plan", str(path)]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2
        assert "matrix.yaml:3:1: repeats: unknown key" in result.output
        assert "Traceback" not in result.output
    assert not out.exists()


def test_missing_matrix_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "cannot read the matrix" in result.output


CODE_ROUTES = {
    "exec_prerun": "fio:\n  exec_prerun: touch {marker}\n",
    "exec_postrun": "fio:\n  exec_postrun: touch {marker}\n",
    "exec_engine": "fio:\n  ioengine: exec\n  program: touch\n  arguments: {marker}\n",
    "external_engine": "fio:\n  ioengine: external:{marker}.so\n",
    "include": "fio:\n  include: {marker}\n",
    "newline_in_option": 'fio:\n  description: "x\\nexec_prerun=touch {marker}"\n',
    "newline_in_axis": 'matrix:\n  rw: ["read\\nexec_prerun=touch {marker}"]\n',
    "newline_in_path": 'targets: [{{path: "{marker}.dat\\nexec_prerun=touch {marker}", size: 1M}}]\n',
    "control_char_in_axis": 'matrix:\n  bs: ["4k\\u0007"]\n',
    "filename_override": "fio:\n  filename: {marker}\n",
}


@pytest.mark.parametrize("route", sorted(CODE_ROUTES))
def test_a_matrix_is_data_not_code(route: str, write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    body = CODE_ROUTES[route].format(marker=marker)
    targets = "" if "targets:" in body else f"targets: [{{path: {tmp_path}/t.dat, size: 1M}}]\n"
    path = write_matrix(f"version: 1\nname: code\n{targets}{body}")
    out = tmp_path / "results"
    for command in (["run", str(path), "--out", str(out)], ["plan", str(path)]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matrix.yaml"]
    assert not marker.exists()


def test_name_with_newline_is_refused(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    path = write_matrix(f'version: 1\nname: "a\\nb"\ntargets: [{{path: {tmp_path}/t.dat, size: 1M}}]\n')
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "invalid run name" in result.output
    assert not (tmp_path / "r").exists()


def test_run_prints_plain_lines_and_where_results_are(
    null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    result = runner.invoke(app, ["run", str(null_matrix()), "--out", str(tmp_path / "r"), "--figures"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("iobench: 4 runs of nulltest -> ")
    assert sum(1 for line in lines if line.startswith("[") and " ok " in line and "IOPS" in line) == 4
    assert any(line.startswith("results: ") and "(4 ok)" in line for line in lines)
    [figures] = [line for line in lines if line.startswith("figures: ")]
    drawn = [Path(f) for f in figures.removeprefix("figures: ").split()]
    assert drawn and all(f.is_file() and f.parent.name == "figures" for f in drawn)


def test_figures_are_drawn_only_when_asked(null_matrix: Callable[..., Path], tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", str(null_matrix()), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    [run_dir] = (tmp_path / "r").iterdir()
    assert (run_dir / "results.parquet").is_file() and not (run_dir / "figures").exists()
    assert f"figures: `iobench report {run_dir}` draws them (or run with --figures)" in result.stdout


def test_quiet_prints_only_the_run_directory(null_matrix: Callable[..., Path], tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", str(null_matrix()), "--out", str(tmp_path / "r"), "--quiet"])
    assert result.exit_code == 0
    assert Path(result.stdout.strip()).parent == tmp_path / "r"


def test_sigterm_saves_finished_points_and_exits_130(
    null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    path = null_matrix()
    path.write_text(path.read_text().replace("runtime: 1", "runtime: 2"))
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "iobench", "run", str(path), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(out.glob("*/points/0001-r1/meta.json")):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "--resume" in stderr and "Traceback" not in stderr
    run_dir = next(out.iterdir())
    assert (run_dir / "results.parquet").is_file()
    assert json.loads((run_dir / "points" / "0001-r1" / "meta.json").read_text())["status"] == "ok"
    assert not any(os.path.basename(p).startswith(".") for p in os.listdir(run_dir / "points"))


def test_topology_json() -> None:
    result = runner.invoke(app, ["topology", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert set(data) >= {"nodes", "cores", "devices"} and data["nodes"][0]["cpus"]


def test_parse_writes_csv(tmp_path: Path) -> None:
    fixture = Path(__file__).parent / "data" / "fio" / "fio-3.33" / "numjobs.json"
    out = tmp_path / "out.csv"
    result = runner.invoke(app, ["parse", str(fixture), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().count("\n") == 4  # header + 3 jobs
    assert result.stdout == f"{out}: 3 rows; source: relative to {fixture.parent}\n"
    header = out.read_text().splitlines()[0].split(",")
    assert {"bs", "iodepth", "numjobs", "rw", "ioengine"} <= set(header)
    assert {line.split(",")[0] for line in out.read_text().splitlines()[1:]} == {fixture.name}
    bad = runner.invoke(app, ["parse", str(tmp_path / "missing.json")])
    assert bad.exit_code == 2 and "no such file" in bad.output


def test_run_wait_says_whose_run_it_waits_for_and_runs_once_it_ends(
    null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    from iobench.matrix.model import load_matrix
    from iobench.planner.plans import plan
    from iobench.system.locks import device_lock

    path = null_matrix()
    disks = sorted({d for loc in plan(load_matrix(path)).locations.values() for d in loc.disks})
    assert disks, "the target's file lies on a disk, which the run locks"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    # A bare --wait before the matrix: no limit, and the matrix is still the matrix.
    argv = [sys.executable, "-m", "iobench", "run", "--wait", str(path), "--out", str(tmp_path / "r"), "-q"]
    with device_lock(disks):
        child = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert child.stderr is not None
            said = child.stderr.readline()
        except BaseException:
            child.kill()
            raise
    out, err = child.communicate(timeout=120)
    assert said.startswith(f"iobench: waiting for another iobench run (pid {os.getpid()}, user ")
    assert said.rstrip().endswith(f"to let go of {disks[0]}, until it ends")
    assert child.returncode == 0, err
    assert Path(out.strip()).parent == tmp_path / "r"


def test_a_run_counts_skipped_points_once_apart_from_the_runs(
    null_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    path = null_matrix("repeat: 2\n")
    path.write_text(path.read_text().replace("  numjobs: [1, 2]\n", "  binding: [none, 'node:9']\n"))
    result = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("iobench: 4 runs of nulltest, 2 points skipped (`iobench plan` says why) -> ")
    skipped = [line for line in lines if line.startswith("[") and " skipped " in line]
    assert len(skipped) == 2 and len({line.split()[1].split("-")[0] for line in skipped}) == 2
    assert any(line.startswith("results: ") and line.endswith("(4 ok; 2 points skipped)") for line in lines)


def test_plan_says_which_placements_coincide_here_and_why(
    write_matrix: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from sysfs_snapshots import SnapshotCache

    root = SnapshotCache(tmp_path_factory).root("16em64t-4s2c2t")  # one NUMA node, SMT2
    path = write_matrix(
        "version: 1\nname: same\ntargets: [{path: /dev/nvme0n1, home_node: 0}]\n"
        "fio: {ioengine: libaio, direct: 1, rw: randread, bs: 4k}\n"
        "matrix: {binding: [local, none], iodepth: [1, 2]}\n"
    )
    result = runner.invoke(app, ["plan", str(path), "--fsroot", str(root)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "2 points to run, 2 the same as another here (not run again):" in lines
    why = lines.index("placements that coincide here, so each such point runs once:") + 1
    assert lines[why] == "  one NUMA node (node 0): binding none runs on the same CPUs and memory as local"
    points = [line.split() for line in lines if line.startswith("  ") and "binding=" in line]
    assert [p[-3:] for p in points if "binding=none" in p] == [["as", "point", "1"], ["as", "point", "2"]]

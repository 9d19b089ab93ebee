"""What a host needs: python3 (for the agent) and fio, nothing else — over real SSH, namespace hosts.

A host without awk, sed or busybox runs a sweep with its telemetry; one without python3 is refused
before anything runs (exit 2, naming the host and what is missing).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from netns_hosts import NetnsHost, NetnsHosts

import iobench
from iobench.matrix.model import load_matrix
from iobench.runner.sweep import run

pytestmark = [pytest.mark.root, pytest.mark.fio]


def _matrix(path: Path, hosts: list[tuple[NetnsHost, str]], tmp_path: Path) -> Path:
    entries = "".join(
        f"  - name: {name}\n    ssh: {h.ssh}\n    ssh_options: {json.dumps(list(h.ssh_options))}\n"
        f"    targets: [{{path: {tmp_path / name}.dat, size: 8M}}]\n"
        for h, name in hosts
    )
    path.write_text(
        "version: 1\nname: programs\nfio:\n"
        + textwrap.indent("ioengine: psync\nrw: randread\nbs: 4k\nruntime: 2\ntime_based: 1\n", "  ")
        + "hosts:\n"
        + entries
        + "matrix:\n  iodepth: [1]\ntelemetry: {interval: 0.25}\n"
    )
    return path


def _runs(hosts: NetnsHosts, host: NetnsHost, *argv: str) -> int:
    return subprocess.run(
        hosts.ssh_argv(host, *argv), capture_output=True, timeout=30, check=False
    ).returncode


def test_a_host_without_awk_sed_or_busybox_runs_a_sweep_with_its_telemetry(
    netns_hosts: Callable[..., NetnsHosts], tmp_path: Path
) -> None:
    lean = netns_hosts(1, names=["lean"], hidden=["awk", "mawk", "gawk", "sed", "busybox"])
    (host,) = lean
    for program in (["awk", "BEGIN{}"], ["sed", "-n", "p", "/dev/null"], ["busybox", "true"]):
        assert _runs(lean, host, *program) != 0, f"{program[0]} still runs on the lean host"
    assert _runs(lean, host, "python3", "-c", "pass") == 0
    result = run(
        load_matrix(_matrix(tmp_path / "matrix.yaml", [(host, "l")], tmp_path)), out=tmp_path / "results"
    )
    assert result.counts == {"ok": 1}
    frame = result.frame
    assert frame is not None and set(frame["host"]) == {"l"}
    assert frame["cpu_busy_pct"].notna().all() and frame["top_thread"].notna().all()
    samples = iobench.telemetry(result.run_dir)
    mine = samples[samples["host"] == "l"]
    assert {"cpu", "thread", "mem"} <= set(mine["source"])
    assert mine["t_s"].nunique() >= 4  # every 0.25 s over 2 s


def test_a_host_without_python3_is_refused_before_anything_runs(
    netns_hosts: Callable[..., NetnsHosts], tmp_path: Path
) -> None:
    (fine,) = netns_hosts(1, names=["fine"])
    bare_hosts = netns_hosts(1, names=["bare"], hidden=["python3"])
    (bare,) = bare_hosts
    assert _runs(bare_hosts, bare, "python3", "-c", "pass") != 0
    matrix = _matrix(tmp_path / "matrix.yaml", [(fine, "f"), (bare, "b")], tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "iobench", "run", str(matrix), "--out", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"host b ({bare.ssh}): python3 is not installed (iobench needs 3.9 or newer there)" in done.stderr
    assert "host f" not in done.stderr
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").glob("*/points/*"))
    assert not (tmp_path / "f.dat").exists()  # nothing ran, not even on the host that could

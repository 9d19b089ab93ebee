"""Placement is verified from /proc, not assumed."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from iobench.matrix.model import load_matrix
from iobench.runner.point import WATCH_POLL_S, WATCH_QUICK_S
from iobench.runner.sweep import run
from iobench.system.observe import GroupWatcher, Observed, check_placement
from iobench.system.process import run_process

needs_numactl = pytest.mark.skipif(shutil.which("numactl") is None, reason="needs numactl")


def watcher_with(*items: Observed) -> GroupWatcher:
    watcher = GroupWatcher()
    watcher.seen = {o.pid: o for o in items}
    return watcher


def obs(pid: int, cpus: tuple[int, ...], *, leader: bool = False, policy: str | None = "bind:0") -> Observed:
    return Observed(pid, "fio", leader, cpus, "0", policy)


def test_agreeing_observation_passes() -> None:
    w = watcher_with(obs(10, (0, 1), leader=True), obs(11, (0,)), obs(12, (1,)))
    assert check_placement(w, cpus=(0, 1), job_cpus=((0,), (1,)), mem_node=0) is None
    assert w.cpus() == "0-1"
    assert [o.pid for o in w.workers()] == [11, 12]


def test_cpus_outside_the_plan_are_reported() -> None:
    w = watcher_with(obs(10, (0, 1, 2, 3), leader=True))
    assert "outside the planned 0-1" in (check_placement(w, cpus=(0, 1), job_cpus=None, mem_node=None) or "")


def test_unpinned_jobs_are_reported() -> None:
    w = watcher_with(obs(10, (0, 1), leader=True), obs(11, (0, 1)), obs(12, (0, 1)))
    problem = check_placement(w, cpus=(0, 1), job_cpus=((0,), (1,)), mem_node=None)
    assert problem is not None and "job 0 should run on CPUs 0" in problem


def test_wrong_memory_policy_is_reported() -> None:
    w = watcher_with(obs(10, (0,), leader=True, policy="default"))
    assert "bound to node 0" in (check_placement(w, cpus=(0,), job_cpus=None, mem_node=0) or "")


def fake_process(proc: Path, pid: int, ppid: int, cpus: str, policy: str) -> None:
    base = proc / str(pid)
    base.mkdir(parents=True)
    (base / "stat").write_text(f"{pid} (fio) S {ppid} {pid} {pid} 0\n")
    (base / "status").write_text(f"Name:\tfio\nCpus_allowed_list:\t{cpus}\nMems_allowed_list:\t0-1\n")
    (base / "numa_maps").write_text(f"7f0000000000 {policy} anon=1\n")


def test_watcher_sees_every_process_at_once_and_walks_workers_maps_first(tmp_path: Path) -> None:
    """A slow numa_maps walk must never hide a short-lived worker: status first, one walk per poll."""
    fake_process(tmp_path, 10, 1, "0-1", "bind:0")
    fake_process(tmp_path, 11, 10, "0", "bind:0")
    fake_process(tmp_path, 12, 10, "1", "bind:0")
    watcher = GroupWatcher(proc=str(tmp_path))
    watcher(10)
    assert {pid: o.policy for pid, o in watcher.seen.items()} == {10: None, 11: "bind:0", 12: None}
    shutil.rmtree(tmp_path / "11")
    watcher(10)
    assert {pid: o.policy for pid, o in watcher.seen.items()} == {10: None, 11: "bind:0", 12: "bind:0"}
    watcher(10)
    assert watcher.seen[10].policy == "bind:0"
    assert [o.cpus for o in watcher.workers()] == [(0,), (1,)]


def test_nothing_seen_is_not_a_contradiction() -> None:
    assert check_placement(GroupWatcher(), cpus=(0,), job_cpus=None, mem_node=0) is None


@needs_numactl
def test_group_watcher_reads_a_real_bound_process(tmp_path: Path) -> None:
    # The watcher keeps only fio's processes (by name): a copy of sleep named fio-sleep is one.
    sleeper = tmp_path / "fio-sleep"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", sleeper)
    proc = subprocess.Popen(
        ["numactl", "--physcpubind=0", "--membind=0", "--", str(sleeper), "30"], start_new_session=True
    )
    try:
        watcher = GroupWatcher()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.pid not in watcher.seen:
            watcher(proc.pid)
            time.sleep(0.02)
        seen = watcher.seen[proc.pid]
        assert (seen.comm, seen.leader, seen.cpus) == ("fio-sleep", True, (0,))
        assert seen.policy is not None and "bind:0" in seen.policy
    finally:
        proc.kill()
        proc.wait()


PLACED = """
version: 1
name: placed
targets: [{{path: {target}, size: 8M}}]
fio: {{ioengine: "null", rw: randread, runtime: 1, time_based: 1, numjobs: 2}}
matrix:
  binding: ["node:0"]
  placement: [diff-cores]
"""


@pytest.mark.fio
@needs_numactl
def test_pinned_jobs_run_where_planned(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    result = run(load_matrix(write_matrix(PLACED.format(target=tmp_path / "t.dat"))), out=tmp_path / "r")
    assert result.counts == {"ok": 1}, result.frame
    frame = result.frame
    assert frame is not None
    assert sorted(frame["cpus_observed"]) == ["0", "1"]
    assert frame["cpus"].eq("0-1").all() and frame["cpu_node"].eq(0).all()


@pytest.mark.fio
@needs_numactl
def test_a_process_that_escaped_its_placement_fails_the_point(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    """Run the real fio, but with numactl told something else than planned: the point must fail."""

    def misplacing(argv: tuple[str, ...], **kwargs: Any) -> Any:
        changed = tuple("--physcpubind=1" if a.startswith("--physcpubind=") else a for a in argv)
        return run_process(changed, **kwargs)

    path = write_matrix(PLACED.format(target=tmp_path / "t.dat").replace("numjobs: 2", "numjobs: 1"))
    result = run(load_matrix(path), out=tmp_path / "r", executor=misplacing)
    assert result.counts == {"failed": 1}
    frame = result.frame
    assert frame is not None
    assert "placement not as planned" in frame["reason"].iloc[0]


@pytest.mark.fio
def test_the_watcher_looks_quickly_until_every_worker_is_seen(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    """Quick looks while fio's workers are not all seen (short points), the usual pace once they are."""
    asked: list[float | None] = []

    def watched(argv: tuple[str, ...], **kwargs: Any) -> Any:
        poll = kwargs.pop("poll")
        first = kwargs.pop("poll_interval")

        def recording(pid: int) -> float | None:
            interval = poll(pid)
            asked.append(interval)
            return interval

        asked.append(first)
        return run_process(argv, poll=recording, poll_interval=first, **kwargs)

    path = write_matrix(
        f"version: 1\nname: w\ntargets: [{{path: {tmp_path / 't.dat'}, size: 8M}}]\n"
        "fio: {ioengine: 'null', rw: randread, runtime: 2, time_based: 1, numjobs: 3}\n"
    )
    result = run(load_matrix(path), out=tmp_path / "r", executor=watched)
    assert result.counts == {"ok": 1}
    meta = next((tmp_path / "r").glob("*/points/*/meta.json")).read_text()
    assert meta.count('"leader": false') == 3
    quick = asked.index(WATCH_POLL_S)
    assert quick >= 1 and set(asked[:quick]) == {WATCH_QUICK_S}
    assert set(asked[quick:]) == {WATCH_POLL_S}  # all seen: back to the usual pace

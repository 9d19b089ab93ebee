"""The process wrapper: argv only, own group, timeouts that kill the whole tree."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from iobench.system import procfs
from iobench.system.hostfs import SystemRoot
from iobench.system.process import (
    CommandNotFound,
    children_by_scan,
    descendants,
    run_process,
)

# A parent that starts a grandchild which would outlive it, like numactl → fio → workers.
TREE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_output_and_status_are_returned() -> None:
    done = run_process(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"]
    )
    assert (done.returncode, done.stdout.strip(), done.stderr.strip(), done.timed_out) == (
        3,
        "out",
        "err",
        False,
    )


def test_no_shell_interpretation() -> None:
    done = run_process(["echo", "a;", "$(id)", ">", "/tmp/x"])
    assert done.stdout.strip() == "a; $(id) > /tmp/x"


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    done = run_process([sys.executable, "-c", TREE, str(pidfile)], timeout=1.5)
    assert done.timed_out
    assert time.monotonic() - started < 15
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild)


def test_interrupt_stops_the_group_and_propagates(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"

    def poll(pid: int) -> None:
        if pidfile.exists() and pidfile.read_text():
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_process([sys.executable, "-c", TREE, str(pidfile)], poll=poll, poll_interval=0.1, timeout=30)
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 8
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild)


def test_poll_sees_the_running_child() -> None:
    seen: list[int] = []
    done = run_process(
        [sys.executable, "-c", "import time; time.sleep(0.6)"], poll=seen.append, poll_interval=0.1
    )
    assert done.returncode == 0 and seen


def test_poll_sets_when_it_is_called_next() -> None:
    """What ``poll`` returns is the wait before its next call; None keeps ``poll_interval``."""
    times: list[float] = []

    def poll(pid: int) -> float | None:
        times.append(time.monotonic())
        return 0.02 if len(times) < 10 else None

    run_process([sys.executable, "-c", "import time; time.sleep(1.5)"], poll=poll, poll_interval=0.5)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(times) >= 11
    assert max(gaps[:8]) < 0.3  # the quick calls asked for
    assert gaps[9] >= 0.45  # then back to poll_interval


def test_missing_program_is_a_clear_error() -> None:
    with pytest.raises(CommandNotFound, match="cannot execute '/nonexistent/fio'"):
        run_process(["/nonexistent/fio"])


def test_environment_is_explicit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOBENCH_LEAK", "1")
    done = run_process([sys.executable, "-c", "import os; print(sorted(os.environ))"])
    assert "IOBENCH_LEAK" not in done.stdout
    assert threading.active_count() >= 1


def test_descendants_follow_the_kernels_children_lists_like_a_full_scan() -> None:
    """Two sleeping grandchildren under a shell, one of them in its own session like fio's workers."""
    import subprocess

    script = "sleep 5 & setsid sleep 5 & wait"
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        while len(descendants(proc.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        tree = descendants(proc.pid)
        assert tree[0] == proc.pid and len(tree) == 3
        scan = children_by_scan("/proc")
        assert all(sorted(procfs.task_children(SystemRoot(), pid)) == sorted(scan[pid]) for pid in tree)
    finally:
        for pid in descendants(proc.pid)[1:]:
            os.kill(pid, 9)
        proc.kill()
        proc.wait()


def test_descendants_of_a_finished_process_is_just_itself() -> None:
    assert descendants(2**22 + 1) == [2**22 + 1]


def test_a_timeout_returns_even_when_an_orphan_keeps_the_pipes_open() -> None:
    # The subshell exits at once, so its setsid'd sleep is reparented away from our tree. It holds
    # the pipes for an hour: that it is still there when run_process returns shows no wait for them.
    seconds = f"3600.{os.getpid()}"
    done = run_process(["sh", "-c", f"(setsid sleep {seconds} &); sleep 30"], timeout=1)
    orphans = [
        pid
        for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
        if _cmdline(pid) == ["sleep", seconds]
    ]
    for pid in orphans:
        os.kill(pid, 9)
    assert done.timed_out
    assert len(orphans) == 1


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def test_a_slow_poll_does_not_turn_a_finished_process_into_a_timeout() -> None:
    """A poll that outlasts the deadline (a slow look at /proc, an import) finds the child done, not late."""

    def slow(pid: int) -> None:
        time.sleep(1.5)  # the child printed and ended meanwhile; the deadline passed

    done = run_process(
        [sys.executable, "-c", "import time; time.sleep(0.3); print('all of it')"],
        poll=slow,
        poll_interval=0.05,
        timeout=1.0,
    )
    assert (done.timed_out, done.returncode, done.stdout.strip()) == (False, 0, "all of it")

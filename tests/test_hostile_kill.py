"""iobench killed outright (SIGKILL) at awkward moments of a run on a host: what keeps running afterwards.

On the host everything of the run ends with its agent's SSH session (its input
ends when iobench dies): the agent lets go of the disks' locks and stops the fio
server and its jobs. Here, the processes iobench started in sessions of their own outlive
it unless their input ends too. Killed while the host's fio server starts,
while its disks are locked, and while a point runs; then, within a bounded
time, nothing of the run may be left on the host or here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from netns_hosts import NetnsHost

pytestmark = [pytest.mark.root, pytest.mark.fio]

SETTLE_S = 15.0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] not in "ZX"
    except (OSError, IndexError):
        return False


def _children_here(parent: int) -> list[int]:
    """Processes here whose control folder names ``parent`` as its owner (the run's ssh processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        line = _cmdline(int(entry.name))
        if "ControlPath=" not in line:
            continue
        folder = Path(line.split("ControlPath=", 1)[1].split()[0]).parent
        try:
            owner = json.loads((folder / "owner").read_text())
        except (OSError, ValueError):
            continue
        if owner.get("pid") == parent and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _matrix(host: NetnsHost, tmp_path: Path) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: killed
            fio: {{ioengine: "null", rw: randread, bs: 4k, runtime: 2, time_based: 1}}
            hosts:
              - name: a
                ssh: {host.ssh}
                ssh_options: {json.dumps(list(host.ssh_options))}
                targets: [{{path: {tmp_path / "a.dat"}, size: 8M}}]
            matrix: {{iodepth: [1, 2, 4]}}
            """
        )
    )
    return path


def _on_host(host: NetnsHost) -> list[str]:
    return [
        line for line in (_cmdline(p) for p in host.session_pids()) if line and not line.startswith("sshd")
    ]


def _locked(host: NetnsHost) -> bool:
    """Whether a lock file of the host's (in its own home) is held (``/proc/locks``)."""
    folder = host.directory / "home" / ".local" / "state" / "iobench" / "locks"
    inodes = {str(p.stat().st_ino) for p in folder.glob("*.lock")} if folder.exists() else set()
    held = (line.split() for line in Path("/proc/locks").read_text().splitlines() if " FLOCK " in line)
    return any(len(words) > 5 and words[5].rsplit(":", 1)[-1] in inodes for words in held)


MOMENTS: dict[str, Callable[[NetnsHost, Path], bool]] = {
    "server-starting": lambda host, out: any("--server=sock:" in line for line in _on_host(host)),
    "disks-locked": lambda host, out: _locked(host),
    "point-running": lambda host, out: bool(list(out.glob("*/points/.*.partial"))),
}


@pytest.mark.parametrize("moment", MOMENTS.values(), ids=MOMENTS.keys())
def test_nothing_of_a_killed_run_keeps_running_here_or_on_the_host(
    moment: Callable[[NetnsHost, Path], bool], netns_hosts: Callable[..., object], tmp_path: Path
) -> None:
    host: NetnsHost = netns_hosts(1)["a"]  # type: ignore[index]
    out = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "iobench", "run", str(_matrix(host, tmp_path)), "--out", str(out), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    left: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not moment(host, out) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert proc.poll() is None, "the run ended before the moment came"
        proc.send_signal(signal.SIGKILL)  # a crash: no handler runs, no cleanup
        proc.wait(timeout=10)
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline and (_on_host(host) or _children_here(proc.pid)):
            time.sleep(0.2)
        left = _children_here(proc.pid)
        assert _on_host(host) == [], "a killed run left processes on the host"
        assert left == [], "a killed run left processes here: " + "; ".join(_cmdline(p)[:120] for p in left)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for pid in left or _children_here(proc.pid):
            os.kill(pid, signal.SIGTERM)  # ours: the run this test started made them

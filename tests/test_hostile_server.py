"""An fio server given in the matrix (``server:``) must be out of other users' reach, like iobench's own.

fio's server has no authentication and creates its socket with mode 0777:
whoever can reach the socket's folder drives it (``exec_prerun`` runs as the
server's user). iobench's own servers live in a folder of mode 0700; a
server the matrix names is used only when its folder is as private (the SSH
user's, no access for group or others). Tried on a namespace host with a
real ``fio --server`` and user ``nobody`` knocking.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from netns_hosts import NetnsHost

pytestmark = [pytest.mark.root, pytest.mark.fio]

CONNECT = (
    "import socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
    "try:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print(e.strerror)\nelse:\n    print('connected')"
)


def iobench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iobench", *args], capture_output=True, text=True, timeout=300, check=False
    )


def as_nobody(socket_path: Path) -> str:
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", CONNECT, str(socket_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.stdout.strip() or done.stderr.strip()


@pytest.fixture
def server_in(netns_hosts: Callable[..., object]) -> Iterator[Callable[[str, int], tuple[NetnsHost, Path]]]:
    """Start ``fio --server`` on a namespace host, its socket in a new folder (of ``mode``) others may reach.

    The folder lies in a fresh folder of the shared temporary folder that
    anyone may enter (pytest's own are private to root), removed afterwards.
    """
    started: list[subprocess.Popen[bytes]] = []
    host: NetnsHost = netns_hosts(1)["a"]  # type: ignore[index]
    base = Path(tempfile.mkdtemp(prefix="iobench-hostile-server-"))
    base.chmod(0o755)

    def start(name: str, mode: int) -> tuple[NetnsHost, Path]:
        folder = base / name
        folder.mkdir(mode=mode)
        folder.chmod(mode)
        sock = folder / "fio.sock"
        proc = subprocess.Popen(
            ["ip", "netns", "exec", host.netns, "fio", f"--server=sock:{sock}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.append(proc)
        deadline = time.monotonic() + 20
        while not sock.is_socket() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sock.is_socket()
        return host, sock

    try:
        yield start
    finally:
        for proc in started:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(base, ignore_errors=True)


def matrix_for(host: NetnsHost, sock: Path, target: Path) -> str:
    return (
        "version: 1\nname: given-server\nfio:\n  ioengine: null\n  rw: randread\n  bs: 4k\n"
        f"hosts:\n  - name: a\n    ssh: {host.ssh}\n    ssh_options: {json.dumps(list(host.ssh_options))}\n"
        f"    server: {sock}\n    targets: [{{path: {target}, size: 1M}}]\n"
    )


def test_a_given_server_others_can_reach_is_refused(
    server_in: Callable[[str, int], tuple[NetnsHost, Path]],
    write_matrix: Callable[..., Path],
    tmp_path: Path,
) -> None:
    host, sock = server_in("shared", 0o755)
    assert as_nobody(sock) == "connected"  # the hole: anyone on the host drives this server
    done = iobench("plan", str(write_matrix(matrix_for(host, sock, tmp_path / "a.dat"))))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert f"{sock.parent}" in done.stderr and "other users" in done.stderr, done.stderr


def test_a_given_server_in_a_private_folder_is_used(
    server_in: Callable[[str, int], tuple[NetnsHost, Path]],
    write_matrix: Callable[..., Path],
    tmp_path: Path,
) -> None:
    host, sock = server_in("private", 0o700)
    assert as_nobody(sock) == os.strerror(13)  # Permission denied
    done = iobench("plan", str(write_matrix(matrix_for(host, sock, tmp_path / "a.dat"))))
    assert done.returncode == 0, done.stderr

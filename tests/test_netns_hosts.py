"""The namespace test hosts (tests/netns_hosts.py): reachable by name, confined, always torn down."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from netns_hosts import (
    DIR_PREFIX,
    SUBNETS,
    Listener,
    NetnsHosts,
    link_names,
    missing_requirements,
    netns_hosts,
    netns_names,
    parse_listeners,
    pids_in_netns,
)

pytestmark = pytest.mark.root


def _ssh(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _running(pid: int) -> bool:
    """Not exited: zombies (waiting for this machine's init to reap them) do not count."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _gone(hosts: NetnsHosts, pids: list[int]) -> None:
    netns, links = set(netns_names()), set(link_names())
    for host in hosts:
        assert host.netns not in netns
        assert host.veth_root not in links and host.veth_host not in links
    alive = [p for p in pids if _running(p)]
    assert alive == [], f"processes of the test hosts still running: {alive}"


def test_two_hosts_by_name_each_listening_on_its_own_address_only(
    netns_hosts: Callable[..., NetnsHosts],
) -> None:
    our_hostname = socket.gethostname()
    hosts = netns_hosts(2)
    assert hosts.names == ["a", "b"]
    for host in hosts:
        via_config = _ssh(hosts.ssh_argv(host, "hostname"))
        assert (via_config.returncode, via_config.stdout.strip()) == (0, host.name), via_config.stderr
        # The same host as a matrix names it: a destination plus `ssh -o` options, no config file.
        via_options = _ssh(
            ["ssh", "-oBatchMode=yes", *(f"-o{o}" for o in host.ssh_options), host.ssh, "hostname"]
        )
        assert (via_options.returncode, via_options.stdout.strip()) == (0, host.name), via_options.stderr

        listening = host.listeners()
        assert [(x.address, x.port) for x in listening] == [(host.address, 22)]
        assert listening[0].processes == ("sshd",) and not listening[0].loopback
        assert ipaddress.ip_address(host.address) in SUBNETS
        assert ipaddress.ip_address(host.address) in ipaddress.ip_network(f"{host.gateway}/30", strict=False)
    a, b = hosts["a"], hosts["b"]
    assert a.address != b.address and set(a.pids()).isdisjoint(b.pids())
    # Like separate machines: each host sees its own processes (sshd is its pid 1) and its own home.
    mark = ".iobench-netns-hosts-mark"
    seen = _ssh(hosts.ssh_argv("a", f"cat /proc/1/comm; ps -e --no-headers | wc -l; touch ~/{mark}; ls -A ~"))
    comm, count, *home = seen.stdout.split()
    assert (seen.returncode, comm, home) == (0, "sshd", [mark]) and int(count) < 10, seen
    assert _ssh(hosts.ssh_argv("b", "ls -A ~")).stdout.split() == []
    assert not (Path.home() / mark).exists()
    # No sshd of ours in the root namespace: nothing here listens on a test address.
    root = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, timeout=10, check=True).stdout
    assert a.address not in root and b.address not in root
    assert socket.gethostname() == our_hostname  # the hosts' names never leak into this machine's


def test_teardown_leaves_no_namespace_veth_or_process() -> None:
    if missing_requirements():
        pytest.skip(f"namespace test hosts need: {', '.join(missing_requirements())}")
    with netns_hosts(2) as hosts:
        # Something left behind in a host (as a detached fio server would be) is stopped too.
        done = _ssh(hosts.ssh_argv("a", "setsid sleep 300 </dev/null >/dev/null 2>&1 &"))
        assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until sshd's session processes are gone and sleep runs
            leftover = hosts["a"].session_pids()
            if [_cmdline(p) for p in leftover] == ["sleep 300"]:
                break
            time.sleep(0.05)
        assert [_cmdline(p) for p in leftover] == ["sleep 300"]
        # So is a control master here that outlived its session (ssh -f: reparented, in its own session).
        control = f"ControlPath={hosts.directory}/cm-%h"
        master = ["ssh", "-F", str(hosts.ssh_config), "-oControlMaster=yes", f"-o{control}", "-fN", "root@b"]
        assert _ssh(master).returncode == 0
        check = _ssh(["ssh", "-F", str(hosts.ssh_config), f"-o{control}", "-Ocheck", "root@b"])
        assert "Master running" in check.stderr
        masters = [int(p) for p in check.stderr.split("pid=")[1].split(")")[:1]]
        pids = [p for h in hosts for p in h.pids()]
        assert leftover[0] in pids and all(h.sshd is not None and h.sshd.pid in pids for h in hosts)
    _gone(hosts, pids + masters)


def test_interrupt_inside_tears_down() -> None:
    if missing_requirements():
        pytest.skip(f"namespace test hosts need: {', '.join(missing_requirements())}")
    seen: list[tuple[NetnsHosts, list[int]]] = []

    def interrupted() -> None:
        with netns_hosts(1) as hosts:
            seen.append((hosts, hosts["a"].pids()))
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    (hosts, pids), *_ = seen
    assert pids
    _gone(hosts, pids)


CRASHING_OWNER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from netns_hosts import netns_hosts
with netns_hosts(1) as hosts:
    h = hosts["a"]
    print(h.netns, h.veth_root, h.inode(), flush=True)
    time.sleep(60)
"""


def test_stale_hosts_of_a_killed_run_are_removed_by_the_next() -> None:
    if missing_requirements():
        pytest.skip(f"namespace test hosts need: {', '.join(missing_requirements())}")
    owner = subprocess.Popen(
        [sys.executable, "-c", CRASHING_OWNER, str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert owner.stdout is not None
        netns, veth, inode = owner.stdout.readline().split()
    finally:
        os.killpg(owner.pid, signal.SIGKILL)  # no teardown runs: as if the run crashed
        owner.wait(timeout=10)
        if owner.stdout is not None:
            owner.stdout.close()
    stale_pids = pids_in_netns(int(inode))
    assert netns in netns_names() and veth in link_names() and stale_pids  # its sshd outlived it
    (folder,) = Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}{owner.pid}-*")
    with netns_hosts(1):
        assert netns not in netns_names() and veth not in link_names() and not folder.exists()
        deadline = time.monotonic() + 5
        while any(_running(p) for p in stale_pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_running(p) for p in stale_pids)


def test_a_socket_held_by_a_forked_child_for_a_moment_is_still_only_sshd() -> None:
    # As `ss -ltnpH` shows sshd's listener just after a connection's child forked, before it closes it.
    line = 'LISTEN 0 128 10.213.0.2:22 0.0.0.0:* users:(("sshd",pid=812,fd=3),("sshd",pid=77,fd=3))'
    assert parse_listeners(line) == [Listener("10.213.0.2", 22, ("sshd",))]
    mixed = 'LISTEN 0 128 127.0.0.1:8765 0.0.0.0:* users:(("fio",pid=9,fd=5),("sshd",pid=8,fd=7),("fio",pid=10,fd=5))'
    assert parse_listeners(mixed)[0].processes == ("fio", "sshd")

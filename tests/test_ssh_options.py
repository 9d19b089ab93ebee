"""``ssh_options`` by allowlist, and a cap on hosts.

Options that choose how to connect and authenticate are accepted; anything that
runs or loads code on this machine, opens a listener, or breaks iobench's own
connection is refused naming the allowed set. A user's own keep-alive and
timeouts win over iobench's (:func:`iobench.matrix.hosts.user_overrides`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from iobench.errors import MatrixError
from iobench.matrix.hosts import ALLOWED_SSH_OPTIONS, IOBENCH_SSH_OPTIONS, ssh_option_problem, user_overrides
from iobench.matrix.model import parse_matrix
from iobench.system.fleet import MAX_HOSTS
from iobench.system.ssh import Ssh, SshTarget

ACCEPTED = [
    "Port=2222",
    "User=bench",
    "IdentityFile=~/.ssh/lab",
    "IdentitiesOnly=yes",
    "ProxyJump=jump@bastion",
    "StrictHostKeyChecking=accept-new",
    "UserKnownHostsFile=/root/.ssh/lab_known_hosts",
    "HostKeyAlgorithms=ssh-ed25519",
    "Ciphers=aes128-gcm@openssh.com",
    "KexAlgorithms=curve25519-sha256",
    "MACs=hmac-sha2-256",
    "Compression=yes",
    "AddressFamily=inet6",
    "LogLevel=ERROR",
    "ServerAliveInterval=5",
    "ServerAliveCountMax=10",
    "TCPKeepAlive=yes",
    "ConnectTimeout=60",
    "ConnectionAttempts=3",
    "BatchMode=yes",  # what iobench sets anyway
    "port 2222",  # ssh_config's own spelling
    "ExitOnForwardFailure=yes",
]

REFUSED = {
    "PKCS11Provider=/usr/lib/evil.so": "loads a library",
    "SecurityKeyProvider=/tmp/evil.so": "loads a library",
    "ProxyCommand=nc %h %p": "runs a program on this machine",
    "LocalCommand=touch /tmp/x": "runs a program on this machine",
    "PermitLocalCommand=yes": "runs a program on this machine",
    "KnownHostsCommand=/bin/true": "runs a program on this machine",
    "Include=/etc/evil.conf": "reads more configuration",
    "Match=exec true": "reads more configuration",
    "LocalForward=0.0.0.0:9000 127.0.0.1:9000": "opens a listener",
    "RemoteForward=9000 127.0.0.1:22": "opens a listener",
    "DynamicForward=1080": "opens a listener",
    "GatewayPorts=yes": "opens a listener",
    "ForwardAgent=yes": "hands the host",
    "BatchMode=no": "iobench connects with BatchMode=yes",
    "ControlPath=/tmp/x": "iobench keeps one control connection",
    "ControlMaster=auto": "iobench keeps one control connection",
    "RequestTTY=force": "without a terminal",
    "RemoteCommand=id": "iobench runs its own remote commands",
    "ClearAllForwardings=yes": "reaches the fio server through a forward",
    "SendEnv=LANG": "not one iobench passes",
    "NoSuchOption=1": "not one iobench passes",
}


@pytest.mark.parametrize("option", ACCEPTED)
def test_options_that_choose_how_to_connect_are_accepted(option: str) -> None:
    assert ssh_option_problem(option) is None


@pytest.mark.parametrize(("option", "why"), REFUSED.items(), ids=[o.split("=")[0] for o in REFUSED])
def test_options_that_run_code_listen_or_break_iobench_are_refused(option: str, why: str) -> None:
    problem = ssh_option_problem(option)
    assert problem is not None
    message, hint = problem
    assert why in message, message
    assert "Port" in hint and "IdentityFile" in hint and "ProxyJump" in hint, hint
    assert all(key in hint.lower() for key in ALLOWED_SSH_OPTIONS)


@pytest.mark.parametrize(
    "spelling", ["proxycommand=x", "PROXYCOMMAND x", "ProxyCommand = x", "ProxyCommand\tx"]
)
def test_any_spelling_of_a_refused_keyword_is_refused(spelling: str) -> None:
    assert ssh_option_problem(spelling) is not None


def test_the_users_keep_alive_and_timeout_win() -> None:
    options = (
        "ConnectTimeout=60",
        "serveraliveinterval 5",
        "ServerAliveCountMax=10",
        "Port=22",
        "BatchMode=yes",
    )
    assert user_overrides(options) == {
        "connecttimeout",
        "serveraliveinterval",
        "serveralivecountmax",
        "batchmode",
    }
    assert user_overrides(("Port=22",)) == set()


def test_every_option_iobench_sets_is_classified(tmp_path: Path) -> None:
    ssh = Ssh(SshTarget("root@h", ()), tmp_path / "ctl")
    keys = {
        ssh.options(master=m)[i + 1].split("=")[0].lower() for m in (True, False) for i in range(0, 20, 2)
    }
    assert keys <= set(IOBENCH_SSH_OPTIONS), keys - set(IOBENCH_SSH_OPTIONS)
    assert not set(ALLOWED_SSH_OPTIONS) & {
        "proxycommand",
        "localforward",
        "pkcs11provider",
        "include",
        "match",
    }


@pytest.mark.fio
def test_a_refused_ssh_option_names_the_line_and_the_allowed_set(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    text = (
        f"version: 1\nname: h\ntargets: [{{path: {tmp_path}/t.dat, size: 1M}}]\n"
        "hosts:\n  - name: a\n    ssh: root@a\n    ssh_options: [Port=2222, PKCS11Provider=/tmp/x.so]\n"
    )
    with pytest.raises(MatrixError) as caught:
        parse_matrix(text, "h.yaml")
    [issue] = caught.value.issues
    assert (
        issue.startswith("h.yaml:7:")
        and "hosts[0].ssh_options[1]: ssh option `PKCS11Provider` is refused" in issue
    )
    assert "allowed:" in issue


@pytest.mark.fio
@pytest.mark.parametrize("count", [MAX_HOSTS + 1, 1025])
def test_hosts_above_the_tested_fleet_are_refused(tmp_path: Path, count: int) -> None:
    hosts = "".join(f"  - {{name: h{i}, ssh: root@h{i}}}\n" for i in range(count))
    text = f"version: 1\nname: h\ntargets: [{{path: {tmp_path}/t.dat, size: 1M}}]\nhosts:\n{hosts}"
    with pytest.raises(MatrixError) as caught:
        parse_matrix(text, "h.yaml")
    (issue,) = caught.value.issues
    assert f"hosts: {count:,} hosts; iobench is tested with up to {MAX_HOSTS} hosts in one run" in issue
    assert "split the hosts over several runs" in issue


@pytest.mark.fio
def test_the_tested_fleet_is_accepted(tmp_path: Path) -> None:
    hosts = "".join(f"  - {{name: h{i}, ssh: root@h{i}}}\n" for i in range(MAX_HOSTS))
    text = f"version: 1\nname: h\ntargets: [{{path: {tmp_path}/t.dat, size: 1M}}]\nhosts:\n{hosts}"
    assert len(parse_matrix(text, "h.yaml").hosts) == MAX_HOSTS

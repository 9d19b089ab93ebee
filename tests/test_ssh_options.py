"""``ssh_options`` by allowlist, each value by its own grammar, and a cap on hosts.

Options that choose how to connect and authenticate are accepted; anything that
runs or loads code on this machine, opens a listener, or breaks iobench's own
connection is refused naming the allowed set. Each allowed option takes only a
value of its own grammar (host names, ports, yes/no, paths only this user or
root can change, algorithms the installed ssh names): ssh hands some values to
``/bin/sh -c`` (a ``ProxyJump``'s command holds ``HostName``). A user's own
keep-alive and timeouts win over iobench's (:meth:`iobench.system.ssh.Ssh.options`).
"""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from iobench.errors import MatrixError
from iobench.matrix.model import parse_matrix
from iobench.system.fleet import MAX_HOSTS
from iobench.system.ssh import Ssh, SshTarget
from iobench.system.sshoptions import (
    GRAMMARS,
    IOBENCH_SSH_OPTIONS,
    destination_problem,
    ssh_option_problem,
    target_problems,
)

ACCEPTED = [
    "Port=2222",
    "User=bench",
    "IdentitiesOnly=yes",
    "ProxyJump=jump@bastion",
    "StrictHostKeyChecking=accept-new",
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

# Every allowed option with values it takes and values it refuses. {own} is a file only this user
# can change, {sock} a socket of theirs, {open} a file others may write, {shared} a file in a
# folder others may write, {missing} no file.
SHELL = "x'$(touch /tmp/iobench-pwned)'"
VALUES: dict[str, tuple[list[str], list[str]]] = {
    "Port": (["22", "2222", "65535"], ["0", "65536", "22x", "-1", "ssh", "2 2"]),
    "User": (
        ["root", "bench.user", "_svc", "a-b"],
        ["-oProxyCommand", "a b", "a;b", "x" * 33, "$(id)", "a@b"],
    ),
    "HostName": (
        ["storage-a", "storage-a.example.com", "192.0.2.7", "2001:db8::7", "fqdn.example."],
        [
            SHELL,
            "-oProxyCommand=x",
            "a_b",
            "-a.example",
            "a..b",
            "fe80::1%eth0",
            "1.2.3",
            "x" * 64,
            "a b",
            "%h",
        ],
    ),
    "HostKeyAlias": (["lab-a", "lab_a", "10.0.0.1"], ["x;sh</tmp/e;", "a b", "$(id)"]),
    "ProxyJump": (
        ["bastion", "jump@bastion:2222", "a,b@c:22", "[2001:db8::1]:22", "none"],
        [SHELL, "ssh://jump@bastion", "jump@bastion:99999", "a,,b", "-J", "a b", ",".join("h" * 9)],
    ),
    "AddressFamily": (["any", "inet", "inet6"], ["ipv4", "inet4"]),
    "BindAddress": (["192.0.2.1", "::1", "local-a"], ["0.0.0.0/0", "a;b"]),
    "BindInterface": (["eth0", "enp1s0.100"], ["eth0;id", "x" * 16]),
    "CanonicalizeHostname": (["yes", "no", "always", "none"], ["maybe"]),
    "CanonicalDomains": (["example.com lab.example.com", "none"], ["exa mple_.com", "$(id)"]),
    "CanonicalizeFallbackLocal": (["yes", "no"], ["1"]),
    "CanonicalizeMaxDots": (["0", "1"], ["-1", "256", "x"]),
    "CanonicalizePermittedCNAMEs": (["*.a.example.com:*.b.example.com", "none"], ["a", "a:b:c", "a:$(id)"]),
    "IdentityFile": (
        ["{own}"],
        ["{open}", "{shared}", "{missing}", "relative/key", "/tmp/%d", "${{HOME}}/k", "{dir}"],
    ),
    "IdentitiesOnly": (["yes", "no"], ["y"]),
    "IdentityAgent": (["none", "SSH_AUTH_SOCK", "{sock}"], ["{own}", "$SSH_AUTH_SOCK", "{missing}"]),
    "CertificateFile": (["{own}"], ["{open}", "{missing}"]),
    "PubkeyAuthentication": (["yes", "no", "unbound", "host-bound"], ["bound"]),
    "PubkeyAcceptedAlgorithms": (
        ["ssh-ed25519", "+ssh-rsa", "-ssh-dss*", "^ssh-ed25519,rsa-sha2-512"],
        ["evil", "ssh-ed25519;id", "+*"],
    ),
    "PubkeyAcceptedKeyTypes": (["ssh-ed25519"], ["x"]),
    "PreferredAuthentications": (["publickey", "publickey,password"], ["publickey,exec"]),
    "PasswordAuthentication": (["no"], ["never"]),
    "KbdInteractiveAuthentication": (["no"], ["0"]),
    "ChallengeResponseAuthentication": (["no"], ["0"]),
    "GSSAPIAuthentication": (["no"], ["0"]),
    "HostbasedAuthentication": (["no"], ["0"]),
    "HostbasedAcceptedAlgorithms": (["ssh-ed25519"], ["x"]),
    "NumberOfPasswordPrompts": (["0", "3"], ["-1", "x", "101"]),
    "StrictHostKeyChecking": (["yes", "no", "ask", "accept-new", "off", "false"], ["accept"]),
    "UserKnownHostsFile": (
        ["{own}", "{own} {own}", "/dev/null", "none"],
        ["{open}", "{shared}", "{missing}", "~/../../tmp/x"],
    ),
    "GlobalKnownHostsFile": (["{own}", "/dev/null"], ["{open}", "/etc/shadow-$x"]),
    "HostKeyAlgorithms": (["ssh-ed25519,rsa-sha2-512"], ["ssh-ed25519,evil"]),
    "CheckHostIP": (["no"], ["x"]),
    "UpdateHostKeys": (["no", "ask"], ["x"]),
    "VerifyHostKeyDNS": (["no", "ask"], ["x"]),
    "HashKnownHosts": (["yes"], ["x"]),
    "FingerprintHash": (["sha256", "md5"], ["sha1"]),
    "RevokedHostKeys": (["{own}", "none"], ["{open}", "{missing}"]),
    "Ciphers": (
        ["aes128-gcm@openssh.com,chacha20-poly1305@openssh.com"],
        ["aes128-gcm@openssh.com,$(id)", "rot13"],
    ),
    "MACs": (["hmac-sha2-256"], ["hmac-sha2-256 hmac-sha1"]),
    "KexAlgorithms": (["curve25519-sha256"], ["curve1"]),
    "CASignatureAlgorithms": (["ssh-ed25519"], ["ssh-ed25519-cert-v01@openssh.com"]),
    "RequiredRSASize": (["2048"], ["512", "x"]),
    "RekeyLimit": (["1G", "default none", "500M 1h"], ["1T", "1G forever", "1G 1h 2h"]),
    "Compression": (["yes"], ["gzip"]),
    "IPQoS": (["lowdelay throughput", "af21", "8"], ["af99", "a b c"]),
    "LogLevel": (["ERROR", "quiet", "DEBUG3"], ["LOUD"]),
    "ConnectTimeout": (["10", "5m", "1m30s"], ["0", "10x", "2h", "-1"]),
    "ConnectionAttempts": (["1", "3"], ["0", "x"]),
    "ServerAliveInterval": (["0", "5", "1m"], ["x", "2h"]),
    "ServerAliveCountMax": (["3"], ["x", "-3"]),
    "TCPKeepAlive": (["yes"], ["x"]),
}


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    """Files whose ownership and mode the path grammar judges."""
    own, sock = tmp_path / "own_key", tmp_path / "agent.sock"
    own.write_text("key\n")
    own.chmod(0o600)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(sock))
    opened = tmp_path / "open_key"
    opened.write_text("key\n")
    opened.chmod(0o666)
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    (folder / "key").write_text("key\n")
    return {
        "own": str(own),
        "sock": str(sock),
        "open": str(opened),
        "shared": str(folder / "key"),
        "missing": str(tmp_path / "none"),
        "dir": str(tmp_path),
    }


def test_every_allowed_option_has_its_table_of_values() -> None:
    assert {key.lower() for key in VALUES} == set(GRAMMARS)
    assert all(GRAMMARS[key.lower()][0] == key for key in VALUES)  # spelled as ssh's manual spells them


@pytest.mark.parametrize(
    ("option", "value"),
    [(key, value) for key, (good, _) in VALUES.items() for value in good],
)
def test_a_value_of_the_options_grammar_is_accepted(option: str, value: str, paths: dict[str, str]) -> None:
    assert ssh_option_problem(f"{option}={value.format(**paths)}") is None


@pytest.mark.parametrize(
    ("option", "value"),
    [(key, value) for key, (_, bad) in VALUES.items() for value in bad],
)
def test_any_other_value_is_refused_naming_the_option(option: str, value: str, paths: dict[str, str]) -> None:
    problem = ssh_option_problem(f"{option}={value.format(**paths)}")
    assert problem is not None
    message, hint = problem
    assert message.startswith(f"ssh option `{option}` is refused: its value "), message
    assert f"give `{option}` such a value" in hint


def test_a_path_under_the_home_is_the_password_databases_home_as_ssh_reads_it() -> None:
    home = pwd.getpwuid(os.geteuid()).pw_dir
    problem = ssh_option_problem("IdentityFile=~/iobench-surely-no-such-key")
    assert problem is not None
    assert f"{home}/iobench-surely-no-such-key: No such file or directory" in problem[0]


def test_who_else_could_change_a_path_is_named(paths: dict[str, str]) -> None:
    problem = ssh_option_problem(f"IdentityFile={paths['shared']}")
    assert problem is not None
    assert f"folder {Path(paths['shared']).parent} belongs to root (uid 0), mode 0777" in problem[0]


@pytest.mark.parametrize("where", ["link-of-another-user", "link-in-a-shared-folder", "dot-dot"])
def test_a_path_someone_else_could_point_elsewhere_is_refused(
    where: str, paths: dict[str, str], tmp_path: Path
) -> None:
    """ssh opens the path as spelled: a link on the way is another place someone could change."""
    link = tmp_path / "link_key"
    if where == "link-of-another-user":
        link.symlink_to(paths["own"])
        os.lchown(link, 65534, 65534)
        named = f"link {link} belongs to nobody (uid 65534)"
    elif where == "link-in-a-shared-folder":
        link = Path(paths["shared"]).with_name("link_key")
        link.symlink_to(paths["own"])
        named = f"folder {link.parent} belongs to root (uid 0), mode 0777"
    else:
        link = Path(f"{tmp_path}/shared/../own_key")
        named = "without `..`"
    assert ssh_option_problem(f"IdentityFile={paths['own']}") is None
    problem = ssh_option_problem(f"IdentityFile={link}")
    assert problem is not None and named in problem[0], problem


@pytest.mark.parametrize(
    "destination", ["root@storage-a", "storage_a", "bench@192.0.2.7", "root@::1", "a.example.com"]
)
def test_destinations_are_a_user_and_a_host(destination: str) -> None:
    assert destination_problem(destination) is None


@pytest.mark.parametrize(
    "destination", [SHELL, f"root@{SHELL}", "-oProxyCommand=x", "a b", "@host", "x;y@h", "ssh://root@a"]
)
def test_any_other_destination_is_refused(destination: str) -> None:
    assert destination_problem(destination) is not None


def test_a_record_read_back_gets_the_same_checks() -> None:
    assert target_problems("root@a", ["Port=22", "User=root"]) == []
    problems = target_problems(f"root@{SHELL}", ["ProxyCommand=touch /tmp/x", f"HostName={SHELL}"])
    assert len(problems) == 3
    assert "ssh destination" in problems[0] and "ProxyCommand" in problems[1] and "HostName" in problems[2]


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
    assert all(key in hint.lower() for key in GRAMMARS)


@pytest.mark.parametrize(
    "spelling", ["proxycommand=x", "PROXYCOMMAND x", "ProxyCommand = x", "ProxyCommand\tx"]
)
def test_any_spelling_of_a_refused_keyword_is_refused(spelling: str) -> None:
    assert ssh_option_problem(spelling) is not None


def test_the_users_keep_alive_and_timeout_win(tmp_path: Path) -> None:
    options = (
        "ConnectTimeout=60",
        "serveraliveinterval 5",
        "ServerAliveCountMax=10",
        "Port=22",
        "BatchMode=yes",
    )
    argv = Ssh(SshTarget("root@h", options), tmp_path / "ctl").options()
    given = [argv[i + 1] for i in range(0, len(argv), 2)]
    for key, user in (
        ("connecttimeout", "ConnectTimeout=60"),
        ("serveraliveinterval", "serveraliveinterval 5"),
        ("serveralivecountmax", "ServerAliveCountMax=10"),
        ("batchmode", "BatchMode=yes"),
    ):
        # ssh keeps the first value it reads: the user's must be the only one given.
        assert [o for o in given if o.lower().startswith(key)] == [user]
    assert (
        sum(
            o.lower().startswith("connecttimeout")
            for o in Ssh(SshTarget("root@h", ("Port=22",)), tmp_path / "c2").options()
        )
        == 1
    )


def test_every_option_iobench_sets_is_classified(tmp_path: Path) -> None:
    ssh = Ssh(SshTarget("root@h", ()), tmp_path / "ctl")
    keys = {
        ssh.options(master=m)[i + 1].split("=")[0].lower() for m in (True, False) for i in range(0, 20, 2)
    }
    assert keys <= set(IOBENCH_SSH_OPTIONS), keys - set(IOBENCH_SSH_OPTIONS)
    assert not set(GRAMMARS) & {
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

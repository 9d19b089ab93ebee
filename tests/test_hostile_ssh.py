"""``ssh_options`` a hostile matrix may try: ssh writes nothing outside its own files.

ssh appends a host key it accepts (``StrictHostKeyChecking=accept-new`` or
``no``, ``UpdateHostKeys=yes``, ``CheckHostIP=yes``) to the first
``UserKnownHostsFile``, as a line that starts with the host's name or its
``HostKeyAlias``. A matrix naming both could append a line of its choosing
to any file this user may write (``~/.bashrc``: ``x;sh</tmp/evil; ssh-ed25519
AAAA…`` runs at the next login). Tried against a real sshd (a namespace
host) through ``iobench plan``, which connects to every host to read it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from loopdev import sha256_of
from netns_hosts import NetnsHost

from iobench.system.ssh import Ssh, SshTarget
from iobench.system.sshoptions import host_ssh_options_problem, ssh_option_problem

PAYLOAD = "x;sh</tmp/iobench-hostile;"


def iobench(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command line, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "iobench", *args], capture_output=True, text=True, timeout=300, check=False
    )


def matrix_for(host: NetnsHost, options: list[str], tmp_path: Path) -> str:
    return (
        "version: 1\nname: hostile-ssh\nfio:\n  ioengine: null\n  rw: randread\n  bs: 4k\n"
        f"hosts:\n  - name: a\n    ssh: {host.ssh}\n    ssh_options: {json.dumps(options)}\n"
        f"    targets: [{{path: {tmp_path / 'a.dat'}, size: 1M}}]\n"
    )


WRITERS = {
    "accept-new": ["StrictHostKeyChecking=accept-new"],
    "no": ["StrictHostKeyChecking=no"],
    "off-spaced": ["stricthostkeychecking off"],
    "false": ["StrictHostKeyChecking=false"],
}


@pytest.mark.root
@pytest.mark.parametrize("writes", WRITERS.values(), ids=WRITERS.keys())
def test_ssh_never_appends_a_host_key_to_a_file_the_matrix_chooses(
    writes: list[str],
    netns_hosts: Callable[..., object],
    write_matrix: Callable[..., Path],
    tmp_path: Path,
) -> None:
    host: NetnsHost = netns_hosts(1)["a"]  # type: ignore[index]
    victim = tmp_path / "bashrc"
    victim.write_text("# a shell's start-up file\nexport EDITOR=vi\n")
    before = sha256_of(victim)
    options = [
        o for o in host.ssh_options if not o.startswith(("UserKnownHostsFile", "StrictHostKeyChecking"))
    ]
    options += [f"UserKnownHostsFile={victim}", f"HostKeyAlias={PAYLOAD}", "HashKnownHosts=no", *writes]
    done = iobench("plan", str(write_matrix(matrix_for(host, options, tmp_path))))
    assert sha256_of(victim) == before, victim.read_text()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "UserKnownHostsFile" in done.stderr and "writes host keys" in done.stderr


SPELLINGS = {
    "update-host-keys": ["UserKnownHostsFile={f}", "UpdateHostKeys=yes"],
    "update-host-keys-true": ["UserKnownHostsFile {f}", "updatehostkeys true"],
    "check-host-ip": ["UserKnownHostsFile={f}", "CheckHostIP=yes"],
    "order-reversed": ["StrictHostKeyChecking=accept-new", "userknownhostsfile={f}"],
}


@pytest.mark.parametrize("spelled", SPELLINGS.values(), ids=SPELLINGS.keys())
def test_every_way_of_letting_ssh_write_a_chosen_known_hosts_file_is_refused(
    spelled: list[str], tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    options = [o.format(f=known) for o in spelled]
    assert all(ssh_option_problem(o) is None for o in options)  # each alone is fine
    problem = host_ssh_options_problem(options)
    assert problem is not None
    assert "writes host keys" in problem[0]


ALONE = {
    "own-file-read-only": ["UserKnownHostsFile=/tmp/f", "StrictHostKeyChecking=yes", "UpdateHostKeys=no"],
    "default-file-accept-new": ["StrictHostKeyChecking=accept-new", "UpdateHostKeys=yes"],
}


@pytest.mark.parametrize("options", ALONE.values(), ids=ALONE.keys())
def test_a_chosen_known_hosts_file_read_only_or_the_default_one_written_is_fine(options: list[str]) -> None:
    assert host_ssh_options_problem(options) is None


QUOTED = {
    "double-quoted": ["UserKnownHostsFile=/tmp/f", 'StrictHostKeyChecking="accept-new"'],
    "single-quoted": ["UserKnownHostsFile=/tmp/f", "StrictHostKeyChecking='no'"],
    "spaced-quoted": ["UserKnownHostsFile /tmp/f", 'UpdateHostKeys "yes"'],
}


@pytest.mark.parametrize("options", QUOTED.values(), ids=QUOTED.keys())
def test_a_quoted_value_is_read_as_ssh_reads_it(options: list[str]) -> None:
    problem = host_ssh_options_problem(options)
    assert problem is not None and "writes host keys" in problem[0]


def test_a_named_known_hosts_file_is_pinned_read_only_before_any_config() -> None:
    """~/.ssh/config may say accept-new: iobench's own -o options, read first, win over it."""
    ssh = Ssh(SshTarget("root@a", ("UserKnownHostsFile=/tmp/f", "CheckHostIP=no")), Path("/tmp/x.sock"))
    argv = ssh.argv(["true"])
    user = argv.index("UserKnownHostsFile=/tmp/f")
    for pinned in ("StrictHostKeyChecking=yes", "UpdateHostKeys=no"):
        assert pinned in argv and argv.index(pinned) < user, argv
    assert argv.count("CheckHostIP=no") == 1  # the matrix's own, not given twice
    plain = Ssh(SshTarget("root@a", ("Port=22",)), Path("/tmp/x.sock")).argv(["true"])
    assert not any(a.startswith(("StrictHostKeyChecking", "UpdateHostKeys")) for a in plain)


def test_options_spelled_with_a_blank_count_as_given() -> None:
    """``Key Value`` is ssh_config's own spelling: the pins and the user's own timeouts see it too."""
    argv = Ssh(
        SshTarget("root@a", ("UserKnownHostsFile /tmp/f", "ConnectTimeout 60")), Path("/tmp/x.sock")
    ).argv(["true"])
    assert "StrictHostKeyChecking=yes" in argv
    assert not any(a.startswith("ConnectTimeout=") for a in argv), argv  # the user's 60 s wins


SHELL_VALUES = {
    "hostname-in-the-jumps-command": ["HostName=\"x'$(touch {marker})'\"", "ProxyJump=root@127.0.0.1"],
    "hostname-unquoted": ["HostName=x'$(touch {marker})'", "ProxyJump=root@127.0.0.1"],
    "jump-host": ["ProxyJump=root@x'$(touch {marker})'"],
    "user": ["User=$(touch {marker})", "ProxyJump=root@127.0.0.1"],
    "backquotes": ["HostName=`touch {marker}`", "ProxyJump=root@127.0.0.1"],
}


@pytest.mark.fio
@pytest.mark.parametrize("spelled", SHELL_VALUES.values(), ids=SHELL_VALUES.keys())
def test_a_value_a_shell_would_run_is_refused_when_the_matrix_is_read(
    spelled: list[str], write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    """ssh runs a jump host's command through /bin/sh -c with HostName in it: no such value gets that far."""
    marker = tmp_path / "pwned"
    options = [o.format(marker=marker) for o in spelled]
    text = (
        "version: 1\nname: shell\nfio:\n  ioengine: null\n  rw: randread\n  bs: 4k\n"
        f"hosts:\n  - name: a\n    ssh: root@127.0.0.1\n    ssh_options: {json.dumps(options)}\n"
        f"    targets: [{{path: {tmp_path / 'a.dat'}, size: 1M}}]\n"
    )
    done = iobench("plan", str(write_matrix(text)))
    assert not marker.exists()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    key = options[0].split("=", 1)[0]
    assert (
        "matrix.yaml:10:" in done.stderr
        and f"hosts[0].ssh_options[0]: ssh option `{key}` is refused" in done.stderr
    )


@pytest.mark.fio
def test_a_destination_a_shell_would_run_is_refused(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    text = (
        "version: 1\nname: shell\nfio:\n  ioengine: null\n  rw: randread\n  bs: 4k\n"
        f"hosts:\n  - name: a\n    ssh: \"root@x'$(touch {marker})'\"\n"
        '    ssh_options: ["ProxyJump=root@127.0.0.1"]\n'
        f"    targets: [{{path: {tmp_path / 'a.dat'}, size: 1M}}]\n"
    )
    done = iobench("plan", str(write_matrix(text)))
    assert not marker.exists()
    assert done.returncode == 2 and "hosts[0].ssh: ssh destination" in done.stderr, done.stderr

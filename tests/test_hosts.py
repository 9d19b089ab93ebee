"""Hosts without SSH: the matrix, the ssh argv, the snapshot, the preflight, the plan,
the JSON mapping, and whole runs on "hosts" that are this machine (tests/fakehosts.py).

The same code against real sshd in network namespaces: tests/test_hosts_run.py and
tests/test_hosts_e2e.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from fakehosts import LocalConnection, LocalHosts, agent_on, completed
from hypothesis import given, settings
from hypothesis import strategies as st
from sysfs_snapshots import FakeSysfs, SnapshotCache

from iobench.errors import HostLost, IobenchError, MatrixError
from iobench.matrix.model import load_matrix
from iobench.planner.placement import Placement, job_binding
from iobench.planner.plans import Plan, client_argv, host_sites, host_specs, plan_points
from iobench.results.fioout.clients import parse_client_output
from iobench.results.loading import load
from iobench.results.points import point_totals
from iobench.runner.sweep import run as run_hosts
from iobench.system import fleet as hosts_mod
from iobench.system.fioserver import server_token, stop_stale, token_stale
from iobench.system.fleet import Fleet, HostFacts, HostSpec, HostsRefused
from iobench.system.hostagent import HostAgent
from iobench.system.hostfs import SystemFileError
from iobench.system.process import run_process
from iobench.system.remote import (
    RemoteRoot,
    SnapshotError,
    fetch_snapshot,
    proc_table,
    write_snapshot_tree,
)
from iobench.system.ssh import HostUnreachable, Ssh, SshTarget, remote_command
from iobench.system.topology import discover_topology, locate_target
from iobench.system.tuning import (
    DeviceTuner,
    Journal,
    check_no_pending,
    pending_journals,
    restore_from_journals,
)

# Loading a matrix with hosts asks the installed fio which options it has.
pytestmark = pytest.mark.fio

DATA = Path(__file__).parent / "data"
CLIENT_PLUS = DATA / "fio" / "fio-3.33" / "client_plus.json"


@pytest.fixture(autouse=True)
def _no_server_left(tmp_path: Path) -> Iterator[None]:
    """Whatever a test leaves running in its "hosts" (a server of a host cut off mid-run) is stopped after it."""
    yield
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry}/cwd").readlink().is_relative_to(tmp_path):
                    left.append(int(entry))
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> SnapshotCache:
    return SnapshotCache(tmp_path_factory)


def _matrix(
    write_matrix: Callable[..., Path], hosts: str, axes: str = "iodepth: [1, 2]", extra: str = ""
) -> Path:
    return write_matrix(
        textwrap.dedent(
            """\
            version: 1
            name: hosts
            fio:
              ioengine: null
              rw: randread
              bs: 4k
              runtime: 1
              time_based: 1
            """
        )
        + "hosts:\n"
        + textwrap.indent(textwrap.dedent(hosts), "  ")
        + "matrix:\n"
        + textwrap.indent(textwrap.dedent(axes), "  ")
        + textwrap.dedent(extra)
    )


# --- the matrix ------------------------------------------------------------------------------------


def test_hosts_and_their_targets_are_read(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    key = tmp_path / "lab"
    key.write_text("key\n")
    path = _matrix(
        write_matrix,
        f"""\
        - name: a
          ssh: root@storage-a
          ssh_options: ["Port=2222", "IdentityFile={key}"]
          targets: [{{path: /dev/nvme0n1}}, {{path: /srv/x.dat, size: 1G}}]
        - ssh: storage-b
          server: "/run/fio/fio.sock"
        """,
        "iodepth: [1]\nhost: [a]\n",
        f"targets:\n  - path: {tmp_path}/t.dat\n    size: 8M\n",
    )
    m = load_matrix(path)
    a, b = m.hosts
    assert (a.name, a.ssh, a.ssh_options, a.server) == (
        "a",
        "root@storage-a",
        ("Port=2222", f"IdentityFile={key}"),
        None,
    )
    assert a.targets is not None and [t.path for t in a.targets] == ["/dev/nvme0n1", "/srv/x.dat"]
    assert [t.section for t in a.targets] == ["nvme0n1", "x.dat"]
    assert a.targets[1].size == 2**30
    assert (b.name, b.targets, b.server, b.label) == (None, None, "/run/fio/fio.sock", "storage-b")
    assert [c["host"] for c in m.combos] == ["a"]


def test_without_hosts_nothing_changes(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    path = write_matrix(
        f"version: 1\nname: local\ntargets: [{{path: {tmp_path}/t.dat, size: 8M}}]\nfio: {{ioengine: 'null'}}\n"
    )
    assert load_matrix(path).hosts == ()


@pytest.mark.parametrize(
    ("hosts", "axes", "expected"),
    [
        (
            '- ssh: "-oProxyCommand=sh"\n',
            "iodepth: [1]\n",
            "hosts[0].ssh: ssh destination '-oProxyCommand=sh' is refused",
        ),
        ("- ssh: a\n  ssh_options: [ProxyCommand=nc %h %p]\n", "iodepth: [1]\n", "`ProxyCommand` is refused"),
        ("- ssh: a\n  ssh_options: [BatchMode=no]\n", "iodepth: [1]\n", "`BatchMode` is refused"),
        (
            "- ssh: a\n  ssh_options: [LocalForward=9000 h:9000]\n",
            "iodepth: [1]\n",
            "`LocalForward` is refused",
        ),
        ("- ssh: a\n  ssh_options: [-v]\n", "iodepth: [1]\n", "is not `Key=Value`"),
        (
            "- ssh: a\n  server: '10.0.0.5:8765'\n",
            "iodepth: [1]\n",
            "hosts[0].server: server '10.0.0.5:8765' is not the absolute path of an fio server's Unix socket",
        ),
        ("- {name: a, ssh: x}\n- {name: a, ssh: y}\n", "iodepth: [1]\n", "host name `a` is given twice"),
        ("- {name: 'a b', ssh: x}\n", "iodepth: [1]\n", "hosts[0].name: invalid host name"),
        ("- {name: a, ssh: x}\n", "host: [a, c]\n", "matrix.host[1]: 'c' is not the name of a host"),
        ("- {ssh: x}\n", "host: [x]\n", "'x' is not the name of a host"),
        (
            "- {name: a, ssh: x, targets: [{path: rel/x}]}\n",
            "iodepth: [1]\n",
            "'rel/x' is not an absolute path",
        ),
        ("- {name: a, ssh: x, typo: 1}\n", "iodepth: [1]\n", "hosts[0].typo: unknown key"),
        (
            "- {name: a, ssh: x}\n",
            "host_count: [1, 2]\n",
            "host_count 2 is more than the 1 hosts under `hosts:`",
        ),
        ("- {name: a, ssh: x}\n", "host_count: [0]\n", "host_count takes a number of hosts (1 or more)"),
        (
            "- {name: a, ssh: x}\n- {name: b, ssh: y}\n",
            "host_count: [1, 2]\nhost: [a]\n",
            "`host_count` and `host` both choose the hosts of a point",
        ),
    ],
)
def test_bad_hosts_are_refused_naming_the_field(
    write_matrix: Callable[..., Path], tmp_path: Path, hosts: str, axes: str, expected: str
) -> None:
    path = _matrix(write_matrix, hosts, axes, f"targets: [{{path: {tmp_path}/t.dat, size: 8M}}]\n")
    with pytest.raises(
        MatrixError,
        match=expected.replace("[", r"\[")
        .replace("]", r"\]")
        .replace("(", r"\(")
        .replace(")", r"\)")
        .replace("*", r"\*"),
    ):
        load_matrix(path)


def test_host_count_without_hosts_is_refused(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    path = write_matrix(
        f"version: 1\nname: x\ntargets: [{{path: {tmp_path}/t.dat, size: 8M}}]\n"
        "fio: {ioengine: 'null'}\nmatrix: {host_count: [1, 2]}\n"
    )
    with pytest.raises(MatrixError, match=r"matrix.host_count\[0\]: the `host_count` axis needs `hosts:`"):
        load_matrix(path)


@pytest.mark.fio
def test_host_count_runs_each_point_on_the_first_n_hosts_at_once(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    m = load_matrix(_local_hosts_matrix(write_matrix, tmp_path, "host_count: [1, 2]\n"))
    result = run_hosts(m, out=tmp_path / "results", connector=LocalHosts(tmp_path / "homes"))
    assert result.counts == {"ok": 2}
    frame = result.frame
    assert frame is not None and "host_count" in frame
    hosts = frame.groupby("host_count")["host"].agg(lambda s: sorted(set(s)))
    assert hosts.to_dict() == {1: ["a"], 2: ["a", "b"]}


def test_host_axis_without_hosts_is_refused(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    path = write_matrix(
        f"version: 1\nname: x\ntargets: [{{path: {tmp_path}/t.dat, size: 8M}}]\n"
        "fio: {ioengine: 'null'}\nmatrix: {host: [a]}\n"
    )
    with pytest.raises(MatrixError, match=r"matrix.host\[0\]: the `host` axis needs `hosts:`"):
        load_matrix(path)


def test_hosts_with_own_targets_need_no_top_level_targets(write_matrix: Callable[..., Path]) -> None:
    path = _matrix(write_matrix, "- {ssh: x, targets: [{path: /dev/sdb}]}\n", "iodepth: [1]\n")
    assert load_matrix(path).targets == ()
    path = _matrix(write_matrix, "- {ssh: x, targets: [{path: /dev/sdb}]}\n- {ssh: y}\n", "iodepth: [1]\n")
    with pytest.raises(MatrixError, match="targets: no targets"):
        load_matrix(path)


# --- ssh argv -------------------------------------------------------------------------------------


class Recorder:
    """An executor that records argv and answers from a script."""

    def __init__(self, returncode: int = 0, stdout: str = "", stderr: str = "") -> None:
        self.calls: list[list[str]] = []
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def __call__(self, argv: list[str], **kwargs: object) -> object:
        self.calls.append(list(argv))
        return completed(argv, self.stdout, self.returncode, self.stderr)


def test_ssh_argv_puts_iobench_options_first(tmp_path: Path) -> None:
    record = Recorder(stdout="x")
    ssh = Ssh(SshTarget("root@a", ("Port=2222",), "a"), tmp_path / "0.sock", executor=record, binary="ssh")
    ssh.run(["cat", "--", "/sys/block/sda/queue/scheduler", "a b; rm -rf /"])
    (argv,) = record.calls
    options = [argv[i + 1] for i, word in enumerate(argv) if word == "-o"]
    assert argv[0] == "ssh" and argv[-2] == "root@a"
    assert options[: options.index("Port=2222")] == [
        "BatchMode=yes",
        "ConnectTimeout=10",
        "ServerAliveInterval=5",
        "ServerAliveCountMax=3",
        f"ControlPath={tmp_path / '0.sock'}",
        "ControlMaster=no",
        "ControlPersist=no",
        "ExitOnForwardFailure=yes",
        "ClearAllForwardings=no",
        "RequestTTY=no",
        "StreamLocalBindMask=0177",
    ]
    # One string for the remote shell, which splits it back into exactly the argv.
    assert shlex.split(argv[-1]) == ["cat", "--", "/sys/block/sda/queue/scheduler", "a b; rm -rf /"]


@settings(deadline=None)  # a shared machine's pauses are not the quoting's
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")), min_size=1
    )
)
def test_remote_command_round_trips(argv: list[str]) -> None:
    assert shlex.split(remote_command(argv)) == argv


def test_users_timeouts_win_and_an_equal_batch_mode_is_harmless(tmp_path: Path) -> None:
    record = Recorder(stdout="x")
    target = SshTarget("root@a", ("ConnectTimeout=3", "serveraliveinterval=1", "BatchMode=yes"), "a")
    ssh = Ssh(target, tmp_path / "0.sock", executor=record, binary="ssh")
    ssh.run(["true"])
    options = [record.calls[0][i + 1] for i, w in enumerate(record.calls[0]) if w == "-o"]
    # ssh keeps the first value it gets: the user's timeouts come first where iobench leaves its own out.
    assert "ConnectTimeout=10" not in options and "ServerAliveInterval=5" not in options
    assert options.index("ConnectTimeout=3") > 0 and "serveraliveinterval=1" in options
    # An equal BatchMode=yes is the user's, given once; iobench's other options stay.
    assert options.count("BatchMode=yes") == 1 and "ServerAliveCountMax=3" in options


def test_forward_joins_two_unix_sockets_no_tcp(tmp_path: Path) -> None:
    record = Recorder()
    ssh = Ssh(SshTarget("root@a"), tmp_path / "0.sock", executor=record, binary="ssh")
    local, remote = str(tmp_path / "0.fio"), "/tmp/iobench-x.abcdef/fio.sock"
    assert ssh.forward(local, remote) == f"{local}:{remote}"
    assert record.calls == [
        [
            "ssh",
            "-o",
            f"ControlPath={tmp_path / '0.sock'}",
            "-O",
            "forward",
            "-L",
            f"{local}:{remote}",
            "root@a",
        ]
    ]


def test_master_that_fails_names_the_host_and_what_ssh_said(tmp_path: Path) -> None:
    def spawner(
        argv: list[str], *, env: dict[str, str], stderr: Path, stdin: bool
    ) -> subprocess.Popen[bytes]:
        # The master's session reads an input this process holds: it ends when the run does.
        assert argv[-2:] == ["root@b", "cat"] and "ControlMaster=yes" in argv and stdin
        Path(stderr).write_text("root@b: Permission denied (publickey).\n")
        return subprocess.Popen(["sh", "-c", "exit 255"])

    ssh = Ssh(
        SshTarget("root@b", (), "right"),
        tmp_path / "1.sock",
        executor=Recorder(returncode=255),
        spawner=spawner,
    )
    ssh.start()
    with pytest.raises(
        HostUnreachable, match=r"host right \(root@b\) refused the login: root@b: Permission denied"
    ):
        ssh.wait_ready()
    ssh.close()


def test_unreachable_real_ssh_is_refused_quickly(tmp_path: Path) -> None:
    # Nothing listens on 127.0.0.1:9 (discard): ssh fails at once, its message is kept.
    ssh = Ssh(SshTarget("root@127.0.0.1", ("Port=9",), "nowhere"), tmp_path / "2.sock", connect_timeout=3)
    started = time.monotonic()
    with pytest.raises(HostUnreachable, match=r"host nowhere \(root@127.0.0.1\) is unreachable: .*refused"):
        ssh.open()
    assert time.monotonic() - started < 15
    assert ssh.master is not None and ssh.master.poll() is not None
    ssh.close()


# --- sysfs and procfs of a host ---------------------------------------------------------------------


def _local(tmp_path: Path, name: str = "h", **options: object) -> LocalConnection:
    return LocalConnection(SshTarget(f"root@{name}", (), name), tmp_path / name, **options)  # type: ignore[arg-type]


def test_snapshot_reads_like_the_machine_itself(tmp_path: Path) -> None:
    target = tmp_path / "target.dat"
    target.write_bytes(b"\0" * 4096)
    with agent_on(_local(tmp_path)) as agent:
        snapshot = fetch_snapshot(agent, tmp_path / "snap", [str(target), "/nonexistent/dir/x"])
    here, there = discover_topology("/"), discover_topology(snapshot.root)
    assert there.nodes == here.nodes and there.cores == here.cores
    # Other tests attach and detach loop devices meanwhile: the disks of both readings are compared.
    theirs = {d.name: d for d in there.devices}
    both = [d for d in here.devices if d.name in theirs and not d.name.startswith("loop")]
    assert both and all(theirs[d.name] == d for d in both)
    assert snapshot.text("proc/sys/kernel/hostname") == os.uname().nodename
    located = locate_target(str(target), there, stat=snapshot.stat)
    assert located == locate_target(str(target), here)
    missing = locate_target("/nonexistent/dir/x", there, stat=snapshot.stat)
    assert missing.kind == locate_target("/nonexistent/dir/x", here).kind
    assert snapshot.targets[str(target)].exists and snapshot.targets[str(target)].stat.size == 4096  # type: ignore[union-attr]


def test_snapshot_writes_nothing_outside_its_folder(tmp_path: Path) -> None:
    records: list[tuple[str, str, list[str]]] = [
        ("F", "/etc/passwd", ["owned"]),
        ("F", "/sys/../../escape", ["owned"]),
        ("D", "/sys/devices/system/cpu", []),
        ("F", "/sys/devices/system/cpu/online", ["0-1", ""]),
        ("L", "/sys/class/block/sda", ["/etc"]),
        ("L", "/sys/class/block/sdb", ["../../../../../../../tmp"]),
        ("L", "/sys/class/block/loop0", ["../../devices/virtual/block/loop0"]),
    ]
    root = tmp_path / "snap"
    root.mkdir()
    write_snapshot_tree(root, records)
    written = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert written == [
        "sys",
        "sys/class",
        "sys/class/block",
        "sys/class/block/loop0",
        "sys/devices",
        "sys/devices/system",
        "sys/devices/system/cpu",
        "sys/devices/system/cpu/online",
    ]
    assert (root / "sys/devices/system/cpu/online").read_text() == "0-1"
    assert not (tmp_path / "escape").exists()


def test_snapshot_links_are_judged_by_where_they_resolve_not_how_they_read(tmp_path: Path) -> None:
    """Each link reads as staying inside, but through another link it resolves outside: it is not kept."""
    records: list[tuple[str, str, list[str]]] = [
        ("D", "/sys/class/block", []),
        ("L", "/sys/class/block/here", ["."]),  # resolves to sys/class/block itself
        ("L", "/sys/class/block/up", ["here/../../../.."]),  # reads as the root; through `here` one above
        ("L", "/sys/class/block/ok", ["../../devices"]),
        ("D", "/sys/devices", []),
    ]
    root = tmp_path / "snap"
    root.mkdir()
    write_snapshot_tree(root, records)
    links = [p for p in root.rglob("*") if p.is_symlink()]
    assert sorted(p.name for p in links) == ["here", "ok"]
    for link in links:
        assert Path(os.path.realpath(link)).is_relative_to(root)


def test_a_snapshot_that_is_not_one_fails_naming_the_host(tmp_path: Path) -> None:
    class Garbage:
        target = SshTarget("root@g", (), "g")

        def call(self, op: str, *, timeout: float = 60.0, **args: object) -> object:
            return {"files": ["not", "a", "dict"], "links": {}, "dirs": []}

    with pytest.raises(SnapshotError, match="host g .*not a snapshot"):
        fetch_snapshot(Garbage(), tmp_path / "snap")


def test_proc_table_lists_processes_with_their_parents(tmp_path: Path) -> None:
    with agent_on(_local(tmp_path)) as agent:
        table = proc_table(agent)
    assert os.getpid() in table
    assert table[os.getpid()].ppid == os.getppid()
    assert table[os.getpid()].name.startswith(("python", "pytest"))


def test_remote_root_reads_and_writes_on_the_host(tmp_path: Path) -> None:
    with agent_on(_local(tmp_path)) as agent:
        _remote_root_reads_and_writes(RemoteRoot(agent), tmp_path)


def _remote_root_reads_and_writes(root: RemoteRoot, tmp_path: Path) -> None:
    attribute = tmp_path / "attr"
    attribute.write_text("old\n")
    assert root.read_required(attribute) == "old"
    root.write_attribute(attribute, "new value")
    assert attribute.read_text() == "new value"
    assert root.writable(attribute) and root.is_dir(tmp_path) and root.exists(attribute)
    attribute.chmod(0o444)
    assert not root.writable(attribute)
    with pytest.raises(SystemFileError) as caught:
        root.read_required(tmp_path / "missing")
    assert caught.value.missing
    assert root.block_dir("no-such-disk") is None


# --- tokens and servers ------------------------------------------------------------------------------


def test_tokens_say_whose_server_it_is() -> None:
    mine = server_token()
    assert not token_stale(mine)  # this process runs
    machine, boot, _, _, nonce = mine.split("-")
    assert token_stale(f"{machine}-{boot}-{2**22 + 7}-1-{nonce}")  # no such process
    assert token_stale(
        f"{machine}-{'f' * 8 if boot != 'f' * 8 else '0' * 8}-{os.getpid()}-1-{nonce}"
    )  # before a reboot
    assert not token_stale(
        f"{'a' * 12 if machine != 'a' * 12 else 'b' * 12}-{boot}-1-1-{nonce}"
    )  # another machine's
    assert not token_stale("not-a-token")


def _unix_listeners() -> dict[str, int]:
    """Every listening Unix socket of this machine, by path, with its inode (``/proc/net/unix``)."""
    found = {}
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[5] == "01":  # state LISTEN
            found[fields[7]] = int(fields[6])
    return found


def _tcp_listeners_of(pid: int) -> list[str]:
    """TCP sockets the process listens on (what a fio server would use without `sock:`)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = str(fd.readlink())
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                found.append(fields[1])
    return found


@pytest.mark.fio
def test_servers_listen_on_private_sockets_only_and_stop_with_their_session(tmp_path: Path) -> None:
    spec = HostSpec(SshTarget("root@h", (), "h"), ())
    hosts = LocalHosts(tmp_path)
    with Fleet([spec], fio_version="fio-3.33", connector=hosts) as fleet:
        fleet.preflight()
        fleet.start_servers()
        (host,) = fleet.hosts
        server = host.server
        assert server is not None and host.forward is not None and host.alive()
        folder = Path(server.folder)
        # The server's socket is in a folder only this user enters; it has no TCP socket at all.
        assert folder.stat().st_mode & 0o777 == 0o700 and folder.name.startswith(f"iobench-{fleet.token}.")
        assert server.socket in _unix_listeners()
        assert _tcp_listeners_of(server.pid) == []
        assert Path(f"/proc/{server.pid}/cwd").readlink() == folder
        assert f"--server=sock:{folder}/fio.sock" in _cmdline(server.pid)
        pid_line = (folder / "pid").read_text().split()
        assert (
            int(pid_line[0]) == server.pid
            and pid_line[1] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        )
        # This machine's end is in the run's private folder too.
        local = Path(fleet.socket_of(host))
        assert local.parent.stat().st_mode & 0o777 == 0o700
        pid = server.pid
        # The agent's session ends (this run dies, or its connection drops): the agent stops the server.
        hosts.made["h"].cut("the session ended")
        assert _gone(pid, wait=10) and not folder.exists()
        assert not host.alive() and host.down is not None


@pytest.mark.fio
def test_a_server_that_ends_on_its_own_is_seen_and_its_folder_removed_with_the_agent(tmp_path: Path) -> None:
    """The agent holds the server: nothing else runs for it on the host, and its end is reported."""
    spec = HostSpec(SshTarget("root@h", (), "h"), ())
    with Fleet([spec], fio_version="fio-3.33", connector=LocalHosts(tmp_path)) as fleet:
        fleet.preflight()
        fleet.start_servers()
        (host,) = fleet.hosts
        server, agent = host.server, host.agent
        assert server is not None and agent is not None and server.alive()
        agent_pid = int(agent.hello["pid"])
        # Between points the agent runs no program: its only child is the server.
        assert _children_of(agent_pid) == [server.pid] + _children_of(server.pid)
        os.kill(server.pid, 9)
        assert _gone(server.pid, wait=10)
        assert not server.alive() and not host.alive()
        assert Path(server.folder).exists()  # the agent keeps it until its input ends, then tidies up
    assert _gone(agent_pid, wait=10) and not Path(server.folder).exists()


def _children_of(pid: int) -> list[int]:
    """Every descendant of ``pid`` here."""
    found = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        found += [int(child), *_children_of(int(child))]
    return found


@pytest.mark.fio
def test_a_killed_runs_server_is_stopped_and_a_planted_pid_file_kills_nothing(tmp_path: Path) -> None:
    home = tmp_path / "h"
    connection = _local(tmp_path)
    # A server left by a run that is gone: its token names this machine, a pid that does not run.
    gone_token = f"{server_token().rsplit('-', 3)[0]}-{2**22 + 3}-1-abcdef"
    folder = _server_folder(gone_token)
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    server = subprocess.Popen(
        ["fio", f"--server=sock:{folder}/fio.sock"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    (folder / "pid").write_text(f"{server.pid} {boot}\n")
    # A planted pid file: same kind of folder, naming an unrelated process.
    planted = _server_folder(f"{gone_token[:-6]}fedcba")
    bystander = subprocess.Popen(["sleep", "300"])
    (planted / "pid").write_text(f"{bystander.pid} {boot}\n")
    # A folder from before a reboot: its pid is not even looked at.
    rebooted = _server_folder(f"{gone_token[:-6]}aaaaaa")
    (rebooted / "pid").write_text(f"{bystander.pid} 00000000-0000-0000-0000-000000000000\n")
    # A live run's server (this process's token) is not touched either.
    live = _server_folder(server_token())
    (live / "pid").write_text(f"{bystander.pid} {boot}\n")
    try:
        deadline = time.monotonic() + 10
        while not (folder / "fio.sock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        with agent_on(connection) as agent:
            notes = stop_stale(agent)
        assert server.wait(timeout=10) is not None and not folder.exists()
        assert bystander.poll() is None, "a planted pid file killed an unrelated process"
        assert not planted.exists() and not rebooted.exists() and live.exists()
        text = "\n".join(notes)
        assert f"stopped the fio server (pid {server.pid})" in text
        assert f"left pid {bystander.pid} alone" in text and "sleep 300" in text
        assert "before the host's last boot" in text
        assert home.exists()
    finally:
        for proc in (server, bystander):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        for path in (folder, planted, rebooted, live):
            shutil.rmtree(path, ignore_errors=True)


def _server_folder(token: str) -> Path:
    """A folder as a server's session makes it (``mktemp -d``, six random characters)."""
    made = subprocess.run(
        ["mktemp", "-d", f"/tmp/iobench-{token}.XXXXXX"], capture_output=True, text=True, check=True
    )
    return Path(made.stdout.strip())


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def _gone(pid: int, wait: float = 5.0) -> bool:
    """Whether ``pid`` ended (a zombie waiting for init counts as ended), waiting up to ``wait`` s."""
    deadline = time.monotonic() + wait
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


# --- preflight --------------------------------------------------------------------------------------


def test_preflight_reports_every_host_at_once(tmp_path: Path) -> None:
    specs = [HostSpec(SshTarget(f"root@{n}", (), n), ()) for n in ("ok", "old", "bare", "gone")]
    hosts = LocalHosts(
        tmp_path,
        old={"programs": {"fio": "fio-3.28"}},
        bare={"programs": {"fio": None, "numactl": None}},
        gone={"unreachable": "Connection refused"},
    )
    with Fleet(specs, fio_version="fio-3.33", connector=hosts) as fleet:
        with pytest.raises(HostsRefused) as caught:
            fleet.preflight()
    text = str(caught.value)
    assert caught.value.exit_code == 2
    assert "host ok" not in text
    assert "host old (root@old): it runs fio-3.28, this machine fio-3.33" in text
    assert "host bare (root@bare): fio is not installed (apt-get install fio, version fio-3.33)" in text
    assert "numactl is not installed (apt-get install numactl)" in text
    assert "host gone (root@gone) is unreachable: Connection refused" in text
    assert all(c.closed for c in hosts.made.values())
    # Preflight only reads: nothing but each agent ran, and no server was started anywhere.
    assert all(h.calls == [] for h in hosts.made.values())
    assert not any(h.agent is not None and h.agent.asked["serve_fio"] for h in fleet.hosts)


@pytest.mark.parametrize(
    ("script", "said"),
    [
        ("yes", "over the limit"),  # endless output: refused at its first length
        ("printf '\\000\\000\\000\\004abcd'; exec sleep 30", "not JSON"),
        ("printf '\\000\\000\\000\\002{}'; exec sleep 30", "did not greet as an iobench agent"),
    ],
)
def test_a_host_whose_agent_answers_garbage_fails_itself_and_the_others_go_on(
    tmp_path: Path, script: str, said: str
) -> None:
    specs = [HostSpec(SshTarget(f"root@{n}", (), n), ()) for n in ("ok", "bad")]
    fake = f"#!/bin/sh\ncat >/dev/null &\n{script}\n"
    hosts = LocalHosts(tmp_path, bad={"programs": {"python3": fake}})
    with Fleet(specs, fio_version="fio-3.33", connector=hosts) as fleet:
        with pytest.raises(HostsRefused) as caught:
            fleet.preflight()
        ok = fleet.hosts[0]
        assert ok.facts is not None and ok.agent is not None and ok.agent.alive()  # the other host went on
    (problem,) = caught.value.problems
    assert problem.startswith("host bad (root@bad): its agent did not start: ") and said in problem


@pytest.mark.parametrize(
    ("python", "why"),
    [
        (None, "python3 is not installed (iobench needs 3.9 or newer there)"),
        (
            "#!/bin/sh\nexit 4\n",
            "its python3 is older than 3.9; install 3.9 or newer",
        ),  # the bootstrap's answer
    ],
)
def test_a_host_without_python3_is_refused_naming_what_it_needs(
    tmp_path: Path, python: str | None, why: str
) -> None:
    specs = [HostSpec(SshTarget("root@bare", (), "bare"), ())]
    hosts = LocalHosts(tmp_path, bare={"programs": {"python3": python}})
    with (
        Fleet(specs, fio_version="fio-3.33", connector=hosts) as fleet,
        pytest.raises(HostsRefused) as caught,
    ):
        fleet.preflight()
    assert caught.value.exit_code == 2
    assert caught.value.problems == [f"host bare (root@bare): {why}"]


def test_preflight_runs_the_write_guard_on_each_host(tmp_path: Path) -> None:
    existing = tmp_path / "theirs.dat"
    existing.write_bytes(b"data")
    spec = HostSpec(
        SshTarget("root@h", (), "h"), (_Target(str(existing)), _Target("/nonexistent/x.dat")), writes=True
    )
    with Fleet([spec], fio_version="fio-3.33", connector=LocalHosts(tmp_path)) as fleet:
        with pytest.raises(HostsRefused) as caught:
            fleet.preflight()
    text = str(caught.value)
    assert f"host h (root@h): target {existing} exists and iobench did not create it" in text
    assert "target /nonexistent/x.dat: directory /nonexistent does not exist" in text


class _Target:
    def __init__(self, path: str, size: int | None = 1 << 20, allow_write: bool = False) -> None:
        self.path, self.size, self.allow_write, self.home_node = path, size, allow_write, None
        self.where, self.from_command_line = "", False


def test_two_hosts_with_one_hostname_need_names(tmp_path: Path) -> None:
    specs = [HostSpec(SshTarget(f"root@{n}", (), ""), ()) for n in ("x", "y")]
    with Fleet(specs, fio_version="fio-3.33", connector=LocalHosts(tmp_path)) as fleet:
        with pytest.raises(HostsRefused, match="root@x and root@y are both named"):
            fleet.preflight()


@pytest.mark.parametrize("hostname", ["../../etc/cron.d/x", "a b", "-rf", "x" * 65, "host/with/slash", ""])
def test_a_hostname_that_would_name_files_badly_is_refused(tmp_path: Path, hostname: str) -> None:
    """Without `name:`, the hostname names a host's files: it is held to the rule for a configured name."""
    tree = FakeSysfs(tmp_path / "tree")
    tree.cpu(0, 0, 0, "0", "1")
    tree.node(0, "0", "1", "10")
    (tmp_path / "tree/proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "tree/proc/sys/kernel/hostname").write_text(hostname + "\n")
    odd = {"root": tmp_path / "tree"}
    hosts = LocalHosts(tmp_path, **{"root@x": odd})
    with Fleet([HostSpec(SshTarget("root@x", (), ""), ())], fio_version="fio-3.33", connector=hosts) as fleet:
        with pytest.raises(HostsRefused, match=r"its hostname .* cannot name files.*give the host a `name:`"):
            fleet.preflight()
    # With a name, the same host is fine.
    hosts = LocalHosts(tmp_path, x=odd)
    with Fleet(
        [HostSpec(SshTarget("root@x", (), "x"), ())], fio_version="fio-3.33", connector=hosts
    ) as fleet:
        (facts,) = fleet.preflight()
    assert facts.name == "x"


# --- planning against each host's own topology -------------------------------------------------------


def _two_host_plan(
    write_matrix: Callable[..., Path], tmp_path: Path, snapshots: SnapshotCache, axes: str
) -> Plan:
    """A plan over host big (8 NUMA nodes) and host small (one), each placed from its snapshot."""
    path = _matrix(
        write_matrix,
        """\
        - {name: big, ssh: big, targets: [{path: /dev/sda, home_node: 1}]}
        - {name: small, ssh: small, targets: [{path: /dev/sda, home_node: 0}]}
        """,
        axes,
    )
    m = load_matrix(path)
    roots = {"big": snapshots.root("16amd64-8n2c"), "small": snapshots.root("2pa-pcidomain32bits")}
    with Fleet(host_specs(m), fio_version=m.fio_version, connector=LocalHosts(tmp_path)) as fleet:
        for host in fleet.hosts:
            root = roots[host.spec.target.label]
            topology = discover_topology(root)
            snapshot = hosts_mod.Snapshot(root, {}, None, None)
            locations = {"/dev/sda": locate_target("/dev/sda", topology)}
            host.facts = HostFacts(
                host.spec,
                host.spec.target.label,
                "x",
                None,
                None,
                None,
                "fio-3.33",
                "installed",
                snapshot,
                topology,
                locations,
            )
        return plan_points(m, host_sites(m, fleet), hosts=[h.facts for h in fleet.hosts if h.facts])


def test_each_host_is_placed_against_its_own_topology(
    write_matrix: Callable[..., Path], tmp_path: Path, snapshots: SnapshotCache
) -> None:
    plan = _two_host_plan(write_matrix, tmp_path, snapshots, "binding: [local, remote]\nhost: [big, small]\n")
    by = {(r.params["host"], r.params["binding"]): r for r in plan.runs}
    local_big = by[("big", "local")].processes[0]
    assert (local_big.host, local_big.cpu_node, local_big.mem_node) == ("big", 1, 1)
    assert "numa_mem_policy=bind:1" in local_big.jobfile and "cpus_allowed=2-3" in local_big.jobfile
    remote_big = by[("big", "remote")].processes[0]
    assert remote_big.cpu_node == 0  # the nearest other node (all at distance 20: the lowest id)
    assert "numa_mem_policy=bind:0" in remote_big.jobfile and "cpus_allowed=0-1" in remote_big.jobfile
    assert by[("small", "remote")].status == "skipped"
    assert by[("small", "remote")].reason.startswith("host small: binding remote needs a second NUMA node")  # type: ignore[union-attr]
    assert local_big.argv == ("--client=big", "job-big.fio")
    assert plan.hosts and plan.hosts[0].name == "big"


def test_placements_coincide_per_host_and_run_once_only_where_they_do(
    write_matrix: Callable[..., Path], tmp_path: Path, snapshots: SnapshotCache
) -> None:
    plan = _two_host_plan(write_matrix, tmp_path, snapshots, "host: [big, small]\nbinding: [local, none]\n")
    by = {(r.params["host"], r.params["binding"]): r for r in plan.runs}
    assert by[("big", "none")].status == "run"  # eight nodes: unbound is not local there
    small_local, small_none = by[("small", "local")], by[("small", "none")]
    assert small_local.status == "run" and small_none.same_as == small_local.point
    assert small_none.reason == (
        f"same as point {small_local.point} on host small: one NUMA node (node 0): "
        "binding none runs on the same CPUs and memory as local"
    )


def test_client_argv_gives_each_host_its_job_file() -> None:
    class P:
        def __init__(self, host: str, argv: tuple[str, ...]) -> None:
            self.host, self.argv = host, argv

    processes = [P("a", ("--client=a", "--readonly", "job-a.fio")), P("b", ("--client=b", "job-b.fio"))]
    assert client_argv("/usr/bin/fio", processes, {"a": "sock:host-a", "b": "sock:host-b"}) == [  # type: ignore[arg-type]
        "/usr/bin/fio",
        "--output-format=json+",
        "--output=fio.json",
        "--client=sock:host-a",
        "--readonly",
        "job-a.fio",
        "--client=sock:host-b",
        "job-b.fio",
    ]


def test_job_binding_puts_numactl_into_the_job() -> None:
    node = Placement("local", "node", 1, 1, (4, 5, 6, 7), None, ("--cpunodebind=1", "--membind=1"))
    assert job_binding(node) == {"cpus_allowed": "4-7", "numa_mem_policy": "bind:1"}
    pinned = Placement(
        "local", "diff-cores", 1, 1, (4, 6), ((4,), (6,)), ("--physcpubind=4,6", "--membind=1")
    )
    assert job_binding(pinned) == {"numa_mem_policy": "bind:1"}  # the pinning is render_jobfile's
    assert job_binding(Placement("none", "node", None, None, (0, 1), None, ())) == {}


# --- results ------------------------------------------------------------------------------------------


def test_client_output_rows_are_named_by_port() -> None:
    text = CLIENT_PLUS.read_text()
    raw = json.loads(text[text.index("{") :])
    ports = sorted({e["port"] for e in raw["client_stats"]})
    frame = parse_client_output(
        text, {("127.0.0.1", ports[0]): "a", ("127.0.0.1", ports[1]): "b"}, origin="fio.json"
    )
    assert sorted(frame["host"].unique()) == ["a", "b"]
    assert "All clients" not in set(frame["jobname"])
    assert len(frame) == 4
    io = frame.groupby("host")["io_bytes"].sum()
    assert (io["a"], io["b"]) == (2 * 2**20, 2 * 3 * 2**20)
    only_b = parse_client_output(text, {("127.0.0.1", ports[1]): "b"})
    # Servers named directly may share fio's port and differ in address.
    assert parse_client_output(text, {("10.0.0.1", ports[1]): "b"}).empty
    assert set(only_b["host"]) == {"b"} and len(only_b) == 2
    # The hosts together are one point; by host each its own.
    both = point_totals(frame.assign(point=1, repeat=1))
    assert int(both["io_bytes"].iloc[0]) == 8 * 2**20
    split = point_totals(frame.assign(point=1, repeat=1), by=["host"]).set_index("host")
    assert int(split.loc["a", "io_bytes"]) == 2 * 2**20


# --- device settings on a host ---------------------------------------------------------------------


def _fake_sysfs(root: Path, disk: str = "sdz") -> Path:
    queue = root / "sys" / "block" / disk / "queue"
    queue.mkdir(parents=True)
    (queue / "scheduler").write_text("[mq-deadline] none\n")
    (queue / "read_ahead_kb").write_text("128\n")
    (root / "sys" / "block" / disk / "dev").write_text("8:240\n")
    return root / "sys"


def test_journal_of_a_remote_disk_names_its_host_and_restore_reaches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysfs = _fake_sysfs(tmp_path / "remote")
    host = SshTarget("root@storage-a", ("Port=2222",), "a").to_json()
    tuner = DeviceTuner(sysfs=sysfs, host=host)
    tuner.apply("sdz", scheduler="none", readahead_kb=4096)
    (journal,) = pending_journals()
    assert journal.host == host and journal.where == "a:sdz"
    assert journal.path.name.startswith("a-") and journal.path.name.endswith("@sdz.json")
    assert json.loads(journal.path.read_text())["host"]["destination"] == "root@storage-a"
    check_no_pending(["sdz"])  # the same disk name here is another disk
    with pytest.raises(IobenchError, match=r"a:sdz still has device settings"):
        check_no_pending(["sdz"], host=host)
    # The run dies without restoring; `iobench restore` reaches the host.
    tuner._journals.clear()
    monkeypatch.setattr(Journal, "owner_alive", lambda self: False)
    reached: list[dict[str, object]] = []

    import contextlib

    from iobench.system import remote
    from iobench.system.hostfs import SystemRoot

    @contextlib.contextmanager
    def fake_remote_root(record: dict[str, object]):  # type: ignore[no-untyped-def]
        reached.append(record)
        yield SystemRoot(sysfs=sysfs)

    monkeypatch.setattr(remote, "remote_root", fake_remote_root)
    assert restore_from_journals() == ["a:sdz: restored scheduler mq-deadline, readahead_kb 128"]
    assert reached == [host]
    assert (sysfs / "block/sdz/queue/scheduler").read_text().startswith("mq-deadline")
    assert pending_journals() == []


def test_restore_keeps_the_journal_of_an_unreachable_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysfs = _fake_sysfs(tmp_path / "remote")
    host = SshTarget("root@gone", (), "gone").to_json()
    DeviceTuner(sysfs=sysfs, host=host).apply("sdz", scheduler="none")
    monkeypatch.setattr(Journal, "owner_alive", lambda self: False)
    from iobench.system import remote

    def unreachable(record: dict[str, object]) -> object:
        raise HostUnreachable("host gone (root@gone) is unreachable: No route to host")

    monkeypatch.setattr(remote, "remote_root", unreachable)
    with pytest.raises(IobenchError, match=r"gone:sdz: host gone .* No route to host; the journal is kept"):
        restore_from_journals()
    assert len(pending_journals()) == 1


# --- whole runs on hosts that are this machine --------------------------------------------------------


def _local_hosts_matrix(
    write_matrix: Callable[..., Path], tmp_path: Path, axes: str, runtime: str = "1", repeat: int = 1
) -> Path:
    return write_matrix(
        textwrap.dedent(
            f"""\
            version: 1
            name: fake-hosts
            repeat: {repeat}
            fio:
              ioengine: null
              rw: randread
              bs: 4k
              runtime: {runtime}
              time_based: 1
            hosts:
              - {{name: a, ssh: root@a, targets: [{{path: {tmp_path}/a.dat, size: 8M}}]}}
              - {{name: b, ssh: root@b, targets: [{{path: {tmp_path}/b.dat, size: 8M}}]}}
            matrix:
            """
        )
        + textwrap.indent(textwrap.dedent(axes), "  ")
    )


@pytest.mark.fio
def test_a_run_on_two_hosts_names_rows_by_host(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    m = load_matrix(_local_hosts_matrix(write_matrix, tmp_path, "iodepth: [1, 2]\n"))
    hosts = LocalHosts(tmp_path / "homes")
    result = run_hosts(m, out=tmp_path / "results", connector=hosts)
    assert result.counts == {"ok": 2}
    frame = result.frame
    assert frame is not None and set(frame["host"]) == {"a", "b"}
    assert (frame.groupby(["point", "host"])["iops"].sum() > 0).all()
    meta = json.loads((result.run_dir / "points" / "0001-r1" / "meta.json").read_text())
    argv = json.loads((result.run_dir / "points" / "0001-r1" / "argv.json").read_text())[0]
    assert [p["host"] for p in meta["processes"]] == ["a", "b"]
    assert [p["client"] for p in meta["processes"]] == ["sock:host-a", "sock:host-b"]
    assert argv[3:] == ["--client=sock:host-a", "job-a.fio", "--client=sock:host-b", "job-b.fio"]
    # The links to the forwards were only there while fio ran.
    assert not any(p.is_symlink() for p in (result.run_dir / "points").rglob("*"))
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert [h["host"] for h in manifest["hosts"]] == ["a", "b"]
    # The frame rebuilt from the files alone says the same.
    rebuilt = load(result.run_dir, rebuild=True)
    assert set(rebuilt["host"]) == {"a", "b"}
    assert [h["host"] for h in rebuilt.attrs["hosts"]] == ["a", "b"]
    # Figures split by host; the report has a section per host and says the client only drove fio.
    from iobench.plots import plotdata
    from iobench.plots.plotstyle import caption
    from iobench.report.page import write_report

    # A point on both hosts is one total, the cluster's, as in the report's tables; each host on request.
    totals = plotdata.point_totals(rebuilt)
    assert totals["host"].tolist() == ["a+b", "a+b"] and totals["hosts"].tolist() == [2, 2]
    assert "host" not in plotdata.splitting_axes(totals, ["iodepth"])
    assert sorted(plotdata.point_totals(rebuilt, by=["host"])["host"]) == ["a", "a", "b", "b"]
    assert caption(rebuilt).startswith("a, b · ")
    report = write_report(result.run_dir)
    html = report.html.read_text()
    assert "<h2>Host a</h2>" in html and "<h2>Host b</h2>" in html
    assert "Client (fio --client" in html and f"{tmp_path}/a.dat" in html
    # Nothing left: servers stopped with their sessions, their folders gone, forwards closed.
    for connection in hosts.made.values():
        assert connection.closed and not connection.links and not connection.streams
    assert not list(Path("/tmp").glob(f"iobench-{server_token().rsplit('-', 1)[0]}-*"))


@pytest.mark.fio
def test_a_host_that_dies_fails_its_points_and_resume_completes_them(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    # a, b, a, b in interleaved order
    m = load_matrix(_local_hosts_matrix(write_matrix, tmp_path, "iodepth: [1]\nhost: [a, b]\n", repeat=2))
    hosts = LocalHosts(tmp_path / "homes")

    class CutB:
        """Progress that cuts host b's connection once its first point is done."""

        def __init__(self) -> None:
            self.outcomes: list[tuple[str, str, str | None]] = []

        def started(self, *args: object) -> None: ...
        def finished(self, *args: object) -> None: ...
        def point_started(self, run: object, index: int) -> None: ...

        def point_finished(self, run: object, outcome: object) -> None:
            self.outcomes.append((outcome.key, outcome.status, outcome.reason))  # type: ignore[attr-defined]
            if len(self.outcomes) == 2:
                hosts.made["b"].cut("network unreachable")

    progress = CutB()
    with pytest.raises(HostLost) as caught:
        run_hosts(m, out=tmp_path / "results", connector=hosts, progress=progress)  # type: ignore[arg-type]
    fault = caught.value
    statuses = {key: status for key, status, _ in progress.outcomes}
    assert statuses == {"0001-r1": "ok", "0002-r1": "ok", "0001-r2": "ok", "0002-r2": "failed"}
    reason = {k: r for k, _, r in progress.outcomes}["0002-r2"]
    assert reason is not None and "host b" in reason and "network unreachable" in reason
    # A dropped connection is the environment's fault: exit 3, the frame written, how to finish said.
    assert fault.exit_code == 3 and fault.run_dir is not None
    run_dir = Path(fault.run_dir)
    assert "host b" in str(fault) and "root@b can be reached again" in fault.remedy
    assert [step.action for step in fault.steps] == ["restore", "resume", "report"]
    assert fault.steps[1].left == 1 and fault.steps[1].run_dir == fault.run_dir
    frame = load(run_dir)
    failed = frame[frame["status"] == "failed"]
    assert set(failed["host"]) == {"b"}
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "stopped"
    # b is back: --resume runs only what is missing.
    again = run_hosts(m, out=tmp_path / "results", resume=run_dir, connector=LocalHosts(tmp_path / "homes"))
    assert again.counts == {"ok": 4}
    assert again.frame is not None and set(again.frame["host"]) == {"a", "b"}


@pytest.mark.fio
def test_unreachable_host_leaves_no_run_directory(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    m = load_matrix(_local_hosts_matrix(write_matrix, tmp_path, "iodepth: [1]\n"))
    hosts = LocalHosts(tmp_path / "homes", b={"unreachable": "Connection timed out"})
    with pytest.raises(
        HostsRefused, match=r"host b \(root@b\) is unreachable: Connection timed out"
    ) as caught:
        run_hosts(m, out=tmp_path / "results", connector=hosts)
    assert caught.value.exit_code == 2
    assert not (tmp_path / "results").exists()
    assert not (hosts.made["a"].home / ".iobench").exists()  # no server was started on a


def test_frame_of_a_failed_host_point_names_the_host(tmp_path: Path) -> None:
    from iobench.results.assemble import point_frame
    from iobench.store.records import PointMeta

    process = {"argv": [], "jobfile_name": "j", "output": "fio.json", "targets": ["/x"], "sections": ["x"]}
    meta = PointMeta.model_validate(
        {
            "key": "0001-r1",
            "point": 1,
            "repeat": 1,
            "params": {},
            "status": "failed",
            "reason": "host b: lost",
            "processes": [
                {**process, "host": "a", "client": "127.0.0.1,1", "client_port": 1},
                {**process, "host": "b", "client": "127.0.0.1,2", "client_port": 2},
            ],
        }
    )
    frame = point_frame(tmp_path, meta, "run", "client-host")
    assert list(frame["host"]) == ["a", "b"]
    assert isinstance(frame, pd.DataFrame)


def test_the_guard_asks_the_host_for_device_numbers(tmp_path: Path) -> None:
    from iobench.system.fleet import Host
    from iobench.system.hostfs import block_node_devno
    from iobench.system.remoteguard import RemoteMachine

    disk = next(f"/dev/{d.name}" for d in discover_topology("/").devices if os.path.exists(f"/dev/{d.name}"))
    connection = _local(tmp_path)
    host = Host(HostSpec(connection.target, ()), connection)
    host.agent = HostAgent(connection).start()
    try:
        snapshot = fetch_snapshot(host, tmp_path / "snap", [disk])
        machine = RemoteMachine(host, snapshot)
        assert machine.devno(disk) == block_node_devno(disk) is not None
        assert machine.devno(str(tmp_path)) is None and machine.devno("tmpfs") is None
        assert machine.devno("/dev/null") is None  # a character device
        asked = host.agent.asked["stat"]
        assert machine.devno("/dev/null") is None and host.agent.asked["stat"] == asked  # asked once
        _guard_answers(machine, disk)
    finally:
        host.agent.close()


def _guard_answers(machine: object, disk: str) -> None:
    from iobench.system.remoteguard import RemoteMachine

    assert isinstance(machine, RemoteMachine)
    assert machine.root_devno() == f"{os.major(os.stat('/').st_dev)}:{os.minor(os.stat('/').st_dev)}"
    assert machine.realpath(disk) == os.path.realpath(disk)
    assert machine.prefix == "host h (root@h): "


@pytest.mark.fio
def test_per_target_launch_on_a_host_keeps_each_target_once(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_matrix(
        textwrap.dedent(
            f"""\
            version: 1
            name: per-target
            launch: per-target
            fio: {{ioengine: 'null', rw: randread, bs: 4k, runtime: 1, time_based: 1}}
            hosts:
              - {{name: a, ssh: root@a, targets: [{{path: {tmp_path}/x.dat, size: 8M}}, {{path: {tmp_path}/y.dat, size: 8M}}]}}
            matrix: {{iodepth: [1]}}
            """
        )
    )
    result = run_hosts(load_matrix(path), out=tmp_path / "results", connector=LocalHosts(tmp_path / "homes"))
    assert result.counts == {"ok": 1}
    frame = result.frame
    assert frame is not None
    assert sorted(frame["jobname"]) == ["x.dat", "y.dat"] and set(frame["host"]) == {"a"}
    argv = json.loads((result.run_dir / "points" / "0001-r1" / "argv.json").read_text())[0]
    assert [a for a in argv if a.endswith(".fio")] == ["job-a-x.dat.fio", "job-a-y.dat.fio"]
    assert sorted(load(result.run_dir, rebuild=True)["jobname"]) == ["x.dat", "y.dat"]


@pytest.mark.root
@pytest.mark.loopdev
def test_a_hosts_device_with_a_filesystem_is_refused_naming_the_host(loops: object, tmp_path: Path) -> None:
    from loopdev import LoopFactory

    assert isinstance(loops, LoopFactory)
    loop = loops.attach(16)
    loops.mkfs_ext4(loop)
    target = _Target(loop.path, size=None, allow_write=True)
    spec = HostSpec(SshTarget("root@h", (), "h"), (target,), writes=True)
    with Fleet([spec], fio_version="fio-3.33", connector=LocalHosts(tmp_path)) as fleet:
        with pytest.raises(HostsRefused) as caught:
            fleet.preflight()
    assert f"host h (root@h): target {loop.path} holds TYPE=ext4 (filesystem) at byte offset 1080" in str(
        caught.value
    )
    assert f"pass --allow-write {loop.path}" in str(caught.value)
    # Named on the command line, it may be written: the same rule as here.
    with Fleet(
        [spec], fio_version="fio-3.33", allow_write=[loop.path], connector=LocalHosts(tmp_path)
    ) as fleet:
        (facts,) = fleet.preflight()
    assert facts.locations[loop.path].kind == "block" and facts.locations[loop.path].device == loop.name


class _NoAgent:
    target = SshTarget("root@h", (), "h")

    def call(self, op: str, *, timeout: float = 60.0, **args: object) -> object:
        raise AssertionError(f"asked {op}")


def _row(pid: int, cpus: str, state: str, policy: list[str] | None = None) -> dict[str, object]:
    """A job process as the agent's looks answer it."""
    row: dict[str, object] = {
        "pid": pid,
        "ppid": 102,
        "cpus": cpus,
        "mems": "0",
        "state": state,
        "name": "fio",
    }
    if policy is not None:
        row["policy"] = policy
    return row


def test_the_monitor_keeps_job_processes_seen_twice_and_their_policy(tmp_path: Path) -> None:
    from iobench.system.hostmonitor import HostMonitor

    monitor = HostMonitor(_NoAgent(), server_pid=100)
    monitor._look([_row(4242, "0-1", "S")])  # a job, as it started
    (first,) = monitor.workers.values()
    assert (first.pid, first.looks, first.settled, first.policy) == (4242, 1, False, None)
    monitor._look([_row(4242, "1", "R", ["bind:0", "bind:0", "default"])])  # its cpus_allowed applied
    (worker,) = monitor.workers.values()
    assert worker.settled and worker.cpus == "1" and worker.policy == "bind:0,default"
    monitor._look([_row(4242, "1", "Z"), "garbage", {"pid": "x"}])
    monitor._look([_row(4242, "1", "Z")])
    assert monitor.unreaped() == [4242]
    monitor.begin_point()
    assert monitor.workers == {}


def test_a_hosts_sample_reads_every_thread_as_this_machines_sampler_does() -> None:
    """The agent sends a short line per thread; read back, each is the thread's stat as procfs gives it."""
    import ctypes
    import threading

    from iobench.agent import probe
    from iobench.system import procfs
    from iobench.system.hostfs import SystemRoot
    from iobench.system.hostmonitor import snapshot_of
    from iobench.system.sampler import Watch

    named, stop = threading.Event(), threading.Event()

    def odd_name() -> None:  # a thread name with spaces and parentheses, as any program may set
        ctypes.CDLL(None).prctl(15, b"a) b (c) d", 0, 0, 0)  # PR_SET_NAME
        named.set()
        stop.wait(30)

    thread = threading.Thread(target=odd_name, daemon=True)
    thread.start()
    named.wait(10)
    try:
        stats = [str(p) for p in Path("/proc").glob("[0-9]*/task/[0-9]*/stat")]
        parts = probe.sample("/", threads=True)
        local = {t.tid: t for t in procfs.tasks(SystemRoot())}
    finally:
        stop.set()
        thread.join(10)
    sample = snapshot_of(0.0, parts, Watch(devices=(), irqs=(), threads=True))
    assert sample.tasks is not None
    odd = [t for t in sample.tasks.values() if t.comm == "a) b (c) d"]
    assert len(odd) == 1 and odd[0].pid == os.getpid()
    # This process's threads exactly; the machine's others may have ended or exec'd between the reads.
    ours = {tid: t for tid, t in local.items() if t.pid == os.getpid()}
    assert ours and all(tid in sample.tasks for tid in ours)
    for tid, mine in ours.items():
        task = sample.tasks[tid]
        assert (task.pid, task.comm, task.kernel) == (mine.pid, mine.comm, mine.kernel)
        assert task.processor is not None
        assert 0 <= mine.user_ticks - task.user_ticks < 1000  # read a moment apart
    same = [
        tid
        for tid, task in sample.tasks.items()
        if tid in local
        and (task.pid, task.comm, task.kernel) == (local[tid].pid, local[tid].comm, local[tid].kernel)
    ]
    assert len(same) >= 0.9 * len(set(sample.tasks) & set(local))
    # a few dozen bytes a thread, not its whole stat line
    assert len(json.dumps(parts)) < sum(len(Path(s).read_bytes()) for s in stats if Path(s).exists()) / 2


@pytest.mark.fio
def test_a_server_named_in_the_matrix_is_used_and_left_running(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    socket = tmp_path / "given" / "fio.sock"
    socket.parent.mkdir(mode=0o700)
    given = subprocess.Popen(
        ["fio", f"--server=sock:{socket}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    pid = given.pid
    deadline = time.monotonic() + 10
    while not socket.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        path = write_matrix(
            textwrap.dedent(
                f"""\
                version: 1
                name: given
                fio: {{ioengine: 'null', rw: randread, bs: 4k, runtime: 1, time_based: 1}}
                hosts:
                  - {{name: g, ssh: root@g, server: "{socket}", targets: [{{path: {tmp_path}/g.dat, size: 8M}}]}}
                matrix: {{iodepth: [1]}}
                """
            )
        )
        hosts = LocalHosts(tmp_path / "homes")
        result = run_hosts(load_matrix(path), out=tmp_path / "results", connector=hosts)
        assert result.counts == {"ok": 1}
        assert result.frame is not None and set(result.frame["host"]) == {"g"}
        meta = json.loads((result.run_dir / "points" / "0001-r1" / "meta.json").read_text())
        assert meta["processes"][0]["client"] == "sock:host-g"
        # No server of iobench's: the named one, through its forward (the one stream: the agent).
        assert [argv[0] for argv in hosts.made["g"].started] == ["python3"] and hosts.made["g"].calls == []
        assert not _gone(pid, wait=0)  # not iobench's to stop
    finally:
        given.terminate()
        given.wait(timeout=10)


def test_looks_are_every_tick_only_while_a_job_in_view_is_unsettled(tmp_path: Path) -> None:
    from iobench.system.hostmonitor import HostMonitor

    monitor = HostMonitor(_NoAgent(), server_pid=100, interval=1.0, tick=0.25)
    slow = 4  # ticks an interval
    assert monitor._look_every(slow) == 2  # nothing in view yet: every half interval
    monitor._look([_row(4242, "0-1", "S")])
    assert monitor._look_every(slow) == 1  # a job seen once: every tick
    monitor._look([_row(4242, "1", "R", ["default"])])
    assert monitor._look_every(slow) == slow  # seen twice with its policy: every interval
    monitor._look([_row(4242, "1", "R"), _row(4243, "1", "R")])
    assert monitor._look_every(slow) == 1  # a new job in view
    monitor.begin_point()
    assert monitor._look_every(slow) == 2


class _Recording:
    """A host's agent whose requests are written down as they are made."""

    def __init__(self, agent: HostAgent) -> None:
        self.agent = agent
        self.ops: list[str] = []

    @property
    def target(self) -> SshTarget:
        return self.agent.target

    def call(self, op: str, *, timeout: float = 60.0, **args: object) -> object:
        self.ops.append(op)
        return self.agent.call(op, timeout=timeout, **args)


@pytest.mark.fio
def test_the_agent_looks_less_often_once_the_jobs_are_settled(tmp_path: Path) -> None:
    from iobench.system.fioserver import server_token, start_server
    from iobench.system.hostmonitor import HostMonitor

    with agent_on(_local(tmp_path)) as agent:
        recording = _Recording(agent)
        server = start_server(agent, "fio", server_token())
        job = tmp_path / "j.fio"
        job.write_text("[global]\nioengine=null\nsize=16m\ntime_based=1\nruntime=3\n[a]\nrw=randread\n")
        monitor = HostMonitor(recording, server.pid, None, interval=1.0, tick=0.1).start()
        try:
            (tmp_path / "host-h").symlink_to(server.socket)
            monitor.begin_point()
            started = time.monotonic()
            done = run_process(["fio", "--client=sock:host-h", str(job)], cwd=tmp_path, timeout=60)
            ticks = (time.monotonic() - started) / 0.1
            monitor.end_point()
            assert done.returncode == 0, done.stderr
            (worker,) = monitor.workers.values()
            assert worker.settled and worker.policy
            looks = recording.ops.count("looks")
            # Not every tick: before the job is in view every half interval, once settled every interval.
            assert 2 <= looks < ticks / 2, (looks, ticks)
            assert "sample" not in recording.ops  # no telemetry asked for
        finally:
            monitor.stop()
            server.stop()


@pytest.mark.fio
def test_a_run_long_agent_sees_each_points_jobs_and_samples_only_while_it_runs(tmp_path: Path) -> None:
    from iobench.system.fioserver import server_token, start_server
    from iobench.system.hostmonitor import HostMonitor
    from iobench.system.sampler import Watch

    agent = HostAgent(_local(tmp_path)).start()
    server = start_server(agent, "fio", server_token())
    job = tmp_path / "j.fio"
    job.write_text(
        "[global]\nioengine=null\nsize=16m\ntime_based=1\nruntime=2\nnumjobs=2\n[a]\nrw=randread\n"
    )
    disks = ["vda"] if Path("/sys/block/vda").exists() else []
    watch = Watch(devices=tuple(disks), irqs=(), threads=True)
    gone = tmp_path / "gone.dat"
    monitor = HostMonitor(
        agent, server.pid, watch, disks=disks, targets=[str(job), str(gone)], interval=0.25, tick=0.1
    ).start()
    try:
        link = tmp_path / "host-h"
        link.symlink_to(server.socket)
        before = monitor.edge()
        assert before.sample is not None and before.sample.cpu and before.sample.tasks
        assert before.targets[str(job)]["block"] is False
        assert before.targets[str(job)]["identity"] == [job.stat().st_dev, job.stat().st_ino]
        assert before.targets[str(gone)] == {"exists": False}
        if disks:
            assert before.settings["vda"]["scheduler"] and before.settings["vda"]["readahead_kb"].isdigit()
            assert before.sample.disks is not None and "vda" in before.sample.disks
        monitor.begin_point()
        started = time.monotonic()
        done = run_process(
            ["fio", "--output-format=json+", "--output=out.json", "--client=sock:host-h", str(job)],
            cwd=tmp_path,
            timeout=60,
        )
        monitor.end_point()
        assert done.returncode == 0, done.stderr
        workers = dict(monitor.workers)
        assert len(workers) == 2 and all(w.settled for w in workers.values()), workers
        assert all(w.cpus and w.policy for w in workers.values()), workers
        samples = monitor.samples_since(started)
        assert len(samples) >= 3 and all(s.cpu for s in samples)
        assert monitor.unreaped() == []
        after = monitor.edge()
        assert after.sample is not None and after.sample.t > samples[-1].t
    finally:
        monitor.stop()
        server.stop()
        agent.close()
    with pytest.raises(HostUnreachable, match="watch ended"):
        monitor.edge(timeout=1)


def test_the_agent_samples_and_edges_without_awk_sed_or_busybox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host whose PATH has python3 and nothing else: every sample and edge still comes back whole."""
    from iobench.system.hostmonitor import HostMonitor
    from iobench.system.procfs import parse_cpu_times
    from iobench.system.sampler import MEMINFO_KEPT, Watch

    only = tmp_path / "only"
    only.mkdir()
    (only / "python3").symlink_to(Path(sys.executable).resolve())  # the interpreter itself, not a wrapper
    monkeypatch.setenv("PATH", str(only))
    assert shutil.which("awk") is None and shutil.which("sed") is None and shutil.which("busybox") is None
    target = tmp_path / "t.dat"
    target.write_bytes(b"x")
    disks = ["vda"] if Path("/sys/block/vda").exists() else []
    watch = Watch(devices=tuple(disks), irqs=(), threads=True)
    with agent_on(_local(tmp_path)) as agent:
        monitor = HostMonitor(
            agent, None, watch, disks=disks, targets=[str(target)], interval=0.1, tick=0.05
        ).start()
        try:
            before = monitor.edge()
            monitor.begin_point()
            deadline = time.monotonic() + 20
            while len(monitor.samples) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            monitor.end_point()
            after = monitor.edge()
            samples = [before.sample, *monitor.samples_since(0.0), after.sample]
        finally:
            monitor.stop()
    assert len(samples) >= 5
    for sample in samples:
        assert sample is not None and sample.cpu and sample.tasks and sample.mem is not None
        assert set(sample.cpu) == set(parse_cpu_times(Path("/proc/stat").read_text()))  # the CPUs, no total
        assert set(sample.mem) == set(MEMINFO_KEPT)
        assert os.getpid() in sample.tasks
        if disks:
            assert sample.disks is not None and set(sample.disks) == {"vda"}
    assert [s.t for s in samples] == sorted(s.t for s in samples)  # type: ignore[union-attr]
    for edge in (before, after):
        assert edge.targets[str(target)]["identity"][1] == target.stat().st_ino
        if disks:
            assert edge.settings["vda"]["scheduler"] and edge.settings["vda"]["readahead_kb"].isdigit()


@pytest.mark.fio
def test_a_point_on_a_host_costs_it_no_new_command(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    """Looks, samples and edges go through the run's one agent: the commands a run sends do not grow with its points."""
    counts = {}
    for points in (1, 3):
        depths = ", ".join(str(d) for d in range(1, points + 1))
        path = write_matrix(
            textwrap.dedent(
                f"""\
                version: 1
                name: count{points}
                fio: {{ioengine: 'null', rw: randread, bs: 4k, runtime: 1, time_based: 1}}
                hosts:
                  - {{name: c, ssh: root@c, targets: [{{path: {tmp_path}/c{points}.dat, size: 8M}}]}}
                matrix: {{iodepth: [{depths}]}}
                """
            )
        )
        hosts = LocalHosts(tmp_path / f"homes{points}")
        result = run_hosts(load_matrix(path), out=tmp_path / f"results{points}", connector=hosts)
        assert result.counts == {"ok": points}
        counts[points] = (len(hosts.made["c"].calls), len(hosts.made["c"].started))
    assert counts[1] == counts[3], counts


def test_what_a_host_ran_is_checked_against_its_plan() -> None:
    from iobench.results.fioout.clients import ran_elsewise

    planned = {("a.dat", "/x/a.dat")}
    assert ran_elsewise({("a.dat", "/x/a.dat")}, planned) is None
    assert (
        ran_elsewise({("b.dat", "/x/b.dat")}, planned)
        == "ran [b.dat] on /x/b.dat and did not run [a.dat] on /x/a.dat"
    )
    assert ran_elsewise(set(), planned) == "did not run [a.dat] on /x/a.dat"
    assert ran_elsewise({("a.dat", "/x/a.dat"), ("a.dat", None)}, planned) == "ran [a.dat]"


def _own_targets_matrix(write_matrix: Callable[..., Path], tmp_path: Path, rw: str, size: str) -> Path:
    return write_matrix(
        textwrap.dedent(
            f"""\
            version: 1
            name: own-targets
            fio: {{ioengine: psync, rw: {rw}, bs: 4k, runtime: 1, time_based: 1}}
            hosts:
              - {{name: a, ssh: root@a, targets: [{{path: {tmp_path}/a.dat{size}}}]}}
              - {{name: b, ssh: root@b, targets: [{{path: {tmp_path}/b.dat{size}}}]}}
            matrix: {{iodepth: [1]}}
            """
        )
    )


@pytest.mark.fio
def test_hosts_writing_their_own_targets_each_run_exactly_their_jobs(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    path = _own_targets_matrix(write_matrix, tmp_path, "randwrite", ", size: 8M")
    result = run_hosts(load_matrix(path), out=tmp_path / "results", connector=LocalHosts(tmp_path / "homes"))
    assert result.counts == {"ok": 1}
    frame = result.frame
    assert frame is not None
    assert sorted(zip(frame["host"], frame["jobname"], strict=True)) == [("a", "a.dat"), ("b", "b.dat")]


@pytest.mark.fio
def test_a_host_that_ran_another_hosts_jobs_fails_the_point_naming_what_ran_where(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    """Read-only hosts with their own targets: fio 3.33's client sends the first job file to every host.

    (fio ties only the arguments right after ``--client=`` to that client; ``--readonly`` comes
    between.) fio's own output says what each host ran, and the point fails naming it.
    """
    for name in ("a", "b"):
        (tmp_path / f"{name}.dat").write_bytes(b"\0" * (8 << 20))  # not iobench's: read with --readonly
    path = _own_targets_matrix(write_matrix, tmp_path, "randread", "")
    result = run_hosts(load_matrix(path), out=tmp_path / "results", connector=LocalHosts(tmp_path / "homes"))
    argv = json.loads((result.run_dir / "points" / "0001-r1" / "argv.json").read_text())[0]
    assert argv[3:] == [
        "--client=sock:host-a",
        "--readonly",
        "job-a.fio",
        "--client=sock:host-b",
        "--readonly",
        "job-b.fio",
    ]
    meta = json.loads((result.run_dir / "points" / "0001-r1" / "meta.json").read_text())
    assert result.counts == {"failed": 1}
    assert meta["reason"] == (
        f"host b: fio on this host ran [a.dat] on {tmp_path}/a.dat and did not run [b.dat] on "
        f"{tmp_path}/b.dat, not what was planned for it"
    )

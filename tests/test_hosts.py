"""Hosts (issue 15, SPEC §11) without SSH: the matrix, the ssh argv, the snapshot, the preflight, the plan,
the JSON mapping, and whole runs on "hosts" that are this machine (tests/fakehosts.py).

The same code against real sshd in network namespaces: tests/test_hosts_run.py and
tests/test_hosts_e2e.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from fakehosts import LocalConnection, LocalHosts, completed, probe_answer
from hypothesis import given, settings
from hypothesis import strategies as st
from sysfs_snapshots import SnapshotCache

from iobench.errors import IobenchError, MatrixError
from iobench.matrix.model import load_matrix
from iobench.planner.hosts import client_argv, host_specs, plan_on_fleet
from iobench.planner.placement import Placement, job_binding
from iobench.results.fioout.clients import parse_client_output
from iobench.results.loading import load
from iobench.results.points import point_totals
from iobench.runner.hosts import run_hosts
from iobench.system import hosts as hosts_mod
from iobench.system.hostfs import SystemFileError
from iobench.system.hosts import (
    Fleet,
    HostFacts,
    HostSpec,
    HostsRefused,
    _parse_scan,
    server_token,
    token_stale,
)
from iobench.system.remote import RemoteRoot, _records, _write_tree, fetch_snapshot, proc_table
from iobench.system.ssh import HostUnreachable, Ssh, SshTarget, remote_command
from iobench.system.topology import discover_topology, locate_target
from iobench.system.tuning import (
    DeviceTuner,
    Journal,
    check_no_pending,
    pending_journals,
    restore_from_journals,
)

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
    path = _matrix(
        write_matrix,
        """\
        - name: a
          ssh: root@storage-a
          ssh_options: ["Port=2222", "IdentityFile=~/.ssh/lab"]
          targets: [{path: /dev/nvme0n1}, {path: /srv/x.dat, size: 1G}]
        - ssh: storage-b
          server: "10.0.0.5:8765"
        """,
        "iodepth: [1]\nhost: [a]\n",
        f"targets:\n  - path: {tmp_path}/t.dat\n    size: 8M\n",
    )
    m = load_matrix(path)
    a, b = m.hosts
    assert (a.name, a.ssh, a.ssh_options, a.server) == (
        "a",
        "root@storage-a",
        ("Port=2222", "IdentityFile=~/.ssh/lab"),
        None,
    )
    assert a.targets is not None and [t.path for t in a.targets] == ["/dev/nvme0n1", "/srv/x.dat"]
    assert [t.section for t in a.targets] == ["nvme0n1", "x.dat"]
    assert a.targets[1].size == 2**30
    assert (b.name, b.targets, b.server, b.label) == (None, None, ("10.0.0.5", 8765), "storage-b")
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
        ("- ssh: a\n  ssh_options: [ConnectTimeout=60]\n", "iodepth: [1]\n", "`ConnectTimeout` is refused"),
        ("- ssh: a\n  ssh_options: [-v]\n", "iodepth: [1]\n", "is not `Key=Value`"),
        (
            "- ssh: a\n  server: 'a:99999'\n",
            "iodepth: [1]\n",
            "hosts[0].server: server 'a:99999' is not HOST:PORT",
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


def test_forward_is_loopback_on_both_ends(tmp_path: Path) -> None:
    record = Recorder()
    ssh = Ssh(SshTarget("root@a"), tmp_path / "0.sock", executor=record, binary="ssh")
    assert ssh.forward(41000, 23456) == "127.0.0.1:41000:127.0.0.1:23456"
    assert record.calls == [
        [
            "ssh",
            "-o",
            f"ControlPath={tmp_path / '0.sock'}",
            "-O",
            "forward",
            "-L",
            "127.0.0.1:41000:127.0.0.1:23456",
            "root@a",
        ]
    ]


def test_master_that_fails_names_the_host_and_what_ssh_said(tmp_path: Path) -> None:
    def spawner(argv: list[str], *, env: dict[str, str], stderr: Path) -> subprocess.Popen[bytes]:
        assert argv[-2:] == ["-N", "root@b"] and "ControlMaster=yes" in argv
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
        HostUnreachable, match=r"host right \(root@b\) is unreachable: root@b: Permission denied"
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
    snapshot = fetch_snapshot(_local(tmp_path), tmp_path / "snap", [str(target), "/nonexistent/dir/x"])
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
    d = "@@x@@"
    text = "\n".join(
        [
            f"{d} F /etc/passwd",
            "owned",
            f"{d} F /sys/../../escape",
            "owned",
            f"{d} D /sys/devices/system/cpu",
            f"{d} F /sys/devices/system/cpu/online",
            "0-1",
            f"{d} L /sys/class/block/sda",
            "/etc",
            f"{d} L /sys/class/block/sdb",
            "../../../../../../../tmp",
            f"{d} L /sys/class/block/loop0",
            "../../devices/virtual/block/loop0",
            f"{d} R",
            "- - -",
            "- - -",
        ]
    )
    root = tmp_path / "snap"
    root.mkdir()
    _write_tree(root, _records(text, d))
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


def test_proc_table_lists_processes_with_their_parents(tmp_path: Path) -> None:
    table = proc_table(_local(tmp_path))
    assert os.getpid() in table
    assert table[os.getpid()].ppid == os.getppid()
    assert table[os.getpid()].name.startswith(("python", "pytest"))


def test_remote_root_reads_and_writes_on_the_host(tmp_path: Path) -> None:
    root = RemoteRoot(_local(tmp_path))
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


def test_scan_finds_servers_by_pid_file_and_command_line() -> None:
    found = _parse_scan(
        "F .iobench/servers/tok1.pid 4242\n"
        "F .iobench/servers/tok2.pid \n"
        "P 5151 fio --server=127.0.0.1,30000 --daemonize=.iobench/servers/tok3.pid \n"
        "P 6161 sh -c grep .iobench/servers/ \n"
    )
    assert found.pids == {"tok1": {4242}, "tok3": {5151}}
    assert set(found.files) == {"tok1", "tok2"}


@pytest.mark.fio
def test_servers_listen_on_loopback_only_and_stale_ones_are_stopped(tmp_path: Path) -> None:
    spec = HostSpec(SshTarget("root@h", (), "h"), ())
    hosts = LocalHosts(tmp_path)
    with Fleet([spec], fio_version="fio-3.33", connector=hosts) as fleet:
        fleet.preflight()
        fleet.start_servers()
        (host,) = fleet.hosts
        assert host.server is not None and host.server.pid is not None and host.server.remote_port
        assert host.server.client == f"127.0.0.1,{host.server.port}"
        listening = [ln.split() for ln in Path("/proc/net/tcp").read_text().splitlines()[1:]]
        ours = [f for f in listening if f[1].endswith(f":{host.server.remote_port:04X}") and f[3] == "0A"]
        assert [f[1].split(":")[0] for f in ours] == ["0100007F"]  # 127.0.0.1, nothing else
        pid = host.server.pid
        # A server whose token names a run that is gone is found and stopped; a live run's is not.
        assert fleet.stop_stale(host) == []
        stale = f"{server_token().rsplit('-', 3)[0]}-{2**22 + 3}-1-abcdef"
        pid_file = hosts.made["h"].home / ".iobench" / "servers" / f"{stale}.pid"
        other = subprocess.run(
            ["fio", "--server=127.0.0.1,29997", f"--daemonize={pid_file}"],
            cwd=hosts.made["h"].home,
            check=True,
        )
        assert other.returncode == 0
        deadline = time.monotonic() + 10
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        stale_pid = int(pid_file.read_text())
        assert fleet.stop_stale(host) == [stale]
        assert _gone(stale_pid) and not pid_file.exists()
        assert not _gone(pid, wait=0)
    assert _gone(pid)
    assert not list((tmp_path / "h" / ".iobench" / "servers").iterdir())


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
        old={"answers": [probe_answer(fio="fio-3.28")]},
        bare={"answers": [probe_answer(fio="", numactl=False)]},
        gone={"unreachable": "Connection refused"},
    )
    with (
        Fleet(specs, fio_version="fio-3.33", connector=hosts) as fleet,
        pytest.raises(HostsRefused) as caught,
    ):
        fleet.preflight()
    text = str(caught.value)
    assert caught.value.exit_code == 2
    assert "host ok" not in text
    assert "host old (root@old): it runs fio-3.28, this machine fio-3.33" in text
    assert "host bare (root@bare): fio is not installed (apt-get install fio, version fio-3.33)" in text
    assert "numactl is not installed (apt-get install numactl)" in text
    assert "host gone (root@gone) is unreachable: Connection refused" in text
    assert all(c.closed for c in hosts.made.values())
    # Preflight only reads: no server was started anywhere.
    assert not any(c[:2] == ["sh", "-c"] and "--server" in c[2] for h in hosts.made.values() for c in h.calls)


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


def test_two_hosts_with_one_hostname_need_names(tmp_path: Path) -> None:
    specs = [HostSpec(SshTarget(f"root@{n}", (), ""), ()) for n in ("x", "y")]
    with Fleet(specs, fio_version="fio-3.33", connector=LocalHosts(tmp_path)) as fleet:
        with pytest.raises(HostsRefused, match="root@x and root@y are both named"):
            fleet.preflight()


# --- planning against each host's own topology -------------------------------------------------------


def test_each_host_is_placed_against_its_own_topology(
    write_matrix: Callable[..., Path], tmp_path: Path, snapshots: SnapshotCache
) -> None:
    path = _matrix(
        write_matrix,
        """\
        - {name: big, ssh: big, targets: [{path: /dev/sda, home_node: 1}]}
        - {name: small, ssh: small, targets: [{path: /dev/sda, home_node: 0}]}
        """,
        "binding: [local, remote]\nhost: [big, small]\n",
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
        plan = plan_on_fleet(m, fleet)
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


def test_client_argv_gives_each_host_its_job_file() -> None:
    class P:
        def __init__(self, host: str, argv: tuple[str, ...]) -> None:
            self.host, self.argv = host, argv

    processes = [P("a", ("--client=a", "--readonly", "job-a.fio")), P("b", ("--client=b", "job-b.fio"))]
    assert client_argv("/usr/bin/fio", processes, {"a": "127.0.0.1,40001", "b": "127.0.0.1,40002"}) == [
        "/usr/bin/fio",
        "--output-format=json+",
        "--output=fio.json",
        "--client=127.0.0.1,40001",
        "--readonly",
        "job-a.fio",
        "--client=127.0.0.1,40002",
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
    ports = [p["client_port"] for p in meta["processes"]]
    assert [p["host"] for p in meta["processes"]] == ["a", "b"]
    assert argv[3:] == [
        f"--client=127.0.0.1,{ports[0]}",
        "job-a.fio",
        f"--client=127.0.0.1,{ports[1]}",
        "job-b.fio",
    ]
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert [h["host"] for h in manifest["hosts"]] == ["a", "b"]
    # The frame rebuilt from the files alone says the same.
    rebuilt = load(result.run_dir, rebuild=True)
    assert set(rebuilt["host"]) == {"a", "b"}
    assert [h["host"] for h in rebuilt.attrs["hosts"]] == ["a", "b"]
    # Figures split by host; the report has a section per host and says the client only drove fio.
    from iobench.plots import _data
    from iobench.plots._style import caption
    from iobench.report.page import write_report

    totals = _data.point_totals(rebuilt)
    assert sorted(totals["host"].unique()) == ["a", "b"] and len(totals) == 4
    assert "host" in _data.splitting_axes(totals, ["iodepth"])
    assert caption(rebuilt).startswith("a, b · ")
    report = write_report(result.run_dir)
    html = report.html.read_text()
    assert "<h2>Host a</h2>" in html and "<h2>Host b</h2>" in html
    assert "Client (fio --client" in html and f"{tmp_path}/a.dat" in html
    # Nothing left: servers stopped, forwards closed.
    for connection in hosts.made.values():
        assert connection.closed and not connection.relays
        assert not list((connection.home / ".iobench" / "servers").iterdir())


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
    result = run_hosts(m, out=tmp_path / "results", connector=hosts, progress=progress)  # type: ignore[arg-type]
    statuses = {key: status for key, status, _ in progress.outcomes}
    assert statuses == {"0001-r1": "ok", "0002-r1": "ok", "0001-r2": "ok", "0002-r2": "failed"}
    reason = {k: r for k, _, r in progress.outcomes}["0002-r2"]
    assert reason is not None and "host b" in reason and "network unreachable" in reason
    assert result.exit_code == 1
    frame = result.frame
    assert frame is not None
    failed = frame[frame["status"] == "failed"]
    assert set(failed["host"]) == {"b"}
    # b is back: --resume runs only what is missing.
    again = run_hosts(
        m, out=tmp_path / "results", resume=result.run_dir, connector=LocalHosts(tmp_path / "homes")
    )
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
    from iobench.system.hostfs import block_node_devno
    from iobench.system.hosts import Host, RemoteMachine

    disk = next(f"/dev/{d.name}" for d in discover_topology("/").devices if os.path.exists(f"/dev/{d.name}"))
    connection = _local(tmp_path)
    snapshot = fetch_snapshot(connection, tmp_path / "snap", [disk])
    machine = RemoteMachine(Host(HostSpec(connection.target, ()), connection), snapshot)
    assert machine.devno(disk) == block_node_devno(disk) is not None
    assert machine.devno(str(tmp_path)) is None and machine.devno("tmpfs") is None
    assert machine.devno("/dev/null") is None  # a character device
    connection.calls.clear()
    assert machine.devno("/dev/null") is None and connection.calls == []  # asked once
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


def test_observers_keep_job_processes_seen_twice(tmp_path: Path) -> None:
    from iobench.system.hosts import Host, Observers, Server
    from iobench.system.remote import ProcEntry

    connection = _local(tmp_path)
    host = Host(HostSpec(connection.target, ()), connection, server=Server("127.0.0.1,1", 1, pid=100))
    host.facts = None
    observers = Observers(None, [host], 0.25, 10.0)  # type: ignore[arg-type]
    pid = os.getpid()  # a real process, so its numa_maps can be read
    table = {
        100: ProcEntry(100, 1, "0-1", "0", "fio"),  # the server
        101: ProcEntry(101, 100, "0-1", "0", "fio"),  # its connection
        102: ProcEntry(102, 101, "0-1", "0", "fio"),  # the backend
        pid: ProcEntry(pid, 102, "0-1", "0", "fio"),  # a job, as it started
        7: ProcEntry(7, 1, "0", "0", "fio"),  # someone else's fio
    }
    observers.look(host, table)
    (first,) = observers.seen[host.name].values()
    assert (first.pid, first.looks, first.settled, first.policy) == (pid, 1, False, None)
    table[pid] = ProcEntry(pid, 102, "1", "0", "fio")  # its cpus_allowed applied
    observers.look(host, table)
    (worker,) = observers.seen[host.name].values()
    assert worker.settled and worker.cpus == "1" and worker.policy is not None


@pytest.mark.fio
def test_a_server_named_in_the_matrix_is_used_and_left_running(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    from iobench.system.ssh import free_local_port

    port = free_local_port()
    pid_file = tmp_path / "given.pid"
    subprocess.run(["fio", f"--server=127.0.0.1,{port}", f"--daemonize={pid_file}"], check=True, timeout=30)
    deadline = time.monotonic() + 10
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    try:
        path = write_matrix(
            textwrap.dedent(
                f"""\
                version: 1
                name: given
                fio: {{ioengine: 'null', rw: randread, bs: 4k, runtime: 1, time_based: 1}}
                hosts:
                  - {{name: g, ssh: root@g, server: "127.0.0.1:{port}", targets: [{{path: {tmp_path}/g.dat, size: 8M}}]}}
                matrix: {{iodepth: [1]}}
                """
            )
        )
        hosts = LocalHosts(tmp_path / "homes")
        result = run_hosts(load_matrix(path), out=tmp_path / "results", connector=hosts)
        assert result.counts == {"ok": 1}
        assert result.frame is not None and set(result.frame["host"]) == {"g"}
        meta = json.loads((result.run_dir / "points" / "0001-r1" / "meta.json").read_text())
        assert meta["processes"][0]["client"] == f"127.0.0.1,{port}"
        assert not hosts.made["g"].relays  # no forward: straight to the named server
        assert not _gone(pid, wait=0)  # not iobench's to stop
    finally:
        os.kill(pid, 15)
        assert _gone(pid)

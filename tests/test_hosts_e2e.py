"""Sweeps across hosts end to end, on two namespace hosts with their own sshd.

What must show: every point ran on both hosts (frame ``host`` = the configured
names, IOPS > 0 on each); no fio server nor forward ever listened on TCP, and
the Unix sockets they listened on were out of another user's reach (``ss`` in
every host's namespace and in this one, polled through the whole run, and
``runuser -u nobody`` trying to connect to each); nothing left running
afterwards (no fio server, no ssh, no forward); a matrix naming an unreachable
host is refused with exit 2 naming it, before anything runs (no run directory,
nothing started on the reachable host); a control connection killed mid-sweep
is exit 3 with the frame written and nothing left on the host.

The namespace hosts' own hostnames (``alpha``, ``bravo``) differ from the names
the matrix gives them (``left``, ``right``), so the frame shows which one it took.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from netns_hosts import Listener, NetnsHost, NetnsHosts, UnixListener, parse_listeners, parse_unix_listeners
from typer.testing import CliRunner

from iobench.cli.commands import app
from iobench.matrix.model import load_matrix
from iobench.planner.plans import PlannedRun
from iobench.runner.sweep import NullProgress, PointOutcome, RunResult, run
from iobench.system.fioserver import server_token

pytestmark = [pytest.mark.root, pytest.mark.fio]

HOSTNAMES = ["alpha", "bravo"]
NAMES = {"alpha": "left", "bravo": "right"}
SETTLE_S = 10.0


def _host_yaml(host: NetnsHost, tmp_path: Path, *, name: str | None, options: tuple[str, ...]) -> str:
    fields = [f"name: {name}"] if name is not None else []
    fields += [
        f"ssh: {host.ssh}",
        f"ssh_options: {json.dumps(list(options))}",
        f"targets: [{{path: {tmp_path / (host.name + '.dat')}, size: 8M}}]",
    ]
    return "\n".join(("  - " if i == 0 else "    ") + f for i, f in enumerate(fields))


def hosts_matrix(
    hosts: NetnsHosts,
    tmp_path: Path,
    *,
    axis: bool = False,
    names: dict[str, str | None] | None = None,
    options: dict[str, tuple[str, ...]] | None = None,
    iodepths: tuple[int, ...] = (1, 2),
) -> Path:
    """A fast matrix (null engine, 1 s points, an iodepth axis) over ``hosts``, each with its own target."""
    names = names if names is not None else dict(NAMES)
    entries = [
        _host_yaml(h, tmp_path, name=names[h.name], options=(options or {}).get(h.name, h.ssh_options))
        for h in hosts
    ]
    text = textwrap.dedent(
        """\
        version: 1
        name: hosts-e2e
        fio:
          ioengine: null
          rw: randread
          runtime: 1
          time_based: 1
          bs: 4k
        """
    )
    text += "hosts:\n" + "\n".join(entries) + "\n"
    text += f"matrix:\n  iodepth: {list(iodepths)}\n"
    if axis:
        text += f"  host: [{', '.join(str(names[h.name]) for h in hosts)}]\n"
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    return path


class ListenerWatch:
    """Polls ``ss -ltnp`` in every host's namespace and in this one until stopped; keeps all it saw."""

    def __init__(self, hosts: NetnsHosts, interval_s: float = 0.1) -> None:
        self.hosts, self.interval_s = hosts, interval_s
        self.seen: dict[str, set[Listener]] = {h.name: set() for h in hosts}
        self.seen["(this machine)"] = set()
        self.unix: dict[str, set[UnixListener]] = {where: set() for where in self.seen}
        self.probed: dict[str, str] = {}
        """Each fio or ssh socket path tried by another user, with what that user got."""
        self.polls = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def poll(self) -> None:
        try:
            for host in self.hosts:
                self.seen[host.name] |= set(host.listeners())
                self.unix[host.name] |= set(host.unix_listeners())
            here = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=10, check=True)
            self.seen["(this machine)"] |= set(parse_listeners(here.stdout))
            here = subprocess.run(["ss", "-xlpH"], capture_output=True, text=True, timeout=10, check=True)
            self.unix["(this machine)"] |= set(parse_unix_listeners(here.stdout))
            self.polls += 1
        except Exception as exc:  # noqa: BLE001 - reported by the test, never lost in the thread
            self.errors.append(repr(exc))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> ListenerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.poll()

    def fio_listeners(self) -> dict[str, set[Listener]]:
        return {where: {x for x in found if "fio" in x.processes} for where, found in self.seen.items()}

    def fio_sockets(self) -> dict[str, set[UnixListener]]:
        """The Unix sockets fio servers listened on, by place."""
        return {where: {x for x in found if "fio" in x.processes} for where, found in self.unix.items()}

    def ours(self) -> set[str]:
        """Paths of every Unix socket a host's fio server or ssh here (a forward's end, a control socket) listened on."""
        return {
            x.path
            for where, found in self.unix.items()
            for x in found
            if ("fio" in x.processes and where != "(this machine)")
            or ("ssh" in x.processes and where == "(this machine)")
        }

    def probe_as_nobody(self) -> None:
        """Try to connect to every fio and ssh socket seen so far as user ``nobody``; keep what it got."""
        for path in sorted(self.ours() - set(self.probed)):
            if os.path.exists(path):
                self.probed[path] = connect_as_nobody(path)

    def exposed(self) -> dict[str, set[Listener]]:
        """Every socket of a fio server or of ssh (a forward) that was reachable from outside its namespace."""
        exposed = {}
        for where, found in self.seen.items():
            bad = {x for x in found if not x.loopback and ({"fio", "ssh"} & set(x.processes))}
            if where != "(this machine)":
                host = self.hosts[where]
                # The host's own sshd on its veth address is the only non-loopback socket a host may have.
                bad |= {
                    x
                    for x in found
                    if not x.loopback and (x.processes, x.address) != (("sshd",), host.address)
                }
            if bad:
                exposed[where] = bad
        return exposed


class SnapshotAtPoints(NullProgress):
    """Progress that also takes a listener snapshot whenever a point starts and finishes."""

    def __init__(self, watch: ListenerWatch) -> None:
        self.watch = watch
        self.started_points: list[str] = []

    def point_started(self, run: PlannedRun, index: int) -> None:
        self.started_points.append(run.key)
        self.watch.poll()

    def point_finished(self, run: PlannedRun, outcome: PointOutcome) -> None:
        self.watch.poll()
        self.watch.probe_as_nobody()


NOBODY_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
CONNECT = "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print(e.strerror)\nelse:\n    print('connected')"


def connect_as_nobody(path: str) -> str:
    """What user ``nobody`` gets connecting to the Unix socket at ``path``: ``connected`` or the error's words."""
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", NOBODY_PYTHON, "-c", CONNECT, path],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return (done.stdout.strip() or done.stderr.strip()).splitlines()[-1]


def _ours(hosts: NetnsHosts) -> list[tuple[int, str]]:
    """Processes in this namespace whose command line reaches our hosts (ssh masters, forwards, fio clients)."""
    marks = [str(hosts.directory), *(h.address for h in hosts)]
    here = Path("/proc/self/ns/net").readlink()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if Path(f"/proc/{entry}/ns/net").readlink() != here:
                continue  # the hosts' own sshd (its config is in the hosts' directory)
            cmdline = (
                Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
            state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z" and any(mark in cmdline for mark in marks):
            found.append((int(entry), cmdline.strip()))
    return found


def _left_running(hosts: NetnsHosts) -> dict[str, object]:
    """What still runs that a sweep started: anything in a host but its sshd, our ssh/fio here, our children."""
    left: dict[str, object] = {}
    for host in hosts:
        if extra := host.session_pids():
            left[host.name] = {p: _cmdline(p) for p in extra}
    if ours := _ours(hosts):
        left["(this machine)"] = ours
    return left


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return "?"


def assert_nothing_left(hosts: NetnsHosts) -> None:
    """Wait up to SETTLE_S for sessions to close, then nothing the sweep started may still run."""
    deadline = time.monotonic() + SETTLE_S
    while (left := _left_running(hosts)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == {}, f"still running after the run: {left}"
    for host in hosts:
        assert [(x.address, x.port) for x in host.listeners()] == [(host.address, 22)]


@pytest.fixture
def two_hosts(netns_hosts: Callable[..., NetnsHosts]) -> NetnsHosts:
    return netns_hosts(2, names=HOSTNAMES)


def _run_watched(
    matrix: Path, hosts: NetnsHosts, out: Path
) -> tuple[RunResult, ListenerWatch, SnapshotAtPoints]:
    m = load_matrix(matrix)
    with ListenerWatch(hosts) as watch:
        progress = SnapshotAtPoints(watch)
        result = run(m, out=out, progress=progress)
    return result, watch, progress


def test_every_point_runs_on_both_hosts_with_servers_only_the_user_reaches(
    two_hosts: NetnsHosts, tmp_path: Path
) -> None:
    matrix = hosts_matrix(two_hosts, tmp_path)
    result, watch, progress = _run_watched(matrix, two_hosts, tmp_path / "results")

    assert result.exit_code == 0 and result.counts == {"ok": 2}, result.counts
    frame = result.frame
    assert frame is not None
    assert set(frame["host"]) == {"left", "right"}  # the configured names: no address, no "All clients"
    per_host = frame.groupby(["point", "repeat", "host"])["iops"].sum()
    points = frame[["point", "repeat"]].drop_duplicates()
    assert len(points) == 2 and len(progress.started_points) == 2
    for point, repeat in points.itertuples(index=False):
        for name in ("left", "right"):
            assert per_host[(point, repeat, name)] > 0, f"point {point} r{repeat} on {name}"
    assert (frame["status"] == "ok").all()
    # The saved frame says the same.
    saved = pd.read_parquet(Path(result.run_dir) / "results.parquet")
    assert set(saved["host"]) == {"left", "right"}

    assert watch.errors == [] and watch.polls >= 4
    # No fio server and no forward ever listened on TCP, here or on a host, not even on loopback.
    assert watch.fio_listeners() == {where: set() for where in watch.seen}
    assert watch.exposed() == {}
    servers = watch.fio_sockets()
    for host in two_hosts:
        assert servers[host.name], f"no fio server ever seen listening in {host.name}: the watch saw nothing"
    # Another user reaches none of the sockets: the servers' (mode 0777, in folders of mode 0700)
    # and this machine's forward ends and control sockets.
    # (A fio server in this machine's own namespace is another test's: the run starts none here.)
    fio_paths = {x.path for where, found in servers.items() if where != "(this machine)" for x in found}
    assert fio_paths <= set(watch.probed), (fio_paths, watch.probed)
    assert watch.probed and set(watch.probed.values()) == {"Permission denied"}, watch.probed
    assert_nothing_left(two_hosts)


def test_host_axis_runs_each_point_on_its_host(two_hosts: NetnsHosts, tmp_path: Path) -> None:
    matrix = hosts_matrix(two_hosts, tmp_path, axis=True, iodepths=(1,))
    result, watch, _ = _run_watched(matrix, two_hosts, tmp_path / "results")

    assert result.exit_code == 0 and result.counts == {"ok": 2}, result.counts
    frame = result.frame
    assert frame is not None and "host" in frame
    by_point = frame.groupby(["point", "repeat"])["host"].agg(lambda s: sorted(set(s)))
    assert sorted(map(tuple, by_point)) == [("left",), ("right",)]
    assert (frame.groupby(["point", "repeat"])["iops"].sum() > 0).all()
    assert watch.errors == [] and watch.exposed() == {}
    assert_nothing_left(two_hosts)


def _stop_sshd(host: NetnsHost) -> None:
    assert host.sshd is not None
    os.killpg(host.sshd.pid, signal.SIGTERM)
    host.sshd.wait(timeout=10)
    deadline = time.monotonic() + SETTLE_S
    while host.listeners() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host.listeners() == []


@pytest.mark.parametrize("fault", ["sshd stopped", "key refused"])
def test_unreachable_host_is_refused_before_anything_runs(
    fault: str, two_hosts: NetnsHosts, tmp_path: Path
) -> None:
    alpha, bravo = two_hosts["alpha"], two_hosts["bravo"]
    options = {h.name: h.ssh_options for h in two_hosts}
    if fault == "sshd stopped":
        _stop_sshd(bravo)
    else:
        stranger = tmp_path / "stranger_key"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True, timeout=30
        )
        options["bravo"] = tuple(
            f"IdentityFile={stranger}" if o.startswith("IdentityFile=") else o for o in bravo.ssh_options
        )
    matrix = hosts_matrix(two_hosts, tmp_path, options=options)
    out = tmp_path / "results"

    started = time.monotonic()
    with ListenerWatch(two_hosts) as watch:
        result = CliRunner().invoke(app, ["run", str(matrix), "--out", str(out)])
    elapsed = time.monotonic() - started

    assert result.exit_code == 2, result.output
    assert "right" in result.output  # the configured name of the host that cannot be reached
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert not out.exists() or not any(out.iterdir()), "a run directory was created"
    assert elapsed < 60
    # Nothing was started on the host that was reachable (no fio server ever listened), nor left here.
    assert watch.errors == [] and watch.fio_listeners()["alpha"] == set()
    deadline = time.monotonic() + SETTLE_S
    while alpha.session_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alpha.session_pids() == []
    assert [(x.address, x.port) for x in alpha.listeners()] == [(alpha.address, 22)]
    assert _ours(two_hosts) == []


def test_interrupted_run_leaves_no_server_or_forward(two_hosts: NetnsHosts, tmp_path: Path) -> None:
    """SIGTERM (as Ctrl-C) once the first point is saved: exit 130, nothing left on either host or here."""
    matrix = hosts_matrix(two_hosts, tmp_path)
    out = tmp_path / "results"
    cli = [sys.executable, "-m", "iobench", "run", str(matrix), "--out", str(out), "--quiet"]
    with subprocess.Popen(
        cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            deadline = time.monotonic() + 120
            while not list(out.glob("*/points/[0-9]*")) and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.1)
            assert list(out.glob("*/points/[0-9]*")), "no point finished within 120 s"
            proc.send_signal(signal.SIGTERM)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    assert proc.returncode == 130, stderr
    assert_nothing_left(two_hosts)


@contextlib.contextmanager
def _killed_mid_run(matrix: Path, out: Path) -> Iterator[None]:
    with subprocess.Popen(
        [sys.executable, "-m", "iobench", "run", str(matrix), "--out", str(out), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as proc:
        try:
            deadline = time.monotonic() + 120
            while not list(out.glob("*/points/.*.partial")) and time.monotonic() < deadline:
                time.sleep(0.05)
            yield
        finally:
            proc.kill()  # a crash: no handler runs, no cleanup
            proc.wait(timeout=10)


def _plant_on(hosts: NetnsHosts, host: str, token: str, pid_text: str) -> str:
    """A server folder on a host as a run with ``token`` would leave it, its pid file saying ``pid_text``."""
    script = 'd=$(mktemp -d "/tmp/iobench-$1.XXXXXX") && printf "%s\\n" "$2" >"$d/pid" && echo "$d"'
    done = subprocess.run(
        hosts.ssh_argv(host, "sh", "-c", shlex.quote(script), "sh", token, shlex.quote(pid_text)),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


def test_a_crashed_run_leaves_no_server_and_a_planted_pid_file_kills_nothing(
    two_hosts: NetnsHosts, tmp_path: Path
) -> None:
    """A run killed outright (SIGKILL, no cleanup) leaves no server: each ends with its SSH session.

    The next run stops only servers that are its own kind and still run: a leftover folder whose
    pid file names an unrelated process leaves that process alone. Also: a host without `name:`.
    """
    matrix = hosts_matrix(two_hosts, tmp_path, names={"alpha": "left", "bravo": None}, iodepths=(1,))
    with _killed_mid_run(matrix, tmp_path / "crashed"):
        assert any("fio --server=sock:" in _cmdline(p) for p in two_hosts["bravo"].session_pids())
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline and any(
        "fio" in _cmdline(p) for h in two_hosts for p in h.session_pids()
    ):
        time.sleep(0.1)
    servers = {h.name: [p for p in h.session_pids() if "fio" in _cmdline(p)] for h in two_hosts}
    assert servers == {"alpha": [], "bravo": []}, f"a killed run left fio running: {servers}"

    # An unrelated process on bravo, named by a planted pid file in a folder of a run that is gone.
    bystander = subprocess.run(
        two_hosts.ssh_argv("bravo", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    gone = f"{server_token().rsplit('-', 3)[0]}-{2**22 + 5}-1-abcdef"
    planted = _plant_on(two_hosts, "bravo", gone, f"{bystander} {boot}")
    result = run(load_matrix(matrix), out=tmp_path / "results")
    assert result.exit_code == 0 and result.counts == {"ok": 1}
    # The unnamed host is labelled with its hostname, the named one with its name.
    assert result.frame is not None and set(result.frame["host"]) == {"left", "bravo"}
    alive = subprocess.run(
        two_hosts.ssh_argv("bravo", "kill", "-0", bystander), capture_output=True, timeout=30, check=False
    )
    assert alive.returncode == 0, "a planted pid file made the run kill an unrelated process"
    assert not Path(planted).exists()
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    notes = {h["host"]: h.get("notes", []) for h in manifest["hosts"]}
    # The hosts share this machine's /tmp: whichever looks first handles the planted folder.
    assert any(f"left pid {bystander} alone" in n for found in notes.values() for n in found), notes
    subprocess.run(two_hosts.ssh_argv("bravo", "kill", bystander), timeout=30, check=True)
    assert_nothing_left(two_hosts)


def _master_of(host: NetnsHost, parent: int) -> int | None:
    """The ssh control master a run (``parent``) keeps to ``host``."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
                cmdline = _cmdline(int(entry))
                if int(stat[1]) == parent and "ControlMaster=yes" in cmdline and host.ssh in cmdline.split():
                    return int(entry)
    return None


def test_a_control_connection_killed_mid_sweep_is_exit_3_with_the_frame_and_nothing_left(
    two_hosts: NetnsHosts, tmp_path: Path
) -> None:
    matrix = hosts_matrix(two_hosts, tmp_path, iodepths=(1, 2, 4))
    out = tmp_path / "results"
    cli = [sys.executable, "-m", "iobench", "run", str(matrix), "--out", str(out), "--quiet"]
    with subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            deadline = time.monotonic() + 120
            # Once the first point is saved and the second runs, bravo's control connection dies.
            while not (list(out.glob("*/points/[0-9]*")) and list(out.glob("*/points/.*.partial"))):
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.05)
            master = _master_of(two_hosts["bravo"], proc.pid)
            assert master is not None
            os.kill(master, signal.SIGKILL)
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert proc.returncode == 3, stderr
    assert "Traceback" not in stderr
    assert "right" in stderr and "--resume" in stderr and "iobench restore" in stderr
    (run_dir,) = out.iterdir()
    frame = pd.read_parquet(run_dir / "results.parquet")
    statuses = frame.drop_duplicates(["point", "repeat"]).set_index("point")["status"].to_dict()
    assert statuses[1] == "ok" and set(statuses.values()) <= {"ok", "failed"}
    assert "failed" in statuses.values()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "stopped"
    assert_nothing_left(two_hosts)


def test_the_nobody_probe_would_connect_to_a_socket_others_may_reach() -> None:
    """The permission check is not vacuous: a socket in a folder others may enter is reached."""
    folder = Path(tempfile.mkdtemp(prefix="iobench-probe-", dir="/tmp"))  # pytest's own folders are private
    folder.chmod(0o755)
    server = socket.socket(socket.AF_UNIX)
    path = folder / "s.sock"
    try:
        server.bind(str(path))
        path.chmod(0o777)
        server.listen()
        assert connect_as_nobody(str(path)) == "connected"
        folder.chmod(0o700)
        assert connect_as_nobody(str(path)) == "Permission denied"
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_the_watch_would_see_a_server_on_a_routable_address(two_hosts: NetnsHosts) -> None:
    """The loopback-only check is not vacuous: a server started by hand on every address is reported."""
    start = "fio --server=0.0.0.0,18765 --daemonize=server.pid </dev/null >/dev/null 2>&1; cat server.pid"
    done = subprocess.run(
        two_hosts.ssh_argv("bravo", start), capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    with ListenerWatch(two_hosts) as watch:
        deadline = time.monotonic() + SETTLE_S
        while not watch.exposed() and time.monotonic() < deadline:
            time.sleep(0.1)
    assert {(x.address, x.port, x.processes) for x in watch.exposed()["bravo"]} == {
        ("0.0.0.0", 18765, ("fio",))
    }
    assert set(watch.exposed()) == {"bravo"}
    assert two_hosts["bravo"].session_pids()  # and it would count as left running (teardown stops it)

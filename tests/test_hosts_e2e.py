"""Sweeps across hosts (issue 15, SPEC §11) end to end, on two namespace hosts with their own sshd.

What must show: every point ran on both hosts (frame ``host`` = the configured
names, IOPS > 0 on each); no fio server ever listened on a non-loopback address
(``ss -ltnp`` in every host's namespace, and in this one, polled through the whole
run); nothing left running afterwards (no fio server, no ssh, no forward); a
matrix naming an unreachable host is refused with exit 2 naming it, before
anything runs (no run directory, nothing started on the reachable host).

The namespace hosts' own hostnames (``alpha``, ``bravo``) differ from the names
the matrix gives them (``left``, ``right``), so the frame shows which one it took.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from netns_hosts import Listener, NetnsHost, NetnsHosts, _parse_listeners
from typer.testing import CliRunner

from iobench.cli.commands import app
from iobench.matrix.model import load_matrix
from iobench.planner.plans import PlannedRun
from iobench.runner.sweep import NullProgress, PointOutcome, RunResult, run

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
        self.polls = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def poll(self) -> None:
        try:
            for host in self.hosts:
                self.seen[host.name] |= set(host.listeners())
            here = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=10, check=True)
            self.seen["(this machine)"] |= set(_parse_listeners(here.stdout))
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


def test_every_point_runs_on_both_hosts_with_servers_on_loopback_only(
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
    servers = watch.fio_listeners()
    for host in two_hosts:
        assert servers[host.name], f"no fio server ever seen listening in {host.name}: the watch saw nothing"
        assert all(x.loopback for x in servers[host.name]), servers[host.name]
    assert watch.exposed() == {}
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


def test_server_of_a_crashed_run_is_stopped_by_the_next(two_hosts: NetnsHosts, tmp_path: Path) -> None:
    """A run killed mid-point leaves its servers; the next run stops them. Also: a host without `name:`."""
    matrix = hosts_matrix(two_hosts, tmp_path, names={"alpha": "left", "bravo": None}, iodepths=(1,))
    with _killed_mid_run(matrix, tmp_path / "crashed"):
        pass
    servers = {h.name: [p for p in h.session_pids() if "fio --server" in _cmdline(p)] for h in two_hosts}
    assert all(servers.values()), f"the crashed run left no server to find: {servers}"
    result = run(load_matrix(matrix), out=tmp_path / "results")
    assert result.exit_code == 0 and result.counts == {"ok": 1}
    # The unnamed host is labelled with its hostname (SPEC §11), the named one with its name.
    assert result.frame is not None and set(result.frame["host"]) == {"left", "bravo"}
    assert_nothing_left(two_hosts)


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

"""The hosts of a sweep: connected, checked, given a private fio server each, and torn down.

A :class:`Fleet` is a run's set of hosts. :meth:`Fleet.preflight` connects to
every host (at most :data:`MAX_PARALLEL` at once) and checks, before anything
runs and without changing anything, what the run needs of each: reachable
without a prompt, ``fio`` and ``numactl`` present, fio's version equal to this
machine's, sysfs and procfs readable (copied into a local snapshot and read by
the same topology code as any snapshot), and each target through the same
write guard as local targets (:mod:`iobench.system.safety`, through a
:class:`~iobench.system.remoteguard.RemoteMachine`). Every problem of every
host is reported at once (:class:`HostsRefused`, exit status 2).

:meth:`Fleet.start_servers` then stops what killed runs left on each host
and starts one fio server per host on a Unix socket in a private folder,
forwarded to a socket in this run's private folder here
(:mod:`iobench.system.fioserver`): no TCP listener anywhere, and nobody but
the run's user reaches either end. :meth:`Fleet.close` stops servers,
forwards and connections; it is bounded in time and runs on every way out.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from iobench.errors import IobenchError
from iobench.system import procfs
from iobench.system.fioserver import (
    FioServer,
    ServerError,
    server_token,
    start_server,
    stop_by_pid,
    stop_stale,
)
from iobench.system.hostagent import HostAgent
from iobench.system.process import signals_held
from iobench.system.remote import Snapshot, fetch_snapshot
from iobench.system.remoteguard import RemoteMachine
from iobench.system.safety import Target, check_targets
from iobench.system.ssh import (
    COMMAND_TIMEOUT_S,
    HostUnreachable,
    Ssh,
    SshTarget,
    close_stale_masters,
    control_dir,
)
from iobench.system.stability import SettingState, show
from iobench.system.topology import TargetLocation, Topology, discover_topology, locate_target

MAX_PARALLEL = 32
"""Hosts connected, checked, started and stopped at once."""
MAX_HOSTS = 32
"""The most hosts one run takes: the largest fleet iobench is tested with (docs/hosts.md, limits).

The matrix refuses more before anything connects. Each host costs this machine
an SSH control connection, a forward, an agent session and their descriptors
(about a dozen), and the fio client holds a connection to every server at once.
"""
STOP_WAIT_S = 3.0


def too_many_hosts(count: int) -> str:
    """Why a run of ``count`` hosts is refused (above :data:`MAX_HOSTS`)."""
    return f"{count:,} hosts; iobench is tested with up to {MAX_HOSTS} hosts in one run"


NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""What a host's frame name may be (it names files): the matrix's rule for ``name:``, also for a hostname."""


class HostsRefused(IobenchError):
    """Some hosts cannot run the sweep; nothing ran and nothing changed. ``problems`` lists them."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("hosts refused, nothing was run:\n" + "\n".join(f"  {p}" for p in self.problems))


class Connection(Protocol):
    """What a fleet needs of one host's connection: :class:`~iobench.system.ssh.Ssh`, or a fake."""

    @property
    def target(self) -> SshTarget:
        """The host."""

    def start(self) -> None:
        """Begin connecting (in the background)."""

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until connected; raise :class:`~iobench.system.ssh.HostUnreachable` otherwise."""

    def stream(self, argv: Sequence[str], *, stdin: bool = False) -> subprocess.Popen[bytes]:
        """Start argv on the host, its output (and, with ``stdin``, its input) a pipe here."""

    def forward(self, local: str, remote: str) -> str:
        """Forward the Unix socket ``local`` here to the Unix socket ``remote`` there."""

    def alive(self) -> bool:
        """Whether the connection stands."""

    def close(self) -> None:
        """Close the connection and its forwards."""


Connector = Callable[[SshTarget, Path], Connection]
"""Makes a host's connection from its target and a control socket path (tests pass fakes)."""


def ssh_connector(target: SshTarget, control_path: Path) -> Connection:
    """The real connection: the system's OpenSSH client with a control master."""
    return Ssh(target, control_path)


@dataclass(frozen=True)
class HostSpec:
    """What the system layer needs to know of a matrix host.

    Attributes
    ----------
    target : SshTarget
        How to reach it; its ``label`` is the configured ``name`` (empty: use the hostname).
    targets : tuple of Target
        Its targets (paths on the host), for the guard.
    writes : bool
        Whether any point on it writes or trims.
    server : str or None
        The Unix socket of an fio server already running there, to use instead of starting one.
    needs_numa : bool
        Whether a point binds memory (``numa_mem_policy``): the host's fio must support it.
    """

    target: SshTarget
    targets: tuple[Target, ...]
    writes: bool = False
    server: str | None = None
    needs_numa: bool = False


@dataclass
class HostFacts:
    """What the preflight learned of one host.

    Attributes
    ----------
    name : str
        The frame's ``host``: the configured name, else the hostname.
    hostname, kernel, boot_id, cpu_model : str or None
        From the host's procfs.
    fio_version : str
        ``fio --version`` there.
    numactl : str or None
        ``numactl`` there (None when missing).
    snapshot : Snapshot
        Its sysfs and procfs files, copied here.
    topology : Topology
        Read from the snapshot.
    locations : dict of str to TargetLocation
        Each target as located on the host.
    settings : list of SettingState
        ``iobench system show`` of the host, its targets' disks, read from the snapshot.
    """

    spec: HostSpec
    name: str
    hostname: str | None
    kernel: str | None
    boot_id: str | None
    cpu_model: str | None
    fio_version: str
    numactl: str | None
    snapshot: Snapshot
    topology: Topology
    locations: dict[str, TargetLocation]
    settings: list[SettingState] = field(default_factory=list)

    def machine(self) -> dict[str, Any]:
        """The host's facts for the manifest (like :func:`~iobench.system.metadata.collect_metadata`)."""
        return {
            "host": self.name,
            "hostname": self.hostname,
            "ssh": self.spec.target.destination,
            "kernel": self.kernel,
            "cpu_model": self.cpu_model,
            "cpu_count": len(self.topology.online_cpus()),
            "fio_version": self.fio_version,
            "numactl": self.numactl,
            "topology": self.topology.to_dict(),
            "system": [state.to_json() for state in self.settings],
        }


@dataclass
class Host:
    """A host of a running fleet: its connection, facts, server, and why it is down (if it is).

    ``lost`` says why its connection dropped during the run (an environment
    fault, not a refusal); ``notes`` what was done on it that a user should know;
    ``hostname`` the host's hostname once read without a preflight (``iobench system``).
    """

    spec: HostSpec
    connection: Connection
    facts: HostFacts | None = None
    server: FioServer | None = None
    agent: HostAgent | None = None
    forward: str | None = None
    down: str | None = None
    lost: str | None = None
    notes: list[str] = field(default_factory=list)
    hostname: str | None = None

    @property
    def name(self) -> str:
        """The configured name, else the hostname once known, else the destination."""
        if self.facts is not None:
            return self.facts.name
        return self.spec.target.label or self.hostname or self.spec.target.destination

    @property
    def journal_record(self) -> dict[str, Any]:
        """How journals and the created-files registry name the host: how it is reached, labelled with its name."""
        return self.spec.target.to_json() | {"label": self.name}

    @property
    def target(self) -> SshTarget:
        """How the host is reached."""
        return self.spec.target

    reached = target

    @property
    def client(self) -> str:
        """What ``fio --client=sock:`` takes in a point's folder: a link there to this host's forward.

        fio names a host's rows (``client_stats[].hostname``) and the logs it
        brings back (``<log>.<client>``) after this name, so it is the frame
        name with a prefix that no file of a point has.
        """
        return f"host-{self.name}"

    @property
    def server_pid(self) -> int | None:
        """The fio server's pid on the host (None for a server given in the matrix)."""
        return None if self.server is None else self.server.pid

    def describe(self) -> str:
        """``host a (root@storage-a)``."""
        target = self.spec.target
        if self.name != target.destination:
            return f"host {self.name} ({target.destination})"
        return f"host {self.name}"

    def stream(self, argv: Sequence[str], *, stdin: bool = False) -> subprocess.Popen[bytes]:
        """Start argv on the host through its connection (see :meth:`~iobench.system.ssh.Ssh.stream`)."""
        return self.connection.stream(argv, stdin=stdin)

    def call(self, op: str, *, timeout: float = COMMAND_TIMEOUT_S, **args: Any) -> Any:
        """One request to the host's agent; a lost or failing agent marks the host down.

        Raises
        ------
        HostUnreachable
            When the agent is not running, fails or does not answer in time.
        """
        if self.agent is None:
            raise HostUnreachable(f"{self.describe()}: its agent is not running")
        try:
            return self.agent.call(op, timeout=timeout, **args)
        except HostUnreachable as exc:
            self.down = self.down or str(exc)
            self.alive()
            raise

    def alive(self) -> bool:
        """Whether the host still answers: its connection stands and its server (if any) runs."""
        if self.lost is None and not self.connection.alive():
            said = getattr(self.connection, "lost_reason", lambda: "")()
            self.lost = f"{self.describe()}: the SSH connection dropped" + (f" ({said})" if said else "")
            self.down = self.down or self.lost
        if self.down is None and self.agent is not None and not self.agent.alive():
            self.down = self.agent.broken or f"{self.describe()}: its agent ended"
        if self.down is None and self.server is not None and not self.server.alive():
            self.down = f"{self.describe()}: its fio server ended"
        return self.down is None


def host_problem(who: str, why: str) -> str:
    """A host's problem as said to the user: ``why`` when it names the host already, else ``who: why``."""
    return why if why.startswith("host ") else f"{who}: {why}"


def kill_trees(host: Host, pids: Iterable[int]) -> None:
    """Stop processes on a host and everything below them: SIGTERM, a grace period, then SIGKILL.

    The host's agent reads the tree from its ``/proc`` (fio's job processes
    leave their parent's process group), so nothing the server started survives it.
    """
    roots = sorted(set(pids))
    if roots:
        host.call("kill", pids=roots, grace=STOP_WAIT_S, timeout=STOP_WAIT_S + 60)


class Fleet:
    """The hosts of one run: connected, checked, serving fio, and torn down.

    Use it as a context manager; :meth:`close` runs on every way out.

    Parameters
    ----------
    specs
        The hosts, in matrix order.
    fio_version
        This machine's fio (``fio-3.33``): each host's must be equal.
    allow_write
        Devices that may be written despite a signature (``--allow-write``), on every host.
    connector
        Makes each host's connection (default: OpenSSH, :func:`ssh_connector`).
    fio
        The fio program on the hosts.
    """

    def __init__(
        self,
        specs: Sequence[HostSpec],
        *,
        fio_version: str,
        allow_write: Sequence[str] = (),
        connector: Connector = ssh_connector,
        fio: str = "fio",
    ) -> None:
        if len(specs) > MAX_HOSTS:
            raise HostsRefused([too_many_hosts(len(specs))])
        self.fio_version = fio_version
        self.allow_write = tuple(allow_write)
        self.fio = fio
        self.connector = connector
        # Control sockets, the forwards' ends and snapshots share one private folder (mode 0700)
        # with an owner file: what a killed run leaves there is removed by the next (close_stale_masters).
        self._sockets = control_dir()
        self.workdir = self._sockets / "snapshots"
        self.workdir.mkdir()
        self.token = server_token()
        self.hosts = [
            Host(spec, connector(spec.target, self._sockets / f"{i}.sock")) for i, spec in enumerate(specs)
        ]

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def socket_of(self, host: Host) -> str:
        """Where this machine's end of the host's server forward is (in the run's private folder)."""
        return str(self._sockets / f"{self.hosts.index(host)}.fio")

    def each(self, work: Callable[[Host], None], hosts: Sequence[Host] | None = None) -> dict[str, str]:
        """Run ``work`` for every host, at most :data:`MAX_PARALLEL` at once; the hosts whose work raised, with why."""
        chosen = list(self.hosts if hosts is None else hosts)
        problems: dict[str, str] = {}

        def one(host: Host) -> None:
            try:
                work(host)
            except IobenchError as exc:
                problems[host.describe()] = str(exc)

        if len(chosen) == 1:
            one(chosen[0])
            return problems
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(chosen))) as pool:
            list(pool.map(one, chosen))
        return problems

    # --- preflight ---------------------------------------------------------------------

    def preflight(self) -> list[HostFacts]:
        """Connect to every host and check everything the run needs of it; change nothing.

        Returns
        -------
        list of HostFacts
            In matrix order.

        Raises
        ------
        HostsRefused
            Naming each host with a problem and what to do about it.
        """
        close_stale_masters()
        problems = self.each(self._check)
        names: dict[str, list[str]] = {}
        for host in self.hosts:
            if host.facts is not None:
                names.setdefault(host.facts.name, []).append(host.spec.target.destination)
        for name, dests in names.items():
            if len(dests) > 1:
                problems[f"host {name}"] = (
                    f"{' and '.join(dests)} are both named {name!r} (their hostname); "
                    "give each a `name:` in `hosts:`"
                )
        if problems:
            raise HostsRefused([host_problem(who, why) for who, why in problems.items()])
        return [host.facts for host in self.hosts if host.facts is not None]

    def connect(self, host: Host) -> None:
        """Open the host's connection, wait for it and start its agent: what every use of a host starts with.

        Called from the work given to :meth:`each`, so no more than
        :data:`MAX_PARALLEL` handshakes run at once.

        Raises
        ------
        HostUnreachable
            Saying what ssh said: a refused login, an untrusted host key, or unreachable;
            or that the host has no python3 (3.9 or newer) for the agent.
        """
        try:
            host.connection.start()
            host.connection.wait_ready()
            host.agent = HostAgent(host.connection).start()
        except HostUnreachable as exc:
            host.down = str(exc)
            raise

    def snapshot(self, host: Host, paths: Sequence[str] = ()) -> Snapshot:
        """Copy the connected host's sysfs and procfs into a folder of the fleet's (one request to its agent).

        Parameters
        ----------
        host
            A host of this fleet, connected (:meth:`connect`).
        paths
            Paths on the host to look up too (its targets).

        Raises
        ------
        SnapshotError
            When the host's files cannot be copied.
        HostUnreachable
            When the connection dropped (the host is marked down).
        """
        folder = Path(tempfile.mkdtemp(prefix="host-", dir=self.workdir))
        return fetch_snapshot(host, folder, paths)

    def _check(self, host: Host) -> None:
        self.connect(host)
        problems: list[str] = []
        probe = host.call("programs", fio=self.fio, timeout=COMMAND_TIMEOUT_S * 2)
        version = str(probe.get("fio", "")).strip()
        if not version:
            problems.append(f"fio is not installed (apt-get install fio, version {self.fio_version})")
        elif version != self.fio_version:
            problems.append(
                f"it runs {version}, this machine {self.fio_version}: fio's client and server must be "
                f"the same version; install {self.fio_version} there (or set $IOBENCH_FIO here to a "
                f"{version})"
            )
        elif host.spec.needs_numa and probe.get("numa") is not True:
            problems.append(
                f"its {version} has no NUMA support (numa_mem_policy); install a fio built with libnuma"
            )
        has_numactl = probe.get("numactl") is True
        if not has_numactl:
            problems.append("numactl is not installed (apt-get install numactl)")
        if host.spec.server is not None:
            problems += self._server_folder_problems(host, host.spec.server)
        paths = [t.path for t in host.spec.targets]
        try:
            snapshot = self.snapshot(host, paths)
            topology = discover_topology(snapshot.root)
        except IobenchError as exc:
            problems.append(str(exc))
            raise HostUnreachable("; ".join(problems)) from None
        hostname = snapshot.text("proc/sys/kernel/hostname")
        if not host.spec.target.label and not NAME.match(hostname or ""):
            # Without `name:` the hostname names the host's files (job files, journals, logs).
            problems.append(
                f"its hostname {hostname!r} cannot name files (letters, digits, '.', '_', '-'); "
                "give the host a `name:` in `hosts:`"
            )
            raise HostUnreachable("; ".join(problems))
        locations = {p: locate_target(p, topology, stat=snapshot.stat) for p in paths}
        host.facts = HostFacts(
            spec=host.spec,
            name=host.spec.target.label or str(hostname),
            hostname=hostname,
            kernel=snapshot.text("proc/sys/kernel/osrelease"),
            boot_id=snapshot.text("proc/sys/kernel/random/boot_id"),
            cpu_model=procfs.cpu_model(snapshot.system),
            fio_version=version,
            numactl="installed" if has_numactl else None,
            snapshot=snapshot,
            topology=topology,
            locations=locations,
            # The settings of the run's start (the manifest's), from the snapshot: no command more.
            settings=show(
                snapshot.system, list(dict.fromkeys(d for loc in locations.values() for d in loc.disks))
            ),
        )
        try:
            check_targets(
                host.spec.targets,
                locations,
                writes=host.spec.writes,
                allow_write=self.allow_write,
                system=snapshot.system,
                machine=RemoteMachine(host, snapshot),
            )
        except IobenchError as exc:
            text = str(exc).removeprefix("refused, nothing was run:\n")
            problems += [line.strip().removeprefix(f"{host.describe()}: ") for line in text.splitlines()]
        if problems:
            raise HostUnreachable("; ".join(problems))

    def _server_folder_problems(self, host: Host, server: str) -> list[str]:
        """Why a given server's socket is within other users' reach there (its folder: theirs, or open to them)."""
        folder = str(Path(server).parent)
        seen = host.call("folder", path=folder)
        uid, owner, bits = seen.get("uid"), seen.get("owner"), seen.get("mode")
        if not isinstance(owner, int) or not isinstance(bits, int):
            return [f"the folder of its fio server's socket {folder} cannot be looked at"]
        mode = f"{bits:o}"
        if owner != uid or bits & 0o077:
            return [
                f"its fio server's socket {server} is in a folder other users can reach ({folder}: owner uid "
                f"{owner}, mode {mode}); fio's server has no authentication, so they could run any job "
                "through it; start it in a folder of the SSH user's with mode 0700, or drop `server:` "
                "and let iobench start a private one"
            ]
        return []

    # --- servers -------------------------------------------------------------------------

    def start_servers(self) -> None:
        """Give each host its fio server, forwarded to this machine; all hosts at once.

        What killed runs of this machine left on a host is stopped first
        (:func:`~iobench.system.fioserver.stop_stale`; see ``Host.notes``). A
        host with ``server:`` is used through its socket as it is. On any
        failure every server already started is stopped again.

        Raises
        ------
        HostsRefused
            Naming each host whose server could not be started.
        """
        problems = self.each(self._start)
        if problems:
            self.stop_servers()
            raise HostsRefused([f"{who}: {why}" for who, why in problems.items()])

    def _start(self, host: Host) -> None:
        given = host.spec.server
        if given is None:
            host.notes += stop_stale(host)
            try:
                host.server = start_server(host, self.fio, self.token)
            except ServerError as exc:
                raise IobenchError(str(exc)) from None
            remote = host.server.socket
        else:
            remote = given
        local = self.socket_of(host)
        host.forward = host.connection.forward(local, remote)
        if host.server is not None:
            host.server.local_socket = local

    def recover(self, host: Host) -> str:
        """After a host's connection dropped: one fresh connection and agent, to stop its server there.

        The host stays down (its points fail); the fresh connection and agent
        replace the lost ones, so settings can be restored through them afterwards.

        Returns
        -------
        str
            What was done, for the run's message.
        """
        fresh = self.connector(host.spec.target, self._sockets / f"{self.hosts.index(host)}-again.sock")
        try:
            fresh.start()
            fresh.wait_ready()
        except IobenchError as exc:
            said = getattr(fresh, "lost_reason", lambda: "")() or str(exc)
            with contextlib.suppress(IobenchError, OSError):
                fresh.close()
            return f"{host.describe()}: could not connect again ({said})"
        with contextlib.suppress(IobenchError, OSError):
            host.connection.close()
        host.connection = fresh
        if host.agent is not None:
            host.agent.close()  # its session is gone: this only tidies up here
        try:
            host.agent = HostAgent(fresh).start()
        except IobenchError as exc:
            host.agent = None
            return f"{host.describe()}: connected again, but its agent did not start: {exc}"
        server = host.server
        if server is None:
            return f"{host.describe()}: connected again"
        try:
            stopped = stop_by_pid(host, server.pid, server.folder)
        except IobenchError as exc:
            return f"{host.describe()}: connected again, but could not look for its fio server: {exc}"
        host.server = None
        if server.local_socket is not None:
            Path(server.local_socket).unlink(missing_ok=True)
        if stopped:
            return f"{host.describe()}: connected again and stopped its fio server (pid {server.pid})"
        return f"{host.describe()}: connected again; its fio server had already stopped with its agent"

    def stop_servers(self) -> None:
        """Stop every server this fleet started (and what runs under it); never raises."""

        def stop(host: Host) -> None:
            if host.server is not None:
                host.server.stop()
                host.server = None
            host.forward = None

        self.each(stop)

    def close(self) -> None:
        """Stop servers and agents, close forwards and connections, remove the private folder; bounded, never raises."""

        def end_agent(host: Host) -> None:
            if host.agent is not None:
                host.agent.close()

        with signals_held():
            self.stop_servers()
            self.each(end_agent)
            for host in self.hosts:
                with contextlib.suppress(IobenchError, OSError):
                    host.connection.close()
            shutil.rmtree(self._sockets, ignore_errors=True)

"""The hosts of a sweep (SPEC §11): preflight, fio servers behind SSH forwards, teardown.

A :class:`Fleet` is a run's set of hosts. :meth:`Fleet.preflight` connects to
every host at once and checks, before anything runs and without changing
anything, what the run needs of each: reachable without a prompt, ``fio`` and
``numactl`` present, fio's version equal to this machine's, sysfs and procfs
readable (copied into a local snapshot and read by the same topology code as
any snapshot), and each target through the same write guard as local targets
(:mod:`iobench.system.safety`, through a :class:`RemoteMachine`). Every problem
of every host is reported at once (:class:`HostsRefused`, exit status 2).

:meth:`Fleet.start_servers` then starts one ``fio --server`` per host, bound
to that host's 127.0.0.1, and forwards a port of this machine's 127.0.0.1 to
it through the host's SSH connection; fio's server has no authentication, so
it never listens on a routable address. Each server's pid file is named by a
token that says which run on which machine started it, so the next run
against the host finds and stops a server a crashed run left
(:meth:`Fleet.stop_stale`). :meth:`Fleet.close` stops servers, forwards and
connections; it is bounded in time and runs on every way out of the block.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from iobench.errors import IobenchError
from iobench.system.hostfs import SystemRoot
from iobench.system.process import Completed, signals_held, stop_process
from iobench.system.remote import (
    PROC_AWK,
    WATCH_SCRIPT,
    ProcEntry,
    Snapshot,
    SnapshotError,
    descendants_in,
    fetch_snapshot,
    numa_policies,
    parse_proc_line,
    proc_table,
)
from iobench.system.safety import FileInfo, Machine, ProbeError, Target, check_targets
from iobench.system.ssh import (
    COMMAND_TIMEOUT_S,
    HostUnreachable,
    Ssh,
    SshTarget,
    close_stale_masters,
    control_dir,
    free_local_port,
)
from iobench.system.topology import TargetLocation, Topology, discover_topology, locate_target
from iobench.system.tuning import host_id

SERVER_DIR = ".iobench/servers"
"""Where servers' pid files live on a host, relative to the SSH user's home directory."""
SERVER_PORTS = (20000, 60000)
SERVER_TRIES = 5
STOP_WAIT_S = 3.0
MAX_PARALLEL = 32
"""Hosts connected, checked, started and stopped at once."""

# $1: fio, $2: port, $3: pid file. Start a daemonized server on 127.0.0.1 only, wait until its
# pid file is written (fio writes it once it listens) and the port listens; print the pid.
START_SCRIPT = r"""
"$1" --server="127.0.0.1,$2" --daemonize="$3" >/dev/null 2>&1 </dev/null
port=$(printf '%04X' "$2")
i=0
while [ $i -lt 100 ]; do
  if [ -s "$3" ] && grep -q "^ *[0-9]*: 0100007F:$port 00000000:0000 0A" /proc/net/tcp; then cat "$3"; exit 0; fi
  sleep 0.05; i=$((i+1))
done
exit 1
"""

# $1: the servers' folder. Each pid file with its pid, then every process whose command line
# names that folder, with its command line (NULs as spaces).
SCAN_SCRIPT = r"""
for f in "$1"/*.pid; do [ -f "$f" ] && printf 'F %s %s\n' "$f" "$(cat "$f" 2>/dev/null)"; done
for c in $(grep -l -a -F -- "$1/" /proc/[0-9]*/cmdline 2>/dev/null); do
  p=${c#/proc/}; p=${p%/cmdline}
  printf 'P %s ' "$p"; tr '\0' ' ' <"$c" 2>/dev/null; echo
done
exit 0
"""

# $1: tenths of a second to wait; $2...: pids. SIGTERM, wait until none runs (zombies count as
# gone), then SIGKILL whatever is left.
KILL_SCRIPT = r"""
n=$1; shift
kill -TERM "$@" 2>/dev/null
i=0
while [ "$i" -lt "$n" ]; do
  alive=
  for p; do
    case "$(cat "/proc/$p/stat" 2>/dev/null)" in "" | *") Z "* | *") X "*) ;; *) alive=1; break;; esac
  done
  [ -z "$alive" ] && exit 0
  sleep 0.1; i=$((i + 1))
done
kill -KILL "$@" 2>/dev/null
exit 0
"""

# $1: fio. What the host has of what a run needs, one line each: fio's version, numactl, NUMA in fio.
PROBE_SCRIPT = r"""
v=$("$1" --version 2>/dev/null) || v=
printf 'fio %s\n' "$v"
if command -v numactl >/dev/null 2>&1 && numactl --show >/dev/null 2>&1; then echo 'numactl yes'; else echo 'numactl no'; fi
if [ -n "$v" ] && "$1" --cmdhelp=numa_mem_policy >/dev/null 2>&1; then echo 'numa yes'; else echo 'numa no'; fi
"""

# $1: device. Read its first and last 4 KiB, as the local guard does before probing.
READABLE_SCRIPT = r"""
size=$(blockdev --getsize64 "$1") || exit 3
dd if="$1" of=/dev/null bs=4096 count=1 2>/dev/null || exit 4
last=$(( size / 4096 - 1 )); [ "$last" -lt 0 ] && last=0
dd if="$1" of=/dev/null bs=4096 count=1 skip="$last" 2>/dev/null || exit 4
"""

# $1: device. Exit 16 (EBUSY) when the kernel refuses an exclusive open; 127 without python3.
CLAIMED_PYTHON = "import os,sys\ntry: os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL))\nexcept OSError as e: sys.exit(e.errno)"

_TOKEN = re.compile(
    r"^(?P<machine>[0-9a-f]{12})-(?P<boot>[0-9a-f]{8})-(?P<pid>\d+)-(?P<ticks>\d+)-[0-9a-f]{6}$"
)
_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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

    def run(self, argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT_S) -> Completed:
        """Run argv on the host."""

    def stream(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start argv on the host, its output a pipe here."""

    def forward(self, local_port: int, remote_port: int) -> str:
        """Forward 127.0.0.1:local_port here to 127.0.0.1:remote_port there."""

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
    server : tuple of (str, int) or None
        An already-running fio server to use instead of starting one.
    needs_numa : bool
        Whether a point binds memory (``numa_mem_policy``): the host's fio must support it.
    """

    target: SshTarget
    targets: tuple[Target, ...]
    writes: bool = False
    server: tuple[str, int] | None = None
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
        }


@dataclass
class Server:
    """One host's fio server as this run started (or was given) it.

    Attributes
    ----------
    client : str
        What ``fio --client=`` takes: ``127.0.0.1,<local port>`` through the forward.
    port : int
        The local port (fio's client output names each host by it).
    pid : int or None
        The server's pid on the host (None for a server given with ``server:``).
    remote_port : int or None
        Its port on the host's 127.0.0.1.
    token, pid_file : str or None
        What names the server so a later run can find it.
    """

    client: str
    port: int
    pid: int | None = None
    remote_port: int | None = None
    token: str | None = None
    pid_file: str | None = None
    forward: str | None = None


@dataclass
class Host:
    """A host of a running fleet: its connection, facts, server, and why it is down (if it is)."""

    spec: HostSpec
    connection: Connection
    facts: HostFacts | None = None
    server: Server | None = None
    down: str | None = None

    @property
    def name(self) -> str:
        """The configured name, else the hostname once known, else the destination."""
        if self.facts is not None:
            return self.facts.name
        return self.spec.target.name

    def describe(self) -> str:
        """``host a (root@storage-a)``."""
        target = self.spec.target
        if self.name != target.destination:
            return f"host {self.name} ({target.destination})"
        return f"host {self.name}"

    def run(self, argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT_S) -> Completed:
        """Run argv on the host; a lost connection marks the host down.

        Raises
        ------
        HostUnreachable
            When the host is (or just went) down.
        """
        if self.down is not None:
            raise HostUnreachable(self.down)
        try:
            return self.connection.run(argv, timeout=timeout)
        except HostUnreachable as exc:
            self.down = str(exc)
            raise

    def alive(self) -> bool:
        """Whether the host still answers through its connection."""
        if self.down is None and not self.connection.alive():
            said = getattr(self.connection, "lost_reason", lambda: "")()
            self.down = f"{self.describe()}: the SSH connection closed" + (f" ({said})" if said else "")
        return self.down is None


# --- the guard, on another host ------------------------------------------------------


class RemoteMachine(Machine):
    """The write guard's questions (:class:`~iobench.system.safety.Machine`) answered by a host.

    Device numbers and realpaths of the targets come from the snapshot's
    lookups; anything else is one remote command, remembered for the run.
    The exclusive-open check needs ``python3`` on the host; without it that
    one check (a belt to the sysfs and procfs braces) is skipped.
    """

    def __init__(self, host: Host, snapshot: Snapshot) -> None:
        self.host = host
        self.snapshot = snapshot
        self.prefix = f"{host.describe()}: "
        self._devnos: dict[str, str | None] = {}
        self._real: dict[str, str] = {}
        for looked in snapshot.targets.values():
            self._real[looked.path] = looked.realpath
            if looked.exists and looked.stat is not None and looked.stat.is_block:
                self._devnos[looked.path] = looked.stat.devno

    def devno(self, path: str) -> str | None:
        """``major:minor`` of a block device node on the host."""
        if not path.startswith("/"):
            return None
        if path not in self._devnos:
            done = self.host.run(["stat", "-L", "-c", "%f %t %T", "--", path])
            words = done.stdout.split()
            found = None
            with contextlib.suppress(ValueError):
                if done.returncode == 0 and len(words) == 3 and stat.S_ISBLK(int(words[0], 16)):
                    found = f"{int(words[1], 16)}:{int(words[2], 16)}"
            self._devnos[path] = found
        return self._devnos[path]

    def realpath(self, path: str) -> str:
        """``readlink -f`` on the host."""
        if path not in self._real:
            done = self.host.run(["readlink", "-f", "--", path])
            self._real[path] = done.stdout.strip() or path
        return self._real[path]

    def root_devno(self) -> str | None:
        """The device number of the host's ``/``."""
        found = self.snapshot.root_stat
        return None if found is None else found.devno

    def claimed(self, node: str) -> bool:
        """Whether the host's kernel refuses an exclusive open of ``node`` (EBUSY)."""
        done = self.host.run(["python3", "-c", CLAIMED_PYTHON, node])
        return done.returncode == 16

    def run_tool(self, tool: str, args: list[str], timeout: float) -> Completed:
        """A util-linux probe on the host (``/usr/sbin`` and ``/sbin`` searched too)."""
        done = self.host.run(["env", _PATH, "LC_ALL=C", tool, *args], timeout=timeout + 5)
        if done.returncode == 127:
            raise ProbeError(
                f"{tool} is not installed on {self.host.describe()} (apt-get install util-linux)"
            )
        if done.timed_out:
            raise ProbeError(f"{tool} did not finish within {timeout:g} s on {self.host.describe()}")
        return done

    def check_readable(self, device: str) -> None:
        """Read the device's first and last blocks on the host."""
        done = self.host.run(["env", _PATH, "sh", "-c", READABLE_SCRIPT, "sh", device])
        if done.returncode != 0:
            raise ProbeError(f"{device} cannot be read on {self.host.describe()}")

    def file_info(self, path: str) -> FileInfo:
        """A file target's facts, from the snapshot's lookup."""
        looked = self.snapshot.targets.get(path)
        parent = str(Path(path).parent)
        if looked is None or looked.stat is None:
            return FileInfo(False, False, parent, False, None)
        if looked.exists:
            return FileInfo(True, looked.stat.is_dir, parent, True, looked.stat.size)
        return FileInfo(False, False, parent, looked.existing == parent and looked.stat.is_dir, None)

    def inode(self, path: str) -> int | None:
        """The file's inode number on the host, now."""
        done = self.host.run(["stat", "-L", "-c", "%i", "--", path])
        text = done.stdout.strip()
        return int(text) if done.returncode == 0 and text.isdigit() else None

    def registry_key(self, path: str) -> str:
        """``<host id>:<path>``: the same path on two hosts is two files (the id: how the host is reached)."""
        return f"{host_id(self.host.spec.target.to_json())}:{path}"


# --- tokens: which run started a server -------------------------------------------------


def _this_machine() -> tuple[str, str]:
    """This machine's id and boot id, short (``/etc/machine-id``, the kernel's boot id)."""
    system = SystemRoot()
    machine = (system.read_text("etc/machine-id") or "").replace("-", "")[:12]
    boot = (system.read_text("proc/sys/kernel/random/boot_id") or "").replace("-", "")[:8]
    return machine.ljust(12, "0"), boot.ljust(8, "0")


def server_token() -> str:
    """A name for a server this process starts: machine, boot, pid and its start time, and a nonce."""
    machine, boot = _this_machine()
    stat = SystemRoot().process_stat(os.getpid())
    ticks = stat.start_ticks if stat and stat.start_ticks is not None else 0
    return f"{machine}-{boot}-{os.getpid()}-{ticks}-{random.randbytes(3).hex()}"


def token_stale(token: str) -> bool:
    """Whether the run that started the server named ``token`` is gone.

    Only servers this machine started are judged: another machine's (its
    machine id differs) may belong to a run still going, and is left alone.
    """
    match = _TOKEN.match(token)
    if match is None:
        return False
    machine, boot = _this_machine()
    if match["machine"] != machine:
        return False
    if match["boot"] != boot:
        return True
    stat = SystemRoot().process_stat(int(match["pid"]))
    return stat is None or stat.start_ticks != int(match["ticks"])


# --- the fleet ------------------------------------------------------------------------------


@dataclass
class _Found:
    """Servers a scan found on a host, by token: their pids."""

    pids: dict[str, set[int]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


def _parse_scan(text: str) -> _Found:
    found = _Found()
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "F":
            path, _, pid = rest.partition(" ")
            token = os.path.basename(path).removesuffix(".pid")
            found.files[token] = path
            if pid.strip().isdigit():
                found.pids.setdefault(token, set()).add(int(pid))
        elif kind == "P":
            pid, _, cmdline = rest.partition(" ")
            words = cmdline.split()
            match = next((w for w in words if w.startswith("--daemonize=")), None)
            if not pid.isdigit() or match is None or not any(w.startswith("--server=") for w in words):
                continue
            token = os.path.basename(match.removeprefix("--daemonize=")).removesuffix(".pid")
            found.pids.setdefault(token, set()).add(int(pid))
    return found


def kill_trees(host: Host, pids: Iterable[int]) -> None:
    """Stop processes on a host and everything below them: SIGTERM, a grace period, then SIGKILL.

    The tree is read from the host's ``/proc`` (fio's job processes leave their
    parent's process group), so nothing the server started survives it; the
    signals, the wait and the SIGKILL are one remote command (:data:`KILL_SCRIPT`).
    """
    roots = set(pids)
    if not roots:
        return
    table = proc_table(host.connection)
    doomed = {p for p in roots if p in table}
    for root in roots:
        doomed |= set(descendants_in(table, root))
    if doomed:
        host.run(["sh", "-c", KILL_SCRIPT, "sh", str(int(STOP_WAIT_S * 10)), *map(str, sorted(doomed))])


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
        self.fio_version = fio_version
        self.allow_write = tuple(allow_write)
        self.fio = fio
        # Control sockets and snapshots share one folder with an owner file: what a killed run
        # leaves there is removed by the next (close_stale_masters).
        self._sockets = control_dir()
        self.workdir = self._sockets / "snapshots"
        self.workdir.mkdir()
        self.hosts = [
            Host(spec, connector(spec.target, self._sockets / f"{i}.sock")) for i, spec in enumerate(specs)
        ]

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def by_name(self) -> dict[str, Host]:
        """The hosts by frame name."""
        return {host.name: host for host in self.hosts}

    def each(self, work: Callable[[Host], None], hosts: Sequence[Host] | None = None) -> dict[str, str]:
        """Run ``work`` for every host at once; the hosts whose work raised an IobenchError, with why."""
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
        # Masters start from this thread, all at once; the waits and checks run in parallel.
        for host in self.hosts:
            try:
                host.connection.start()
            except IobenchError as exc:
                host.down = str(exc)
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
            raise HostsRefused(
                [why if why.startswith("host ") else f"{who}: {why}" for who, why in problems.items()]
            )
        return [host.facts for host in self.hosts if host.facts is not None]

    def _check(self, host: Host) -> None:
        if host.down is not None:
            raise HostUnreachable(host.down)
        try:
            host.connection.wait_ready()
        except HostUnreachable as exc:
            host.down = str(exc)
            raise
        problems: list[str] = []
        answer = host.run(["sh", "-c", PROBE_SCRIPT, "sh", self.fio]).stdout
        probe = {key: value for key, _, value in (line.partition(" ") for line in answer.splitlines())}
        version = probe.get("fio", "").strip()
        if not version:
            problems.append(f"fio is not installed (apt-get install fio, version {self.fio_version})")
        elif version != self.fio_version:
            problems.append(
                f"it runs {version}, this machine {self.fio_version}: fio's client and server must be "
                f"the same version; install {self.fio_version} there (or set $IOBENCH_FIO here to a "
                f"{version})"
            )
        elif host.spec.needs_numa and probe.get("numa") != "yes":
            problems.append(
                f"its {version} has no NUMA support (numa_mem_policy); install a fio built with libnuma"
            )
        has_numactl = probe.get("numactl") == "yes"
        if not has_numactl:
            problems.append("numactl is not installed (apt-get install numactl)")
        folder = Path(tempfile.mkdtemp(prefix="host-", dir=self.workdir))
        paths = [t.path for t in host.spec.targets]
        try:
            snapshot = fetch_snapshot(host.connection, folder, paths)
            topology = discover_topology(snapshot.root)
        except (SnapshotError, IobenchError) as exc:
            if isinstance(exc, HostUnreachable):
                host.down = str(exc)
            problems.append(str(exc))
            raise HostUnreachable("; ".join(problems)) from None
        hostname = snapshot.text("proc/sys/kernel/hostname")
        locations = {p: locate_target(p, topology, stat=snapshot.stat) for p in paths}
        host.facts = HostFacts(
            spec=host.spec,
            name=host.spec.target.label or hostname or host.spec.target.destination,
            hostname=hostname,
            kernel=snapshot.text("proc/sys/kernel/osrelease"),
            boot_id=snapshot.text("proc/sys/kernel/random/boot_id"),
            cpu_model=snapshot.system.cpu_model(),
            fio_version=version,
            numactl="installed" if has_numactl else None,
            snapshot=snapshot,
            topology=topology,
            locations=locations,
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

    # --- servers -------------------------------------------------------------------------

    def stop_stale(self, host: Host) -> list[str]:
        """Stop every server on the host that a run of this machine which is gone left behind.

        Returns
        -------
        list of str
            The tokens of the servers stopped.
        """
        done = host.run(["sh", "-c", SCAN_SCRIPT, "sh", SERVER_DIR])
        found = _parse_scan(done.stdout)
        stale = [t for t in set(found.pids) | set(found.files) if token_stale(t)]
        kill_trees(host, {pid for token in stale for pid in found.pids.get(token, ())})
        files = [found.files[t] for t in stale if t in found.files]
        if files:
            host.run(["rm", "-f", "--", *files])
        return sorted(stale)

    def start_servers(self) -> None:
        """Start each host's fio server on its 127.0.0.1 and forward a local port to it; all at once.

        A host with ``server:`` is used as it is. On any failure every server
        already started is stopped again.

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
        if given is not None:
            address, port = given
            host.server = Server(client=f"{address},{port}", port=port)
            return
        self.stop_stale(host)
        host.run(["mkdir", "-p", "-m", "700", "--", SERVER_DIR])
        token = server_token()
        pid_file = f"{SERVER_DIR}/{token}.pid"
        pid = remote_port = None
        for _ in range(SERVER_TRIES):
            remote_port = random.randrange(*SERVER_PORTS)
            done = host.run(["sh", "-c", START_SCRIPT, "sh", self.fio, str(remote_port), pid_file])
            text = done.stdout.strip()
            if done.returncode == 0 and text.isdigit():
                pid = int(text)
                break
        if pid is None or remote_port is None:
            raise IobenchError(
                f"fio --server did not start on 127.0.0.1 ({SERVER_TRIES} ports tried); "
                f"try `fio --server=127.0.0.1,{SERVER_PORTS[0]}` there by hand"
            )
        host.server = Server(
            client="", port=0, pid=pid, remote_port=remote_port, token=token, pid_file=pid_file
        )
        local = free_local_port()
        host.server.forward = host.connection.forward(local, remote_port)
        host.server.client, host.server.port = f"127.0.0.1,{local}", local

    def server_alive(self, host: Host) -> bool:
        """Whether the host's fio server process still runs (one remote command)."""
        server = host.server
        if server is None or server.pid is None:
            return host.alive()
        try:
            return host.run(["kill", "-0", str(server.pid)]).returncode == 0
        except HostUnreachable:
            return False

    def stop_servers(self) -> None:
        """Stop every server this fleet started (and what runs under it); never raises."""

        def stop(host: Host) -> None:
            server = host.server
            if server is None or server.pid is None or host.down is not None:
                return
            with contextlib.suppress(IobenchError):
                kill_trees(host, [server.pid])
                if server.pid_file:
                    host.run(["rm", "-f", "--", server.pid_file])
            host.server = None

        self.each(stop)

    def close(self) -> None:
        """Stop servers, close forwards and connections, remove the snapshots; bounded, never raises."""
        with signals_held():
            self.stop_servers()
            for host in self.hosts:
                with contextlib.suppress(IobenchError, OSError):
                    host.connection.close()
            shutil.rmtree(self._sockets, ignore_errors=True)

    def observe(self, hosts: Sequence[Host], limit_s: float, interval: float = 0.25) -> Observers:
        """Watch the fio workers of ``hosts``' servers for at most ``limit_s`` seconds (see :class:`Observers`)."""
        watched = [h for h in hosts if h.server is not None and h.server.pid is not None and h.down is None]
        return Observers(self, watched, interval, limit_s)


# --- watching the workers -----------------------------------------------------------------------


@dataclass(frozen=True)
class Worker:
    """A fio job process on a host, as its ``/proc`` showed it last.

    ``looks`` counts the views it was in. fio applies a job's ``cpus_allowed``
    and ``numa_mem_policy`` in the job process once it has started, so the
    first view may show what it inherited; its memory policy is read on its
    second view, and only workers seen twice are compared with the plan.
    """

    pid: int
    cpus: str
    mems: str
    name: str
    policy: str | None
    looks: int = 1

    @property
    def settled(self) -> bool:
        """Seen at least twice: its CPUs and memory policy are the job's own."""
        return self.looks >= 2


# The server forks a process per connection, which forks the backend, which forks the jobs.
WORKER_DEPTH = 3


class Observers:
    """Watches the fio jobs of each host's server while a point runs; :meth:`stop` ends it.

    One remote command per host and point streams the host's process table
    every ``interval`` seconds (:data:`~iobench.system.remote.WATCH_SCRIPT`),
    read by a thread here; the memory policy of new job processes costs one
    more command per batch of them. Only the job processes
    (:data:`WORKER_DEPTH` below the server) are kept: the binding is in the job
    file, so the server and the backend above the jobs run unbound.
    """

    def __init__(self, fleet: Fleet, hosts: Sequence[Host], interval: float, limit_s: float) -> None:
        self.fleet = fleet
        self.hosts = list(hosts)
        self.interval = interval
        self.looks = max(1, int(limit_s / interval) + 1)
        self.seen: dict[str, dict[int, Worker]] = {h.name: {} for h in hosts}
        self._streams: list[subprocess.Popen[bytes]] = []
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Observers:
        for host in self.hosts:
            argv = ["sh", "-c", WATCH_SCRIPT, "sh", f"{self.interval:g}", str(self.looks), PROC_AWK]
            try:
                stream = host.connection.stream(argv)
            except IobenchError:
                continue
            self._streams.append(stream)
            thread = threading.Thread(
                target=self._read, args=(host, stream), name=f"iobench-watch-{host.name}"
            )
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop watching: the streams end, the threads finish (bounded)."""
        for stream in self._streams:
            # An ssh client with nothing below it: no process tree to walk (stop_process's fallback).
            stream.terminate()
            try:
                stream.wait(timeout=5)
            except subprocess.TimeoutExpired:
                stop_process(stream)
        for thread in self._threads:
            thread.join(timeout=COMMAND_TIMEOUT_S)
        self._streams.clear()
        self._threads.clear()

    def _read(self, host: Host, stream: subprocess.Popen[bytes]) -> None:
        assert stream.stdout is not None
        table: dict[int, ProcEntry] = {}
        for raw in stream.stdout:
            line = raw.decode(errors="replace")
            if line.startswith("@@"):
                with contextlib.suppress(IobenchError):
                    self.look(host, table)
                table = {}
                continue
            entry = parse_proc_line(line)
            if entry is not None:
                table[entry.pid] = entry
        stream.stdout.close()

    def look(self, host: Host, table: dict[int, ProcEntry]) -> None:
        """Take in one view of the host's process table."""
        assert host.server is not None and host.server.pid is not None
        depth = descendants_in(table, host.server.pid)
        seen = self.seen[host.name]
        fresh = []
        for pid, level in depth.items():
            entry = table[pid]
            if level < WORKER_DEPTH or not entry.name.startswith("fio"):
                continue
            old = seen.get(pid)
            looks = old.looks + 1 if old else 1
            seen[pid] = Worker(pid, entry.cpus, entry.mems, entry.name, old.policy if old else None, looks)
            if looks == 2:
                fresh.append(pid)
        for pid, policy in numa_policies(host.connection, fresh).items():
            if policy is not None and pid in seen:
                old = seen[pid]
                seen[pid] = Worker(old.pid, old.cpus, old.mems, old.name, policy, old.looks)

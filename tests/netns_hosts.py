"""Test hosts on this machine: network namespaces, each with its own hostname and sshd.

How to use
----------
In a test, take the ``netns_hosts`` fixture (conftest loads this module as a
plugin) and call it with the number of hosts; everything is torn down when the
test ends, also when it fails or is interrupted::

    @pytest.mark.root
    def test_two(netns_hosts):
        hosts = netns_hosts(2)                 # hosts named "a" and "b"
        a = hosts["a"]
        ssh = ["ssh", "-F", str(hosts.ssh_config), a.ssh, "hostname"]   # a.ssh == "root@a"
        # or without the config file, as a matrix's ``ssh:`` + ``ssh_options:`` (BatchMode and
        # ConnectTimeout are left to the caller: iobench refuses them in a matrix):
        ssh = ["ssh", "-oBatchMode=yes", *(f"-o{o}" for o in a.ssh_options), a.ssh, "hostname"]
        a.listeners()                          # [Listener("10.213.0.2", 22, ("sshd",))]
        a.pids()                               # every process inside a's namespace
        a.session_pids()                       # ... but the host's own (unshare, sshd listener)

Outside a test (a benchmark, a shell session) use the context manager:
``with netns_hosts(8) as hosts: ...``.

Each host is a network namespace (``iobt-<owner pid>-<n>``) joined to the root
namespace by a veth pair with a private /30 from 10.213.0.0/16 (root end .1,
host end .2), ``lo`` up inside; an ``sshd`` (``/usr/sbin/sshd -D -e``, its own
config, host key and log in a temp directory) runs in the namespace as pid 1 of
its own pid namespace, under its own UTS name (``hostname`` over SSH prints the
host's name) and with its own home for root (a directory bind-mounted over
``~root`` in its own mount namespace), listening on the host's veth address
only; root logs in with a throwaway key. Processes started over SSH (fio,
``fio --server``) run inside: ``ss`` there shows what they listen on,
``pids()`` finds them, and they see only their host's processes and home, as
on separate machines. Everything else of the filesystem is this machine's, so
fio and every other tool is there.

Teardown kills every process in each namespace (sshd, sessions, anything code
under test left behind), deletes the namespaces and veths and the temp
directory. A namespace or veth of ours whose owner process is gone (a crashed or
killed earlier run) is removed when hosts are next created. Only the veth and
loopback addresses are ever used. Needs root, ``ip``, ``unshare``, ``ssh``,
``ssh-keygen`` and ``/usr/sbin/sshd`` (``make deps`` installs openssh-server
without starting it); without them the fixture skips (a failure under CI).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"
NETNS_PREFIX = "iobt-"
VETH_PREFIX = "ibt"
SUBNETS = ipaddress.ip_network("10.213.0.0/16")
LOCK_FILE = Path(tempfile.gettempdir()) / "iobench-netns-hosts.lock"
DIR_PREFIX = "iobench-netns-"
"""A folder of test hosts (keys, sshd configs and logs): ``iobench-netns-<owner pid>-<random>``."""
COMMAND_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 10.0
KILL_GRACE_S = 3.0

# Runs as pid 1 of the host's new namespaces (UTS, mount, pid): a private home for root over the
# real one (what a command there leaves in ~ stays on that host), /dev/null over each program the
# host is not to have (its own mount namespace: this machine keeps them), the hostname, then become sshd.
_HOST_INIT = """
import json, os, pwd, socket, subprocess, sys
name, home, hidden, sshd = sys.argv[1:5]
subprocess.run(["mount", "--bind", home, pwd.getpwuid(0).pw_dir], check=True, timeout=10)
for program in json.loads(hidden):
    subprocess.run(["mount", "--bind", "/dev/null", program], check=True, timeout=10)
socket.sethostname(name)
os.execv(sshd, sys.argv[4:])
"""

_counter = 0


class NetnsHostsError(RuntimeError):
    """Setting up or tearing down test hosts failed."""


def _run(argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT_S, check: bool = True) -> str:
    try:
        done = subprocess.run(  # noqa: S603 - argv list
            list(argv), capture_output=True, text=True, check=False, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise NetnsHostsError(f"{' '.join(argv)} did not finish within {timeout:g} s") from None
    if check and done.returncode != 0:
        raise NetnsHostsError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def missing_requirements() -> list[str]:
    """What this machine lacks for namespace hosts (empty when they can be made)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    for tool in ("ip", "unshare", "ssh", "ssh-keygen", "ss"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if not os.access(SSHD, os.X_OK):
        missing.append(f"{SSHD} (Debian package openssh-server; make deps)")
    return missing


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket inside a namespace, as ``ss -ltnp`` shows it."""

    address: str
    port: int
    processes: tuple[str, ...]

    @property
    def loopback(self) -> bool:
        """True when only the namespace itself can reach the socket (127.0.0.0/8 or ::1)."""
        try:
            return ipaddress.ip_address(self.address).is_loopback
        except ValueError:  # "*" and "0.0.0.0"-like wildcards
            return False


_SS_USERS = re.compile(r'\("([^"]+)",pid=\d+')


def _names(line: str) -> tuple[str, ...]:
    """The names of the processes holding an ``ss -p`` line's socket, each once, in ``ss`` order.

    A forked child holds its parent's socket for a moment (sshd's connection child before it closes
    the listener), so the same socket may briefly show ``sshd`` twice: that is still only sshd.
    """
    return tuple(dict.fromkeys(_SS_USERS.findall(line)))


def parse_listeners(text: str) -> list[Listener]:
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        local = fields[3]
        address, _, port = local.rpartition(":")
        address = address.strip("[]").split("%")[0]  # [::1]:22, fe80::1%eth0:22
        found.append(Listener(address, int(port), _names(line)))
    return found


@dataclass(frozen=True)
class UnixListener:
    """A listening Unix stream socket, as ``ss -xlp`` shows it: its path and the processes holding it."""

    path: str
    processes: tuple[str, ...]


def parse_unix_listeners(text: str) -> list[UnixListener]:
    """``ss -xlpH`` output as :class:`UnixListener` (abstract and unnamed sockets left out)."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[4].startswith("/"):
            found.append(UnixListener(fields[4], _names(line)))
    return found


@dataclass
class NetnsHost:
    """One test host: a namespace, its veth address, its sshd."""

    name: str
    netns: str
    address: str
    gateway: str
    veth_root: str
    veth_host: str
    directory: Path
    ssh_options: tuple[str, ...]
    #: ``unshare``, whose only child is the host's sshd (pid 1 of the host's pid namespace).
    sshd: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def ssh(self) -> str:
        """The SSH destination for the generated client config: ``root@<name>``."""
        return f"root@{self.name}"

    @property
    def destination(self) -> str:
        """The SSH destination without any config: ``root@<address>``."""
        return f"root@{self.address}"

    @property
    def sshd_log(self) -> Path:
        """What this host's sshd wrote (``-e``: its log goes to stderr, kept here)."""
        return self.directory / "sshd.log"

    def inode(self) -> int:
        """The namespace's inode, as ``/proc/<pid>/ns/net`` of its processes shows it."""
        return os.stat(f"/run/netns/{self.netns}").st_ino

    def pids(self) -> list[int]:
        """Every process whose network namespace is this host's."""
        return pids_in_netns(self.inode())

    def session_pids(self) -> list[int]:
        """Processes in the namespace other than the host's own (``unshare`` and the sshd listener).

        What code under test started there (and sshd's per-connection
        processes while a session is open); zombies are left out.
        """
        own = set()
        if self.sshd is not None:
            own = {self.sshd.pid, *children_of(self.sshd.pid)}
        return [p for p in self.pids() if p not in own and _running(p)]

    def exec(self, *argv: str, timeout: float = COMMAND_TIMEOUT_S, check: bool = True) -> str:
        """Run ``argv`` inside the namespace (as root, not over SSH) and return its stdout."""
        return _run(["ip", "netns", "exec", self.netns, *argv], timeout=timeout, check=check)

    def listeners(self) -> list[Listener]:
        """The TCP sockets listening inside this host's namespace, with the processes holding them."""
        return parse_listeners(self.exec("ss", "-ltnpH"))

    def unix_listeners(self) -> list[UnixListener]:
        """The Unix stream sockets listening inside this host's namespace, with their processes."""
        return parse_unix_listeners(self.exec("ss", "-xlpH"))


@dataclass
class NetnsHosts:
    """The hosts of one setup, and the client-side files that reach them."""

    hosts: list[NetnsHost]
    directory: Path
    ssh_config: Path
    identity: Path
    known_hosts: Path

    def __getitem__(self, name: str) -> NetnsHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def __iter__(self) -> Iterator[NetnsHost]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    @property
    def names(self) -> list[str]:
        """The hosts' names (their hostnames and ``Host`` aliases in :attr:`ssh_config`)."""
        return [h.name for h in self.hosts]

    def ssh_argv(self, host: str | NetnsHost, *command: str, timeout_s: int = 5) -> list[str]:
        """``ssh -F <config> root@<host> command...`` for a host, bounded by ``ConnectTimeout``."""
        name = host if isinstance(host, str) else host.name
        return [
            "ssh",
            "-F",
            str(self.ssh_config),
            "-o",
            f"ConnectTimeout={timeout_s}",
            f"root@{name}",
            *command,
        ]


def default_names(n: int) -> list[str]:
    """``a``, ``b``, ... (``h0``, ``h1``, ... beyond 26 hosts)."""
    if n <= 26:
        return [chr(ord("a") + i) for i in range(n)]
    return [f"h{i}" for i in range(n)]


def pids_in_netns(inode: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                pids.append(int(entry))
        except OSError:  # gone, or a kernel thread
            continue
    return pids


def children_of(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _running(pid: int) -> bool:
    """Exists and has not exited (a zombie waiting to be reaped has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _kill_all(pids_of: Callable[[], list[int]]) -> list[int]:
    """SIGTERM what ``pids_of`` lists, SIGKILL what is left after a grace period; returns survivors."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        pids = [p for p in pids_of() if p != os.getpid()]
        if not pids:
            return []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and [p for p in pids_of() if p != os.getpid()]:
            time.sleep(0.05)
    return [p for p in pids_of() if p != os.getpid()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def netns_names() -> list[str]:
    return [line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines() if line.strip()]


def link_names() -> list[str]:
    return [
        line.split(":")[1].strip().split("@")[0]
        for line in _run(["ip", "-o", "link", "show"]).splitlines()
        if line.count(":") >= 2
    ]


def _delete_netns(netns: str) -> None:
    with contextlib.suppress(OSError):
        _kill_all(functools.partial(pids_in_netns, os.stat(f"/run/netns/{netns}").st_ino))
    _run(["ip", "netns", "delete", netns], check=False)


def clean_stale() -> list[str]:
    """Remove namespaces, veths and folders of ours whose owner process no longer runs; returns their names."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*"):
        m = re.match(rf"{DIR_PREFIX}(\d+)-", folder.name)
        if m and not _alive(int(m.group(1))) and folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    for netns in netns_names():
        m = re.fullmatch(rf"{NETNS_PREFIX}(\d+)-\d+", netns)
        if m and not _alive(int(m.group(1))):
            _delete_netns(netns)
            removed.append(netns)
    for link in link_names():
        m = re.fullmatch(rf"{VETH_PREFIX}(\d+)[rh]\d+", link)
        if m and not _alive(int(m.group(1))):
            _run(["ip", "link", "delete", link], check=False)
            removed.append(link)
    return removed


def _free_subnets(count: int) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``count`` /30s of :data:`SUBNETS` that no address or route of the root namespace touches."""
    taken = []
    for line in _run(["ip", "-4", "-o", "addr", "show"]).splitlines():
        m = re.search(r"inet (\S+)", line)
        if m:
            taken.append(ipaddress.ip_interface(m.group(1)).network)
    for line in _run(["ip", "-4", "route", "show", "table", "all"]).splitlines():
        dest = line.split()[0] if line.split() else ""
        with contextlib.suppress(ValueError):
            if dest not in ("default", "local", "broadcast", "unreachable", "blackhole", "prohibit"):
                taken.append(ipaddress.ip_network(dest, strict=False))
    free: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    if count == 0:
        return free
    for subnet in SUBNETS.subnets(new_prefix=30):
        if not any(subnet.overlaps(t) and t.prefixlen > 0 for t in taken):
            free.append(subnet)
            if len(free) == count:
                return free
    raise NetnsHostsError(f"no {count} free /30 subnets left in {SUBNETS}")


def _keygen(path: Path, comment: str) -> str:
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return path.with_name(path.name + ".pub").read_text().strip()


def _sshd_config(host: NetnsHost, host_key: Path, authorized_keys: Path) -> str:
    return "\n".join(
        [
            f"ListenAddress {host.address}:22",
            f"HostKey {host_key}",
            f"PidFile {host.directory / 'sshd.pid'}",
            f"AuthorizedKeysFile {authorized_keys}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "UsePAM no",
            "StrictModes no",
            "AllowTcpForwarding yes",
            "X11Forwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            "UseDNS no",
            "LogLevel VERBOSE",
            "Subsystem sftp internal-sftp",
            "",
        ]
    )


def _client_options(host: NetnsHost, identity: Path, known_hosts: Path) -> tuple[str, ...]:
    return (
        f"HostName={host.address}",
        "Port=22",
        "User=root",
        f"IdentityFile={identity}",
        "IdentitiesOnly=yes",
        f"UserKnownHostsFile={known_hosts}",
        "GlobalKnownHostsFile=/dev/null",
        "StrictHostKeyChecking=yes",
        "LogLevel=ERROR",
    )


# In the config file only: iobench sets these itself and refuses them in a matrix's ssh_options.
_CONFIG_ONLY = ("BatchMode yes", "ConnectTimeout 5")


def _wait_listening(host: NetnsHost, deadline: float) -> None:
    assert host.sshd is not None
    while True:
        if host.sshd.poll() is not None:
            log = host.sshd_log.read_text(errors="replace") if host.sshd_log.exists() else ""
            raise NetnsHostsError(f"sshd of test host {host.name} exited ({host.sshd.returncode}): {log}")
        with contextlib.suppress(OSError), socket.create_connection((host.address, 22), timeout=0.5) as s:
            if s.recv(4).startswith(b"SSH-"):
                return
        if time.monotonic() > deadline:
            raise NetnsHostsError(f"sshd of test host {host.name} not listening on {host.address}:22")
        time.sleep(0.05)


def hidden_files(programs: Sequence[str]) -> list[str]:
    """The files behind each program name on PATH here (``awk`` -> ``/usr/bin/mawk``), each once."""
    found = (
        shutil.which(p, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") for p in programs
    )
    return sorted({os.path.realpath(f) for f in found if f is not None})


def _start_sshd(host: NetnsHost, config: Path, hidden: Sequence[str] = ()) -> None:
    home = host.directory / "home"
    home.mkdir(mode=0o700)
    argv = ["ip", "netns", "exec", host.netns]
    argv += ["unshare", "--uts", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child"]
    argv += [sys.executable, "-c", _HOST_INIT, host.name, str(home), json.dumps(hidden_files(hidden))]
    argv += [SSHD, "-D", "-e", "-f", str(config)]
    with host.sshd_log.open("wb") as log:
        host.sshd = subprocess.Popen(  # noqa: S603 - argv list
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"},
        )


def _naming(text: str) -> list[int]:
    """Processes (not zombies, not this one) whose command line contains ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z" and text.encode() in cmdline:
            found.append(int(entry))
    return found


def _teardown(hosts: list[NetnsHost], directory: Path) -> list[str]:
    """Kill everything in each namespace and every ssh here using our keys/config, delete namespaces and veths.

    Returns what could not be removed.
    """
    problems = []
    # ssh clients of the code under test (control masters, forwards) name our key or config.
    _kill_all(functools.partial(_naming, f"{directory}/"))
    for host in hosts:
        if host.sshd is not None and host.sshd.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(host.sshd.pid, signal.SIGTERM)
        try:
            inode = host.inode()
        except OSError:
            inode = None
        if inode is not None:
            survivors = _kill_all(functools.partial(pids_in_netns, inode))
            if survivors:
                problems.append(f"{host.netns}: processes {survivors} survived SIGKILL")
        if host.sshd is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                host.sshd.wait(timeout=KILL_GRACE_S)
        _run(["ip", "netns", "delete", host.netns], check=False)
    links = set(link_names())
    for host in hosts:
        for link in (host.veth_root, host.veth_host):
            if link in links:
                _run(["ip", "link", "delete", link], check=False)
    deadline = time.monotonic() + COMMAND_TIMEOUT_S
    while time.monotonic() < deadline:
        left = {h.veth_root for h in hosts} & set(link_names())
        left |= {h.netns for h in hosts} & set(netns_names())
        if not left:
            break
        time.sleep(0.1)
    else:
        problems.append(f"still present: {sorted(left)}")
    return problems


@contextlib.contextmanager
def netns_hosts(
    n: int, *, names: Sequence[str] | None = None, directory: Path | None = None, hidden: Sequence[str] = ()
) -> Iterator[NetnsHosts]:
    """Create ``n`` namespace hosts with sshd, yield them, always tear them down.

    Parameters
    ----------
    n
        How many hosts.
    names
        Their names (hostname inside, ``Host`` alias in the client config); ``a``, ``b``, ... by default.
    directory
        Where keys, configs and logs go (a new temp directory, removed afterwards, by default).
    hidden
        Programs the hosts do not have (``awk``, ``python3``): /dev/null is mounted over each there.

    Raises
    ------
    NetnsHostsError
        When a requirement is missing or a step fails (everything made so far is removed first).
    """
    global _counter
    names = list(names) if names is not None else default_names(n)
    if len(names) != n or len(set(names)) != n:
        raise ValueError(f"need {n} distinct names, got {names}")
    missing = missing_requirements()
    if missing:
        raise NetnsHostsError(f"namespace test hosts need: {', '.join(missing)}")
    own_dir = directory is None
    # The owner's pid in the name: clean_stale removes what a killed owner left.
    base = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")) if directory is None else directory
    base.mkdir(parents=True, exist_ok=True)
    hosts: list[NetnsHost] = []
    try:
        identity = base / "client_key"
        authorized = base / "authorized_keys"
        known_hosts = base / "known_hosts"
        authorized.write_text(_keygen(identity, "iobench-test-client") + "\n")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        pid = os.getpid()
        LOCK_FILE.touch(exist_ok=True)
        with LOCK_FILE.open("r") as lock:
            # Concurrent runs (two pytest sessions) must not pick the same subnets or clean each other.
            fcntl.flock(lock, fcntl.LOCK_EX)
            clean_stale()
            for name, subnet in zip(names, _free_subnets(n), strict=True):
                _counter += 1
                gateway, address = (str(a) for a in list(subnet.hosts())[:2])
                host = NetnsHost(
                    name=name,
                    netns=f"{NETNS_PREFIX}{pid}-{_counter}",
                    address=address,
                    gateway=gateway,
                    veth_root=f"{VETH_PREFIX}{pid}r{_counter}",
                    veth_host=f"{VETH_PREFIX}{pid}h{_counter}",
                    directory=base / name,
                    ssh_options=(),
                )
                hosts.append(host)
                _run(["ip", "netns", "add", host.netns])
                _run(["ip", "link", "add", host.veth_root, "type", "veth", "peer", "name", host.veth_host])
                _run(["ip", "link", "set", host.veth_host, "netns", host.netns])
                _run(["ip", "addr", "add", f"{gateway}/30", "dev", host.veth_root])
                _run(["ip", "link", "set", host.veth_root, "up"])
                inside = ["ip", "-n", host.netns]
                _run([*inside, "addr", "add", f"{address}/30", "dev", host.veth_host])
                _run([*inside, "link", "set", host.veth_host, "up"])
                _run([*inside, "link", "set", "lo", "up"])
        known_lines, config_lines = [], []
        for host in hosts:
            host.directory.mkdir()
            host_key = host.directory / "ssh_host_ed25519_key"
            public = _keygen(host_key, f"iobench-test-host-{host.name}")
            known_lines.append(f"{host.name},{host.address} {public}")
            config = host.directory / "sshd_config"
            config.write_text(_sshd_config(host, host_key, authorized))
            host.ssh_options = _client_options(host, identity, known_hosts)
            config_lines.append(f"Host {host.name}")
            config_lines += [f"    {option.replace('=', ' ', 1)}" for option in host.ssh_options]
            config_lines += [f"    {line}" for line in _CONFIG_ONLY]
            _start_sshd(host, config, hidden)
        known_hosts.write_text("\n".join(known_lines) + "\n")
        ssh_config = base / "ssh_config"
        ssh_config.write_text("\n".join(config_lines) + "\n")
        deadline = time.monotonic() + READY_TIMEOUT_S
        for host in hosts:
            _wait_listening(host, deadline)
        yield NetnsHosts(hosts, base, ssh_config, identity, known_hosts)
    finally:
        problems = _teardown(hosts, base)
        if own_dir:
            shutil.rmtree(base, ignore_errors=True)
        if problems:
            raise NetnsHostsError("teardown of test hosts incomplete: " + "; ".join(problems))


@pytest.fixture(name="netns_hosts")
def netns_hosts_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., NetnsHosts]]:
    """A factory: ``netns_hosts(2)`` (or ``netns_hosts(2, names=[...])``) makes hosts torn down after the test."""
    missing = missing_requirements()
    if missing:
        pytest.skip(f"namespace test hosts need: {', '.join(missing)}")
    with contextlib.ExitStack() as stack:

        def make(n: int, *, names: Sequence[str] | None = None, hidden: Sequence[str] = ()) -> NetnsHosts:
            directory = tmp_path_factory.mktemp("hosts")
            return stack.enter_context(netns_hosts(n, names=names, directory=directory, hidden=hidden))

        yield make

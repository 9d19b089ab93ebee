"""A fake SSH for the hosts tests: "hosts" that are this machine, reached without SSH.

:class:`LocalConnection` stands where :class:`iobench.system.ssh.Ssh` does (a
:data:`iobench.system.hosts.Connector` makes it): every remote command runs here,
in the host's own "home" folder (where fio servers keep their pid files), and
a port forward is a small TCP relay on 127.0.0.1. Answers can be scripted per
command to play a host without fio, with another fio, without numactl, or one
that cannot be reached; :meth:`LocalConnection.cut` plays a host that dies.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from iobench.system.hosts import PROBE_SCRIPT, Connector
from iobench.system.process import Completed, run_process, spawn_process
from iobench.system.ssh import COMMAND_TIMEOUT_S, HostUnreachable, SshTarget

Answer = Callable[[Sequence[str]], Completed | None]


def completed(argv: Sequence[str], stdout: str = "", returncode: int = 0, stderr: str = "") -> Completed:
    """A finished command as :func:`~iobench.system.process.run_process` returns it."""
    return Completed(tuple(argv), returncode, stdout, stderr, 0.0, False)


def probe_answer(fio: str = "fio-3.33", numactl: bool = True, numa: bool = True) -> Answer:
    """Answers the preflight's probe (fio version, numactl, NUMA in fio) as a host with these would."""

    def answer(argv: Sequence[str]) -> Completed | None:
        if len(argv) > 2 and argv[:2] == ["sh", "-c"] and argv[2] == PROBE_SCRIPT:
            lines = [f"fio {fio}", f"numactl {'yes' if numactl else 'no'}", f"numa {'yes' if numa else 'no'}"]
            return completed(argv, "\n".join(lines) + "\n")
        return None

    return answer


class Relay:
    """127.0.0.1:``listen`` → 127.0.0.1:``to``, one thread, until :meth:`close`."""

    def __init__(self, listen: int, to: int) -> None:
        self.to = to
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", listen))
        self.server.listen()
        self.server.setblocking(False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.server, selectors.EVENT_READ)
        peers: dict[socket.socket, socket.socket] = {}
        while not self._stop.is_set():
            for key, _ in selector.select(timeout=0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self.server:
                    with contextlib.suppress(OSError):
                        inner, _ = self.server.accept()
                        outer = socket.create_connection(("127.0.0.1", self.to), timeout=5)
                        for a, b in ((inner, outer), (outer, inner)):
                            peers[a] = b
                            selector.register(a, selectors.EVENT_READ)
                    continue
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if data:
                    with contextlib.suppress(OSError):
                        peers[sock].sendall(data)
                    continue
                other = peers.pop(sock, None)
                for s in (sock, other):
                    if s is not None:
                        with contextlib.suppress(KeyError, ValueError):
                            selector.unregister(s)
                        s.close()
                if other is not None:
                    peers.pop(other, None)
        for s in list(peers):
            s.close()
        selector.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.server.close()


class LocalConnection:
    """A host that is this machine (see the module's description)."""

    def __init__(
        self,
        target: SshTarget,
        home: Path,
        *,
        answers: Sequence[Answer] = (),
        unreachable: str | None = None,
    ) -> None:
        self._target = target
        self.home = home
        self.answers = list(answers)
        self.unreachable = unreachable
        self.calls: list[list[str]] = []
        self.relays: list[Relay] = []
        self.cut_reason: str | None = None
        self.closed = False
        home.mkdir(parents=True, exist_ok=True)

    @property
    def target(self) -> SshTarget:
        return self._target

    def start(self) -> None:
        pass

    def wait_ready(self, timeout: float | None = None) -> None:
        if self.unreachable is not None:
            raise HostUnreachable(f"host {self.target.describe()} is unreachable: {self.unreachable}")

    def run(self, argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT_S) -> Completed:
        if self.cut_reason is not None:
            raise HostUnreachable(f"host {self.target.describe()} stopped answering: {self.cut_reason}")
        args = [str(a) for a in argv]
        self.calls.append(args)
        for answer in self.answers:
            found = answer(args)
            if found is not None:
                return found
        return run_process(args, cwd=self.home, timeout=timeout)

    def stream(self, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        if self.cut_reason is not None:
            raise HostUnreachable(f"host {self.target.describe()} stopped answering: {self.cut_reason}")
        return spawn_process([str(a) for a in argv], stdout=True, cwd=self.home)

    def forward(self, local_port: int, remote_port: int) -> str:
        self.relays.append(Relay(local_port, remote_port))
        return f"127.0.0.1:{local_port}:127.0.0.1:{remote_port}"

    def alive(self) -> bool:
        return self.cut_reason is None and not self.closed

    def lost_reason(self) -> str:
        return self.cut_reason or ""

    def cut(self, reason: str = "connection lost") -> None:
        """The host goes away: its forwards close, commands fail."""
        self.cut_reason = reason
        for relay in self.relays:
            relay.close()

    def close(self) -> None:
        self.closed = True
        for relay in self.relays:
            relay.close()
        self.relays.clear()


class LocalHosts:
    """A :data:`~iobench.system.hosts.Connector` of :class:`LocalConnection` hosts, remembered by label."""

    def __init__(self, base: Path, **per_host: dict[str, object]) -> None:
        self.base = base
        self.per_host = per_host
        self.made: dict[str, LocalConnection] = {}

    def __call__(self, target: SshTarget, control_path: Path) -> LocalConnection:
        options = dict(self.per_host.get(target.name, {}))
        connection = LocalConnection(target, self.base / target.name, **options)  # type: ignore[arg-type]
        self.made[target.name] = connection
        return connection


def connector(base: Path, **per_host: dict[str, object]) -> Connector:
    """A connector whose hosts are this machine (see :class:`LocalHosts`)."""
    return LocalHosts(base, **per_host)

"""A fake SSH for the hosts tests: "hosts" that are this machine, reached without SSH.

:class:`LocalConnection` stands where :class:`iobench.system.ssh.Ssh` does (a
:data:`iobench.system.fleet.Connector` makes it): every remote command runs here,
in the host's own "home" folder (where fio servers keep their pid files), and
a socket forward is a symlink to the host's socket. Answers can be scripted per
command to play a host without fio, with another fio, without numactl, or one
that cannot be reached; :meth:`LocalConnection.cut` plays a host that dies;
``root`` plays a host whose sysfs and procfs are fake trees (its settings
tuned and restored without touching this machine's): the host's agent reads
them as its root; ``programs`` gives it stand-ins for fio, numactl or python3.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from iobench.system.fleet import Connector
from iobench.system.hostagent import HostAgent
from iobench.system.process import Completed, minimal_env, run_process, spawn_process
from iobench.system.ssh import COMMAND_TIMEOUT_S, HostUnreachable, SshTarget

Answer = Callable[[Sequence[str]], Completed | None]


def completed(argv: Sequence[str], stdout: str = "", returncode: int = 0, stderr: str = "") -> Completed:
    """A finished command as :func:`~iobench.system.process.run_process` returns it."""
    return Completed(tuple(argv), returncode, stdout, stderr, 0.0, False)


def program(version: str | None) -> str:
    """A stand-in for a host's program: prints ``version`` for ``--version`` (None: as if missing, exit 127).

    A ``version`` that starts with ``#!`` is the whole script.
    """
    if version is not None and version.startswith("#!"):
        return version
    if version is None:
        return "#!/bin/sh\nexit 127\n"
    return f'#!/bin/sh\n[ "$1" = --version ] && echo {version}\nexit 0\n'


class LocalConnection:
    """A host that is this machine (see the module's description)."""

    def __init__(
        self,
        target: SshTarget,
        home: Path,
        *,
        answers: Sequence[Answer] = (),
        unreachable: str | None = None,
        root: Path | None = None,
        programs: dict[str, str | None] | None = None,
    ) -> None:
        self._target = target
        self.home = home
        self.root = root
        self.answers = list(answers)
        self.unreachable = unreachable
        self.calls: list[list[str]] = []
        self.links: list[Path] = []
        self.streams: list[subprocess.Popen[bytes]] = []
        self.started: list[list[str]] = []
        """Every stream's argv, kept after the stream ends."""
        self.cut_reason: str | None = None
        self.closed = False
        home.mkdir(parents=True, exist_ok=True)
        self.bin = home / "bin"
        for name, version in (programs or {}).items():
            self.bin.mkdir(exist_ok=True)
            (self.bin / name).write_text(program(version))
            (self.bin / name).chmod(0o755)

    @property
    def target(self) -> SshTarget:
        return self._target

    def env(self) -> dict[str, str]:
        """What a login there would have: its own home (state, locks), its programs, then the PATH of this machine."""
        env = minimal_env({"HOME": str(self.home)})
        env["PATH"] = f"{self.bin}:{env['PATH']}"
        return env

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
        return run_process(args, cwd=self.home, timeout=timeout, env=self.env())

    def stream(self, argv: Sequence[str], *, stdin: bool = False) -> subprocess.Popen[bytes]:
        if self.cut_reason is not None:
            raise HostUnreachable(f"host {self.target.describe()} stopped answering: {self.cut_reason}")
        args = [str(a) for a in argv]
        if self.root is not None and args[:1] == ["python3"]:
            args += ["--root", str(self.root)]  # the agent reads the fake tree
        self.started.append(args)
        proc = spawn_process(args, stdout=True, cwd=self.home, stdin=stdin, env=self.env())
        self.streams.append(proc)
        return proc

    def forward(self, local: str, remote: str) -> str:
        # The "host" is this machine: its socket is reachable by path; a link stands for the forward.
        Path(local).symlink_to(remote)
        self.links.append(Path(local))
        return f"{local}:{remote}"

    def alive(self) -> bool:
        return self.cut_reason is None and not self.closed

    def lost_reason(self) -> str:
        return self.cut_reason or ""

    def cut(self, reason: str = "connection lost") -> None:
        """The host goes away: its forwards and sessions close (its server stops with them), commands fail."""
        self.cut_reason = reason
        self._drop()

    def _drop(self) -> None:
        for link in self.links:
            link.unlink(missing_ok=True)
        self.links.clear()
        for proc in self.streams:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        for proc in self.streams:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.streams.clear()

    def close(self) -> None:
        self.closed = True
        self._drop()


@contextlib.contextmanager
def agent_on(connection: LocalConnection) -> Iterator[HostAgent]:
    """The host's agent, started over the fake connection for the block."""
    agent = HostAgent(connection).start()
    try:
        yield agent
    finally:
        agent.close()


class LocalHosts:
    """A :data:`~iobench.system.fleet.Connector` of :class:`LocalConnection` hosts, remembered by label."""

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

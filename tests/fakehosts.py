"""A fake SSH for the hosts tests: "hosts" that are this machine, reached without SSH.

:class:`LocalConnection` stands where :class:`iobench.system.ssh.Ssh` does (a
:data:`iobench.system.fleet.Connector` makes it): every remote command runs here,
in the host's own "home" folder (where fio servers keep their pid files), and
a socket forward is a symlink to the host's socket. Answers can be scripted per
command to play a host without fio, with another fio, without numactl, or one
that cannot be reached; :meth:`LocalConnection.cut` plays a host that dies;
:func:`rooted` plays a host whose sysfs and procfs are fake trees (its settings
tuned and restored without touching this machine's).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from iobench.system.fleet import PROBE_SCRIPT, Connector
from iobench.system.process import Completed, minimal_env, run_process, spawn_process
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


def rooted(root: Path) -> Answer:
    """Answers every command as a host whose ``/sys`` and ``/proc`` are the trees under ``root``.

    Each argument (scripts too) has its ``/sys/...`` and ``/proc/...`` paths moved
    under ``root``, the command runs here, and ``root`` is taken out of what it
    prints: the snapshot script, ``cat`` and the write of a setting all see the
    fake tree, with the host's own paths in their answers.
    """
    paths = re.compile(r"(?<![\w.-])/(sys|proc)(?=/|\b)")

    def answer(argv: Sequence[str]) -> Completed:
        moved = [paths.sub(lambda m: f"{root}/{m.group(1)}", a) for a in argv]
        done = run_process(moved, timeout=COMMAND_TIMEOUT_S)
        out, err = (text.replace(f"{root}/", "/") for text in (done.stdout, done.stderr))
        return completed(argv, out, done.returncode, err)

    return answer


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
        self.links: list[Path] = []
        self.streams: list[subprocess.Popen[bytes]] = []
        self.started: list[list[str]] = []
        """Every stream's argv, kept after the stream ends."""
        self.cut_reason: str | None = None
        self.closed = False
        home.mkdir(parents=True, exist_ok=True)

    @property
    def target(self) -> SshTarget:
        return self._target

    def env(self) -> dict[str, str]:
        """What a login there would have: its own home (state, locks), the PATH of this machine."""
        return minimal_env({"HOME": str(self.home)})

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
        self.started.append([str(a) for a in argv])
        proc = spawn_process([str(a) for a in argv], stdout=True, cwd=self.home, stdin=stdin, env=self.env())
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

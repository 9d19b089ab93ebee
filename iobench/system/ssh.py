"""The system's OpenSSH client as iobench's transport to other hosts (docs/hosts.md).

One :class:`Ssh` per host holds a control connection (``ControlMaster``) for
the whole run; every remote command and port forward goes through it, so a
command costs a round trip, not a handshake. Everything starts from argv
lists. ssh itself joins a remote command into one string for the remote
user's shell, so each argument is quoted with :func:`shlex.join` and the
remote shell splits it back into exactly that argv. The only programs iobench
starts on a host are ``python3`` (its agent, :mod:`iobench.system.hostagent`)
and what the agent starts, from argv lists.

iobench's own options come first on the command line: ssh keeps the first
value it gets for an option, so neither ``ssh_options`` nor ``~/.ssh/config``
can turn off batch mode or redirect the control socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iobench.errors import IobenchError
from iobench.system import procfs
from iobench.system.hostfs import SystemRoot
from iobench.system.process import Completed, minimal_env, run_process, spawn_process, stop_process

CONNECT_TIMEOUT_S = 10
"""Seconds ssh may take to connect and authenticate (``ConnectTimeout``)."""
COMMAND_TIMEOUT_S = 60.0
"""Seconds a remote command may take unless its caller says otherwise."""
ALIVE_INTERVAL_S = 5
"""``ServerAliveInterval``: a host that stops answering is noticed within three of these."""
CONTROL_PREFIX = "iobench-ssh-"
IOBENCH_OPTIONS: dict[str, str | None] = {
    "BatchMode": "yes",
    "ConnectTimeout": None,
    "ServerAliveInterval": None,
    "ServerAliveCountMax": None,
    "ControlPath": None,
    "ControlMaster": None,
    "ControlPersist": None,
    "ExitOnForwardFailure": "yes",
    "ClearAllForwardings": "no",
    "RequestTTY": "no",
    "StreamLocalBindMask": "0177",
}
"""The ``-o`` options iobench gives every ssh, with their value (None: it differs per connection).

A host's ``ssh_options`` may name one of them only as the matrix allows
(:mod:`iobench.system.sshoptions`: an equal value, or the user's own timeouts);
iobench then leaves its own out, since ssh keeps the first value it reads.
"""

KNOWN_HOSTS_READ_ONLY = {"StrictHostKeyChecking": "yes", "UpdateHostKeys": "no", "CheckHostIP": "no"}
"""Given before a host's own options when they name a ``UserKnownHostsFile``: ssh then never writes it
(the matrix's own values of these are checked not to write, :func:`iobench.system.sshoptions.host_ssh_options_problem`)."""

Executor = Callable[..., Completed]
Spawner = Callable[..., "subprocess.Popen[bytes]"]


class HostUnreachable(IobenchError):
    """A host cannot be reached over SSH, or stopped answering."""


@dataclass(frozen=True)
class SshTarget:
    """How to reach a host: an OpenSSH destination, its ``-o`` options and a label for messages.

    Attributes
    ----------
    destination : str
        ``user@host``, a host name, or an alias of ``~/.ssh/config``.
    options : tuple of str
        ``Key=Value`` options, each passed as ``ssh -o``.
    label : str
        How messages name the host (its ``name:``, else the destination).
    """

    destination: str
    options: tuple[str, ...] = ()
    label: str = ""

    @property
    def name(self) -> str:
        """The label, else the destination."""
        return self.label or self.destination

    def describe(self) -> str:
        """``a (root@storage-a)``: the label and, when it differs, the destination."""
        if self.label and self.label != self.destination:
            return f"{self.label} ({self.destination})"
        return self.destination

    def command(self) -> str:
        """The ``ssh`` command a user types to try the connection by hand."""
        options = [f"-o{o}" for o in self.options]
        return shlex.join(["ssh", *options, self.destination, "true"])

    def to_json(self) -> dict[str, Any]:
        """What a journal or session record keeps to reconnect later."""
        return {"destination": self.destination, "options": list(self.options), "label": self.label}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SshTarget:
        """The inverse of :meth:`to_json`."""
        return cls(
            str(data["destination"]),
            tuple(str(o) for o in data.get("options") or ()),
            str(data.get("label") or ""),
        )


def ssh_binary() -> str:
    """The ssh client: ``$IOBENCH_SSH`` (tests point it at a fake), else ``ssh`` on PATH."""
    return os.environ.get("IOBENCH_SSH") or shutil.which("ssh") or "ssh"


def ssh_env() -> dict[str, str]:
    """The environment ssh needs besides PATH: the home directory (config, keys, known hosts) and the agent."""
    keep = ("HOME", "USER", "LOGNAME", "SSH_AUTH_SOCK")
    return minimal_env({k: os.environ[k] for k in keep if os.environ.get(k)})


def remote_command(argv: Sequence[str]) -> str:
    """``argv`` as the one string ssh sends, quoted so the remote shell splits it back exactly."""
    return shlex.join([str(a) for a in argv])


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("debug")]
    return lines[-1] if lines else ""


# What ssh's last words say went wrong, by the words OpenSSH uses: (what happened, what to check).
_FAILURES = (
    (
        ("Permission denied", "Too many authentication failures", "no matching", "Authentication failed"),
        "refused the login",
        "check that this user's key is accepted there without a prompt",
    ),
    (
        ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED", "host key"),
        "could not be trusted",
        "check its host key in ~/.ssh/known_hosts (BatchMode never asks)",
    ),
)


def _failure(said: str) -> tuple[str, str]:
    """How to name a failed connection from what ssh said; 'unreachable' only when nothing else fits."""
    for words, what, check in _FAILURES:
        if any(word.lower() in said.lower() for word in words):
            return what, check
    return "is unreachable", "check the address and that key login works without a prompt"


def end_session(session: subprocess.Popen[bytes], timeout: float) -> None:
    """Close a held session's input, so the remote side lets go of what it holds, and wait for it.

    Bounded: after ``timeout`` seconds the local ssh is stopped, which makes
    sshd close the remote side's input anyway. Never raises.
    """
    if session.stdin is not None:
        with contextlib.suppress(OSError):
            session.stdin.close()
    try:
        session.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_process(session)
    if session.stdout is not None:
        with contextlib.suppress(OSError):
            session.stdout.close()


def control_dir() -> Path:
    """A fresh private folder for this run's control sockets, short enough for a socket path.

    Socket paths are limited to 107 bytes, so it sits in the temporary folder,
    not under the state directory. An ``owner`` file says which process made
    it, so a later run can close what a killed one left (:func:`close_stale_masters`).
    """
    path = Path(tempfile.mkdtemp(prefix=CONTROL_PREFIX))
    stat = procfs.process_stat(SystemRoot(), os.getpid())
    owner = {"pid": os.getpid(), "start_ticks": stat.start_ticks if stat else None}
    (path / "owner").write_text(json.dumps(owner))
    return path


def _owner_alive(folder: Path) -> bool:
    try:
        owner = json.loads((folder / "owner").read_text())
        pid, ticks = int(owner["pid"]), owner.get("start_ticks")
    except (OSError, ValueError, KeyError, TypeError):
        return False
    stat = procfs.process_stat(SystemRoot(), pid)
    return stat is not None and stat.start_ticks == ticks


def close_stale_masters(executor: Executor = run_process) -> list[str]:
    """Close the control connections (and their forwards) of this user's iobench runs that died without closing them.

    Returns
    -------
    list of str
        The control sockets closed.
    """
    closed = []
    for folder in sorted(Path(tempfile.gettempdir()).glob(f"{CONTROL_PREFIX}*")):
        # Only this user's own folders (not a link to one): anyone can make a folder of that name in
        # the shared temporary folder, with a socket of their own for ssh to talk to.
        try:
            info = folder.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or _owner_alive(folder):
            continue
        for sock in sorted(folder.glob("*.sock")):
            argv = [ssh_binary(), "-o", f"ControlPath={sock}", "-O", "exit", "iobench-stale"]
            with contextlib.suppress(IobenchError):
                executor(argv, timeout=10, env=ssh_env())
            closed.append(str(sock))
        with contextlib.suppress(OSError):
            shutil.rmtree(folder)
    return closed


@dataclass
class Ssh:
    """One host's SSH connection for a whole run: a control master, commands and forwards through it.

    Parameters
    ----------
    target
        The host.
    control_path
        The control socket (in a folder from :func:`control_dir`).
    executor, spawner
        Run a command to its end / start the master in the background
        (:func:`~iobench.system.process.run_process` and
        :func:`~iobench.system.process.spawn_process`; tests pass fakes).
    connect_timeout
        ``ConnectTimeout`` in seconds.
    """

    target: SshTarget
    control_path: Path
    executor: Executor = run_process
    spawner: Spawner = spawn_process
    connect_timeout: int = CONNECT_TIMEOUT_S
    binary: str = field(default_factory=ssh_binary)
    master: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    forwards: list[str] = field(default_factory=list, init=False)
    lost: str | None = field(default=None, init=False)

    def options(self, *, master: bool = False) -> list[str]:
        """iobench's ``-o`` options (:data:`IOBENCH_OPTIONS`) first, then the host's own.

        ssh keeps the first value it gets for an option, so an option the
        host's options name (the matrix accepts only an equal value, or the
        user's own timeouts) is left out of iobench's.
        """
        # ssh_config writes "Key=Value" or "Key Value": the keyword is what comes before either.
        given = {re.split(r"[\s=]", option.strip(), maxsplit=1)[0].lower() for option in self.target.options}
        values = {
            "ConnectTimeout": str(self.connect_timeout),
            "ServerAliveInterval": str(ALIVE_INTERVAL_S),
            "ServerAliveCountMax": "3",
            "ControlPath": str(self.control_path),
            "ControlMaster": "yes" if master else "no",
            "ControlPersist": "no",
        }
        argv = [
            item
            for key, fixed in IOBENCH_OPTIONS.items()
            if key.lower() not in given
            for item in ("-o", f"{key}={fixed if fixed is not None else values[key]}")
        ]
        if "userknownhostsfile" in given:
            # A known-hosts file the matrix names is read, never written: ~/.ssh/config may say
            # accept-new or UpdateHostKeys=yes, and ssh would append to that file what it accepts.
            argv += [
                item
                for key, value in KNOWN_HOSTS_READ_ONLY.items()
                if key.lower() not in given
                for item in ("-o", f"{key}={value}")
            ]
        return argv + [item for option in self.target.options for item in ("-o", option)]

    def argv(self, remote: Sequence[str]) -> list[str]:
        """The local argv that runs ``remote`` on the host through the control connection."""
        return [self.binary, *self.options(), self.target.destination, remote_command(remote)]

    @property
    def _stderr_path(self) -> Path:
        return self.control_path.with_suffix(".log")

    def start(self) -> None:
        """Start the control master in the background (:meth:`wait_ready` waits for it).

        Its own session runs ``cat`` on the host, reading an input this
        process holds: when the run ends or dies, that input ends, the session
        with it, and (``ControlPersist=no``) the master once the run's other
        sessions are gone. ``-N`` would keep it, and its session there, until
        someone stops it.
        """
        argv = [self.binary, *self.options(master=True), self.target.destination, "cat"]
        self.master = self.spawner(argv, env=ssh_env(), stderr=self._stderr_path, stdin=True)

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the control socket answers.

        Raises
        ------
        HostUnreachable
            Naming the host, what ssh said and what to try, when the master
            exits or does not come up within ``connect_timeout`` + 5 s.
        """
        limit = self.connect_timeout + 5.0 if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            if self.master is not None and self.master.poll() is not None:
                raise HostUnreachable(self._why_not(f"ssh exited with status {self.master.returncode}"))
            if self.control_path.exists() and self._check():
                return
            if time.monotonic() > deadline:
                self.close()
                raise HostUnreachable(self._why_not(f"no connection within {limit:g} s"))
            time.sleep(0.05)

    def open(self) -> Ssh:
        """:meth:`start` and :meth:`wait_ready`; returns self."""
        self.start()
        self.wait_ready()
        return self

    def _check(self) -> bool:
        argv = [self.binary, "-o", f"ControlPath={self.control_path}", "-O", "check", self.target.destination]
        done = self.executor(argv, timeout=10, env=ssh_env())
        return done.returncode == 0

    def _why_not(self, fallback: str) -> str:
        try:
            said = _last_line(self._stderr_path.read_text(errors="replace"))
        except OSError:
            said = ""
        what, check = _failure(said)
        return f"host {self.target.describe()} {what}: {said or fallback}; {check}: `{self.target.command()}`"

    def alive(self) -> bool:
        """Whether the control connection still stands (its master process runs)."""
        return self.master is not None and self.master.poll() is None and self.lost is None

    def lost_reason(self) -> str:
        """What ssh said when the connection went (its last line of error output), or empty."""
        try:
            return _last_line(self._stderr_path.read_text(errors="replace"))
        except OSError:
            return ""

    def run(self, argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT_S) -> Completed:
        """Run ``argv`` on the host; exit status 255 is ssh's own failure (connection lost).

        Raises
        ------
        HostUnreachable
            When the connection is gone (the master exited, or ssh answers 255
            with nothing from the remote command).
        """
        if self.master is not None and self.master.poll() is not None:
            said = self.lost_reason() or f"ssh exited with status {self.master.returncode}"
            self.lost = self.lost or f"host {self.target.describe()}: the SSH connection dropped ({said})"
            raise HostUnreachable(self.lost)
        done = self.executor(self.argv(argv), timeout=timeout, env=ssh_env())
        if done.returncode == 255 and not self._check():
            self.lost = self.lost or (
                f"host {self.target.describe()} stopped answering: {_last_line(done.stderr) or 'connection lost'}"
            )
            raise HostUnreachable(self.lost)
        return done

    def stream(self, argv: Sequence[str], *, stdin: bool = False) -> subprocess.Popen[bytes]:
        """Start ``argv`` on the host and hand back its output as a pipe (``proc.stdout``).

        With ``stdin``, its input is a pipe from here too (``proc.stdin``): the
        remote command sees it end when the caller closes it, when this
        process dies, or when the connection drops. The caller stops it with
        :func:`~iobench.system.process.stop_process`; without ``stdin`` the
        remote side ends at its next write once this end is gone.
        """
        return self.spawner(self.argv(argv), env=ssh_env(), stdout=True, stdin=stdin)

    def forward(self, local: str, remote: str) -> str:
        """Forward the Unix socket ``local`` here to the Unix socket ``remote`` on the host.

        No TCP port is opened on either side: ssh creates ``local`` with
        ``StreamLocalBindMask`` (this user only) and connects to ``remote`` as
        the SSH user, whose folder protects it there.

        Returns
        -------
        str
            The ``-L`` specification.

        Raises
        ------
        HostUnreachable
            When ssh refuses the forward (forwarding disabled on the server).
        """
        spec = f"{local}:{remote}"
        argv = [self.binary, "-o", f"ControlPath={self.control_path}", "-O", "forward", "-L", spec]
        done = self.executor([*argv, self.target.destination], timeout=30, env=ssh_env())
        if done.returncode != 0:
            raise HostUnreachable(
                f"host {self.target.describe()}: ssh refused to forward a socket to {remote}: "
                f"{_last_line(done.stderr) or f'status {done.returncode}'}; the server must allow it "
                "(AllowStreamLocalForwarding yes, the default, in sshd_config)"
            )
        self.forwards.append(spec)
        return spec

    def close(self) -> None:
        """Close the control connection and with it every forward; bounded in time, never raises."""
        if self.master is not None and self.master.poll() is None:
            argv = [
                self.binary,
                "-o",
                f"ControlPath={self.control_path}",
                "-O",
                "exit",
                self.target.destination,
            ]
            with contextlib.suppress(IobenchError):
                self.executor(argv, timeout=10, env=ssh_env())
            try:
                self.master.wait(timeout=5)
            except subprocess.TimeoutExpired:
                stop_process(self.master)
        if self.master is not None and self.master.stdin is not None:
            with contextlib.suppress(OSError):
                self.master.stdin.close()
        self.forwards.clear()
        for path in (self.control_path, self._stderr_path):
            with contextlib.suppress(OSError):
                path.unlink()

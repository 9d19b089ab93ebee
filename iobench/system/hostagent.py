"""A host's agent (:mod:`iobench.agent`), started over its connection and spoken to for the whole run.

:class:`HostAgent` sends the agent's sources through the session's input
(nothing is installed on the host; the bootstrap runs them from memory),
checks its hello, then carries one request at a time from any thread. Every
answer is bounded in size (:data:`~iobench.agent.protocol.MAX_MESSAGE`) and
time (each call's timeout): a host that answers endlessly, with garbage or
not at all fails itself (:class:`~iobench.system.ssh.HostUnreachable`,
naming it), its agent is stopped, and other hosts go on.

The agent holds what the run holds on the host (disk locks, fio's server);
closing its input (:meth:`HostAgent.close`, this process dying, the
connection dropping) makes it let go of everything and exit.
"""

from __future__ import annotations

import subprocess
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

from iobench.agent import OLD_PYTHON_EXIT, OLDEST_PYTHON, command, payload
from iobench.agent.protocol import AgentError, Channel, ProtocolError
from iobench.errors import IobenchError
from iobench.system.ssh import COMMAND_TIMEOUT_S, HostUnreachable, SshTarget, end_session

START_TIMEOUT_S = 30.0
"""Seconds a host's agent may take to start and greet."""
_PAYLOAD = payload()


class AgentMissing(HostUnreachable):
    """The host has no python3 new enough to run the agent."""


class AgentRefused(IobenchError):
    """The agent answered a request with an error (what it said, naming the host)."""


class Launcher(Protocol):
    """What starts a host's agent: anything that runs an argv there with a pair of pipes (an SSH connection)."""

    @property
    def target(self) -> SshTarget:
        """The host."""

    def stream(self, argv: Sequence[str], *, stdin: bool = False) -> subprocess.Popen[bytes]:
        """Start argv on the host, its input and output pipes here."""


class AgentCaller(Protocol):
    """Whatever carries requests to one host's agent: :class:`HostAgent`, or a fleet's host."""

    @property
    def target(self) -> SshTarget:
        """The host."""

    def call(self, op: str, *, timeout: float = COMMAND_TIMEOUT_S, **args: Any) -> Any:
        """One request; its answer's value."""


class HostAgent:
    """One host's agent for a run (see the module's description)."""

    def __init__(self, transport: Launcher, root: str | None = None) -> None:
        self.transport = transport
        self.root = root
        self.session: subprocess.Popen[bytes] | None = None
        self.channel: Channel | None = None
        self.broken: str | None = None
        self.asked: Counter[str] = Counter()
        """Requests made, by kind (what a host's run costs it)."""
        self._lock = threading.Lock()

    @property
    def target(self) -> SshTarget:
        """The host."""
        return self.transport.target

    def _who(self) -> str:
        return f"host {self.target.describe()}"

    def start(self, timeout: float = START_TIMEOUT_S) -> HostAgent:
        """Start the agent and read its hello; returns ``self``.

        Raises
        ------
        AgentMissing
            When the host has no python3, or one older than the agent needs.
        HostUnreachable
            When the agent does not greet in time or greets wrongly.
        """
        session = self.transport.stream(command(len(_PAYLOAD), self.root), stdin=True)
        self.session = session
        assert session.stdin is not None and session.stdout is not None
        try:
            session.stdin.write(_PAYLOAD)
            session.stdin.flush()
            channel = Channel(session.stdout.fileno(), session.stdin.fileno())
            channel.greet(timeout)
        except (OSError, ProtocolError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else str(exc)
            self.close(timeout=2)
            code = session.returncode
            oldest = ".".join(map(str, OLDEST_PYTHON))
            if code in (126, 127):  # the shell found no python3, or one it may not run
                raise AgentMissing(
                    f"{self._who()}: python3 is not installed (iobench needs {oldest} or newer there)"
                ) from None
            if code == OLD_PYTHON_EXIT:
                raise AgentMissing(
                    f"{self._who()}: its python3 is older than {oldest}; install {oldest} or newer"
                ) from None
            raise HostUnreachable(f"{self._who()}: its agent did not start: {why}") from None
        self.channel = channel
        return self

    @property
    def hello(self) -> dict[str, Any]:
        """What the agent said first (its pid, python, the host's boot id)."""
        return {} if self.channel is None or self.channel.hello is None else self.channel.hello

    def call(self, op: str, *, timeout: float = COMMAND_TIMEOUT_S, **args: Any) -> Any:
        """Send one request and return its answer's value.

        Raises
        ------
        HostUnreachable
            When the agent is gone, breaks the protocol or does not answer
            within ``timeout`` s (the agent is stopped; later calls fail the same).
        AgentRefused
            When the agent could not do it (its words).
        """
        with self._lock:
            if self.broken is not None:
                raise HostUnreachable(self.broken)
            if self.channel is None:
                raise HostUnreachable(f"{self._who()}: its agent is not running")
            self.asked[op] += 1
            try:
                return self.channel.call(op, args, timeout)
            except AgentError as exc:
                raise AgentRefused(f"{self._who()}: {exc}") from None
            except ProtocolError as exc:
                self.broken = f"{self._who()}: its agent failed ({op}): {exc}"
        self.close(timeout=2)
        raise HostUnreachable(self.broken)

    def alive(self) -> bool:
        """Whether the agent still runs (no round trip)."""
        return self.broken is None and self.session is not None and self.session.poll() is None

    def close(self, timeout: float = 10.0) -> None:
        """Close the agent's input (it lets go of everything and exits) and wait for it; bounded, never raises."""
        session = self.session
        if session is None:
            return
        end_session(session, timeout)
        self.channel = None


__all__ = ["AgentCaller", "AgentMissing", "AgentRefused", "HostAgent"]

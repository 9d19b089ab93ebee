"""One fio server per host and run, reachable by the run's user only, living as long as the host's agent.

fio's server has no authentication: whoever can connect to it can make it
run any job as the server's user (usually root), ``exec_prerun`` included.
So it never listens on TCP. The host's agent (:mod:`iobench.agent.serve`)
starts it on a Unix socket in a folder of mode 0700 it makes on the host
(``$TMPDIR/iobench-<token>.XXXXXXXX``, falling back to ``/tmp``); fio creates
its socket with mode 0777, so only that folder keeps other users out. The
server's working directory is that folder. This machine reaches the socket
through an OpenSSH socket-to-socket forward whose local end ssh creates with
mode 0600 in the run's private control folder (:func:`~iobench.system.ssh.control_dir`).

When the agent's input ends — the run closes it, the run dies, the SSH
connection drops — the agent stops the server and every process under it
and removes the folder. The folder holds a ``pid`` file (the server's pid
and the host's boot id) so that a later run can stop a server whose agent
outlived a crash (:func:`stop_stale`): it kills a pid only when that
process's command line names the folder, on the same boot.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

from iobench.errors import IobenchError
from iobench.system import procfs
from iobench.system.hostagent import AgentCaller, AgentRefused
from iobench.system.hostfs import SystemRoot

START_TIMEOUT_S = 20.0
"""Seconds a server may take to create its socket."""
SOCKET = "fio.sock"

_TOKEN = re.compile(
    r"^(?P<machine>[0-9a-f]{12})-(?P<boot>[0-9a-f]{8})-(?P<pid>\d+)-(?P<ticks>\d+)-[0-9a-f]{6}$"
)
_FOLDER = re.compile(r"^iobench-(?P<token>[0-9a-f-]+)\.[A-Za-z0-9_]{6,8}$")


class ServerError(IobenchError):
    """A host's fio server could not be started."""


# --- tokens: which run started a server -------------------------------------------------


def _this_machine() -> tuple[str, str]:
    """This machine's id and boot id, short (``/etc/machine-id``, the kernel's boot id)."""
    system = SystemRoot()
    machine = (system.read_text("etc/machine-id") or "").replace("-", "")[:12]
    boot = (system.read_text("proc/sys/kernel/random/boot_id") or "").replace("-", "")[:8]
    return machine.ljust(12, "0"), boot.ljust(8, "0")


def server_token() -> str:
    """A name for the servers this process starts: machine, boot, pid and its start time, and a nonce."""
    machine, boot = _this_machine()
    stat = procfs.process_stat(SystemRoot(), os.getpid())
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
    stat = procfs.process_stat(SystemRoot(), int(match["pid"]))
    return stat is None or stat.start_ticks != int(match["ticks"])


# --- a server --------------------------------------------------------------------------------


@dataclass
class FioServer:
    """A host's fio server, held by its agent.

    Attributes
    ----------
    token : str
        Names the run that started it (:func:`server_token`); part of the folder's name.
    pid : int
        The server's pid on the host.
    folder : str
        Its private folder on the host (mode 0700, its working directory).
    boot_id : str
        The host's boot id when it started.
    agent : AgentCaller
        The host's agent, which started it and stops it.
    local_socket : str or None
        The forward's end on this machine, once forwarded.
    """

    token: str
    pid: int
    folder: str
    boot_id: str
    agent: AgentCaller
    local_socket: str | None = None

    @property
    def socket(self) -> str:
        """The server's socket on the host."""
        return f"{self.folder}/{SOCKET}"

    def alive(self) -> bool:
        """Whether the agent still holds a running server (one round trip)."""
        try:
            return self.agent.call("server_alive") is True
        except IobenchError:
            return False

    def stop(self) -> None:
        """Stop the server's tree and remove its folder on the host; never raises."""
        with contextlib.suppress(IobenchError):
            self.agent.call("stop_fio", timeout=60)
        if self.local_socket is not None:
            Path(self.local_socket).unlink(missing_ok=True)


def start_server(agent: AgentCaller, fio: str, token: str, *, timeout: float = START_TIMEOUT_S) -> FioServer:
    """Start a host's fio server in a private folder, held by its agent.

    Raises
    ------
    ServerError
        With what the host said, when the server did not come up.
    """
    try:
        answer = agent.call("serve_fio", fio=fio, token=token, timeout=timeout + 10)
        return FioServer(token, int(answer["pid"]), str(answer["folder"]), str(answer.get("boot", "")), agent)
    except AgentRefused as exc:
        said = str(exc).split(": ", 1)[-1]
    except (KeyError, TypeError, ValueError):
        said = "its agent's answer made no sense"
    raise ServerError(
        f"fio --server did not start: {said}; try `{fio} --server=sock:/tmp/x.sock` there by hand"
    )


# --- servers a crashed run left ------------------------------------------------------------


@dataclass(frozen=True)
class Leftover:
    """A private folder on the host, as the agent found it."""

    folder: str
    token: str
    pid: int | None
    boot_id: str
    cmdline: str


def _leftovers(agent: AgentCaller) -> tuple[list[Leftover], str]:
    """The folders the agent listed, and the host's boot id now."""
    answer = agent.call("leftovers")
    found: list[Leftover] = []
    for item in answer.get("folders", ()):
        with contextlib.suppress(KeyError, TypeError, ValueError):
            folder, words, cmdline = (
                str(item["folder"]),
                [str(w) for w in item["pid_line"]],
                str(item["cmdline"]),
            )
            match = _FOLDER.match(os.path.basename(folder))
            if match is not None:
                pid = int(words[0]) if words and words[0].isdigit() else None
                found.append(
                    Leftover(folder, match["token"], pid, words[1] if len(words) > 1 else "", cmdline)
                )
    return found, str(answer.get("boot", ""))


def _ours(left: Leftover) -> bool:
    """Whether the folder's pid runs that folder's server."""
    return left.pid is not None and f"--server=sock:{left.folder}/{SOCKET}" in left.cmdline


def stop_stale(agent: AgentCaller) -> list[str]:
    """Stop the servers of this machine's runs that are gone, and say what was done.

    A server is killed only when its pid file's process still runs with the
    folder's socket on its command line, on the boot the pid file names;
    anything else keeps running, and the note says why.

    Returns
    -------
    list of str
        One note per leftover folder handled.
    """
    found, boot = _leftovers(agent)
    notes = []
    for left in found:
        if not token_stale(left.token):
            continue
        if left.boot_id and boot and left.boot_id != boot:
            notes.append(
                f"removed {left.folder} of a run from before the host's last boot (nothing of it runs)"
            )
        elif _ours(left) and left.pid is not None:
            agent.call("kill", pids=[left.pid], timeout=60)
            notes.append(f"stopped the fio server (pid {left.pid}) a killed run left in {left.folder}")
        elif left.pid is not None and left.cmdline:
            notes.append(
                f"left pid {left.pid} alone: {left.folder}/pid names it, but it runs "
                f"{left.cmdline[:80]!r}, not that folder's server; removed the folder"
            )
        agent.call("remove", folder=left.folder)
    return notes


def stop_by_pid(agent: AgentCaller, pid: int, folder: str) -> bool:
    """Stop a server of this run through a fresh agent when the one that held it is gone.

    Only when the pid still runs that folder's server. Returns whether it was there to stop.
    """
    found, _ = _leftovers(agent)
    stopped = False
    for left in found:
        if left.folder != folder:
            continue
        if left.pid == pid and _ours(left):
            agent.call("kill", pids=[pid], timeout=60)
            stopped = True
        agent.call("remove", folder=folder)
    return stopped


__all__ = [
    "FioServer",
    "Leftover",
    "ServerError",
    "server_token",
    "start_server",
    "stop_by_pid",
    "stop_stale",
    "token_stale",
]

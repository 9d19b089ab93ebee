"""``hosts:`` of the matrix (SPEC §11): the machines a sweep runs on through fio's client/server.

Only the shape and the words are checked here; whether a host answers, runs
the same fio and may be written is the preflight's job
(:mod:`iobench.system.hosts`), before anything runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iobench.matrix.model import Target

#: What a host's ``name`` may be: it names files (job files, journals), so no '/' nor spaces.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

# ssh -o options a matrix may not set: iobench owns the connection (control socket, batch
# mode, no tty), and a matrix is data, not code (nothing that runs a local program).
REFUSED_SSH_OPTIONS = {
    "batchmode": "iobench always connects with BatchMode=yes (no password prompts)",
    "connecttimeout": "iobench sets ConnectTimeout itself (10 s)",
    "controlmaster": "iobench keeps one control connection per host itself",
    "controlpath": "iobench keeps one control connection per host itself",
    "controlpersist": "iobench keeps one control connection per host itself",
    "forkafterauthentication": "iobench keeps the connection in the foreground to stop it",
    "sessiontype": "iobench runs its own remote commands",
    "remotecommand": "iobench runs its own remote commands",
    "requesttty": "remote commands run without a terminal",
    "stdinnull": "iobench sets the connection's input itself",
    "clearallforwardings": "iobench reaches the fio server through a forward",
    "exitonforwardfailure": "iobench checks its forwards itself",
    "localcommand": "it runs a program on this machine (a matrix is data, not code)",
    "permitlocalcommand": "it runs a program on this machine (a matrix is data, not code)",
    "proxycommand": "it runs a program on this machine; use ProxyJump, or put it in ~/.ssh/config",
    "knownhostscommand": "it runs a program on this machine; put it in ~/.ssh/config",
    "match": "Match blocks belong in ~/.ssh/config",
    "include": "Include belongs in ~/.ssh/config",
}
_OPTION = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\s*[= ]\s*(\S.*)$")
_DESTINATION = re.compile(r"^[^\s\-][^\s]*$")


@dataclass(frozen=True)
class Host:
    """A host of the matrix, checked for form.

    Attributes
    ----------
    name : str or None
        The frame's ``host`` value; None until the preflight reads the host's
        hostname (a host without ``name:``).
    ssh : str
        The OpenSSH destination (``user@host``, an alias of ``~/.ssh/config``).
    ssh_options : tuple of str
        Each passed as ``ssh -o OPTION``.
    targets : tuple of Target or None
        The host's own targets (paths on that host); None: the matrix's.
    server : str or None
        The Unix socket of an fio server already running on the host (iobench
        then starts none and reaches that socket through its SSH forward).
    index : int
        Position in ``hosts:``.
    """

    name: str | None
    ssh: str
    ssh_options: tuple[str, ...]
    targets: tuple[Target, ...] | None
    server: str | None
    index: int

    @property
    def label(self) -> str:
        """How messages name the host: its ``name``, else its ssh destination."""
        return self.name or self.ssh


def ssh_option_problem(option: str) -> tuple[str, str] | None:
    """Why an ``ssh_options`` entry is refused, and what to do; None when it is fine."""
    match = _OPTION.match(option.strip())
    if option.startswith("-") or match is None:
        return (
            f"ssh option {option!r} is not `Key=Value`",
            "write options as ssh_config keywords, e.g. `Port=2222`, `IdentityFile=~/.ssh/lab`",
        )
    key = match.group(1).lower()
    if key in REFUSED_SSH_OPTIONS:
        return f"ssh option `{match.group(1)}` is refused: {REFUSED_SSH_OPTIONS[key]}", "remove it"
    return None


def destination_problem(destination: str) -> str | None:
    """Why an ``ssh:`` destination is refused (it would read as an option, or holds spaces)."""
    if not _DESTINATION.match(destination):
        return "an ssh destination is one word that does not start with '-' (e.g. root@storage-a)"
    return None


def parse_server(text: str) -> str:
    """An fio server's Unix socket on the host: an absolute path, as ``fio --server=sock:PATH`` took it.

    A TCP address is refused: fio's server has no authentication, so a server
    on a TCP port is open to anyone who can reach the port.

    Raises
    ------
    ValueError
        Saying what form is expected.
    """
    path = text.strip()
    if path.startswith("sock:"):
        path = path.removeprefix("sock:")
    if not path.startswith("/") or len(path.encode()) > 100 or any(c.isspace() for c in path) or ":" in path:
        raise ValueError(
            f"server {text!r} is not the absolute path of an fio server's Unix socket on the host "
            "(e.g. /run/fio/fio.sock, as started with `fio --server=sock:/run/fio/fio.sock`); "
            "a TCP server is refused: fio's server has no authentication"
        )
    return path

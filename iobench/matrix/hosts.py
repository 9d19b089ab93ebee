"""``hosts:`` of the matrix (docs/hosts.md): the machines a sweep runs on through fio's client/server.

Only the shape and the words are checked here (``ssh:`` and ``ssh_options`` by
:mod:`iobench.system.sshoptions`, which checks a settings journal's host too);
whether a host answers, runs the same fio and may be written is the
preflight's job (:mod:`iobench.system.fleet`), before anything runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from iobench.matrix.targets import Target

#: What a host's ``name`` may be: it names files (job files, journals), so no '/' nor spaces.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# A server's socket: a path ssh's forward and the host's commands take as it is (no ':', blank, quote).
_SOCKET = re.compile(r"^/[A-Za-z0-9_./+@,-]*$")


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
    if not _SOCKET.match(path) or len(path.encode()) > 100:
        raise ValueError(
            f"server {text!r} is not the absolute path of an fio server's Unix socket on the host, "
            "of letters, digits and '_./+@,-' (e.g. /run/fio/fio.sock, as started with "
            "`fio --server=sock:/run/fio/fio.sock`); a TCP server is refused: fio's server has no "
            "authentication"
        )
    return path

"""The agent: everything iobench does on a machine's side, in one stdlib-only Python program.

It reads sysfs and procfs (every reader takes a root, so it runs on fake
trees), the targets' state, holds each disk's lock, writes and reads back
settings, watches fio's job processes, samples counters and starts fio's
server; it speaks :mod:`iobench.agent.protocol` over a pair of streams.

On a host it is sent over the connection each run and started by
:data:`BOOTSTRAP` (``python3 -c``): the bootstrap reads :func:`payload`
(the agent's modules' sources, length given on its command line) from its
input and runs them from memory, so nothing is installed on the host and
nothing is left there. Here it runs as ``python3 -m iobench.agent``. The
launcher is anything that gives it a pair of streams: nothing in it
assumes SSH.

The package imports nothing from iobench outside itself, uses the standard
library only and Python 3.9 syntax (:data:`OLDEST_PYTHON`): hosts run it.
"""

from __future__ import annotations

import json
import os

OLDEST_PYTHON = (3, 9)
"""The oldest python3 a host may have (Debian 11 ships 3.9, RHEL 9 3.9)."""
OLD_PYTHON_EXIT = 4
"""The bootstrap's exit status on a python3 older than :data:`OLDEST_PYTHON`."""
MODULES = ("protocol", "probe", "serve")
"""The agent's modules, in the order they are loaded (each imports only those before it)."""

_OLDEST = f"{OLDEST_PYTHON[0]},{OLDEST_PYTHON[1]}"
BOOTSTRAP = (
    "import os,sys,json,types\n"
    f"if sys.version_info<({_OLDEST}):sys.exit({OLD_PYTHON_EXIT})\n"
    "n=int(sys.argv[1]);b=b''\n"
    "while len(b)<n:\n"
    " c=os.read(0,n-len(b))\n"
    " if not c:sys.exit(3)\n"
    " b+=c\n"
    "for k,s in json.loads(b.decode()):\n"
    " m=types.ModuleType(k);m.__path__=[];sys.modules[k]=m;exec(compile(s,'<'+k+'>','exec'),m.__dict__)\n"
    "sys.modules['iobench.agent.serve'].main(sys.argv[2:])\n"
)
"""What ``python3 -c`` runs on a host: read the agent's sources (their length is ``argv[1]``) and serve."""


def payload() -> bytes:
    """The agent's modules as the bootstrap reads them: JSON ``[[name, source], ...]``, bytes."""
    here = os.path.dirname(os.path.abspath(__file__))
    modules = [["iobench", ""], ["iobench.agent", ""]]
    for name in MODULES:
        with open(os.path.join(here, name + ".py"), encoding="utf-8") as source:
            modules.append(["iobench.agent." + name, source.read()])
    return json.dumps(modules).encode()


def command(size: int, root: str | None = None) -> list[str]:
    """The argv that starts the agent on a host, given the payload's size (``root``: a fake tree's, for tests)."""
    return ["python3", "-I", "-S", "-B", "-c", BOOTSTRAP, str(size)] + (
        [] if root is None else ["--root", root]
    )

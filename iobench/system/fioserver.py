"""One fio server per host and run, reachable by the run's user only, living as long as its SSH session.

fio's server has no authentication: whoever can connect to it can make it
run any job as the server's user (usually root), ``exec_prerun`` included.
So it never listens on TCP. Each server listens on a Unix socket in a folder
of mode 0700 that the run makes on the host (``$TMPDIR/iobench-<token>.XXXXXX``,
falling back to ``/tmp``); fio creates its socket with mode 0777, so only
that folder keeps other users out. The server's working directory is that
folder, removed with it. This machine reaches the socket through an OpenSSH
socket-to-socket forward whose local end ssh creates with mode 0600 in the
run's private control folder (:func:`~iobench.system.ssh.control_dir`).

The server is started by :data:`SERVE_SCRIPT` inside an SSH session that the
run holds open: the script waits on its standard input, and when that ends —
the run closes it, the run dies, the SSH connection drops — it stops the
server and every process under it and removes the folder. A server whose
session is gone exits by itself. The folder holds a ``pid`` file (the
server's pid and the host's boot id) so that a later run can stop a server
whose session outlived a crash (:func:`stop_stale`): it kills a pid only when
that process's command line names the folder, on the same boot.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import select
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from iobench.errors import IobenchError
from iobench.system import procfs
from iobench.system.hostfs import SystemRoot
from iobench.system.process import stop_process
from iobench.system.ssh import Transport, end_session, first_line

START_TIMEOUT_S = 20.0
"""Seconds a server may take to create its socket."""
STOP_WAIT_S = 3.0
"""Seconds between SIGTERM and SIGKILL when a server's processes are stopped."""
FOLDER_PREFIX = "iobench-"
SOCKET = "fio.sock"

# Every process below $1 (and $1), one pid a line, from each process's status file. `cat` goes on
# past a process that ends while the list is read; awk alone would stop at the first.
_TREE = r"""
tree() {
  cat /proc/[0-9]*/status 2>/dev/null | awk -v root="$1" '
    /^Pid:/ { p = $2 }
    /^PPid:/ { parent[p] = $2 }
    END {
      keep[root] = 1; more = 1
      while (more) { more = 0; for (c in parent) if (!(c in keep) && (parent[c] in keep)) { keep[c] = 1; more = 1 } }
      for (c in keep) print c
    }'
}
stop_tree() {
  t=$(tree "$1"); [ -n "$t" ] || return 0
  kill -TERM $t 2>/dev/null
  i=0
  while [ "$i" -lt "$2" ]; do
    alive=
    for p in $t; do
      case "$(cat "/proc/$p/stat" 2>/dev/null)" in "" | *") Z "* | *") X "*) ;; *) alive=1; break;; esac
    done
    [ -z "$alive" ] && return 0
    sleep 0.1; i=$((i + 1))
  done
  kill -KILL $t 2>/dev/null
  return 0
}
"""

# $1: fio; $2: the run's token; $3: tenths of a second between SIGTERM and SIGKILL.
# Makes the private folder, starts the server on a socket in it, writes the pid file, prints
# "ready <pid> <folder> <boot id>" once the socket exists, then waits for its input to end and
# stops the server's whole tree. A line "exited" says the server ended on its own meanwhile.
SERVE_SCRIPT = (
    _TREE
    + r"""
fio=$1; token=$2; grace=$3
umask 077
base=${TMPDIR:-/tmp}
case "$base" in /*) ;; *) base=/tmp;; esac
[ "${#base}" -gt 48 ] && base=/tmp
dir=$(mktemp -d "$base/iobench-$token.XXXXXX") || { echo "error cannot make a private folder in $base"; exit 1; }
cd "$dir" || exit 1
boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)
"$fio" --server="sock:$dir/fio.sock" </dev/null >server.log 2>&1 &
pid=$!
printf '%s %s\n' "$pid" "$boot" >pid
reader=
finish() {
  trap '' HUP INT TERM PIPE
  [ -n "$reader" ] && kill "$reader" 2>/dev/null
  stop_tree "$pid" "$grace"
  cd / && rm -rf -- "$dir"
}
trap finish EXIT
trap 'exit 0' HUP INT TERM PIPE
i=0
while [ ! -S fio.sock ]; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "error fio --server exited: $(tail -n 3 server.log | tr '\n' ' ')"; exit 1
  fi
  i=$((i + 1)); [ "$i" -gt 1000 ] && { echo "error fio --server made no socket within 20 s"; exit 1; }
  sleep 0.02
done
printf 'ready %s %s %s\n' "$pid" "$dir" "$boot"
# Nothing polls for the whole run: a reader ends this shell when the input ends, and the shell
# waits for the server (a background list reads /dev/null unless told: the input goes through fd 3).
exec 3<&0
( cat <&3 >/dev/null; kill -TERM $$ 2>/dev/null ) &
reader=$!
exec 3<&-
wait "$pid"
echo exited
wait "$reader"
"""
)

# Leftover folders of this user: "D <folder>", its pid file's line, the command line of that
# pid (NULs as spaces); then "B <boot id>".
STALE_SCRIPT = r"""
seen=' '
for d in "${TMPDIR:-/tmp}"/iobench-*.?????? /tmp/iobench-*.??????; do
  [ -d "$d" ] && [ -O "$d" ] && [ ! -L "$d" ] || continue
  case "$seen" in *" $d "*) continue;; esac
  seen="$seen$d "
  line=$(head -n 1 "$d/pid" 2>/dev/null)
  printf 'D %s\n%s\n' "$d" "$line"
  set -- $line
  if [ -n "$1" ]; then tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null; fi
  echo
done
printf 'B %s\n' "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
"""

# $1: tenths of a second to wait; $2: a pid; $3: the folder. Stops that pid's tree, then removes the folder.
STOP_SCRIPT = _TREE + r"""stop_tree "$2" "$1"; rm -rf -- "$3"; exit 0"""

_TOKEN = re.compile(
    r"^(?P<machine>[0-9a-f]{12})-(?P<boot>[0-9a-f]{8})-(?P<pid>\d+)-(?P<ticks>\d+)-[0-9a-f]{6}$"
)
_FOLDER = re.compile(r"^iobench-(?P<token>[0-9a-f-]+)\.[A-Za-z0-9]{6}$")


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
    """A host's fio server, held by its SSH session.

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
    session : subprocess.Popen
        The SSH session holding it (its input ending stops the server).
    local_socket : str or None
        The forward's end on this machine, once forwarded.
    """

    token: str
    pid: int
    folder: str
    boot_id: str
    session: subprocess.Popen[bytes] = field(repr=False)
    local_socket: str | None = None
    exited: bool = False

    @property
    def socket(self) -> str:
        """The server's socket on the host."""
        return f"{self.folder}/{SOCKET}"

    def alive(self) -> bool:
        """Whether the session still holds a running server (no round trip: what the session said so far)."""
        if self.session.poll() is not None:
            return False
        if not self.exited and self.session.stdout is not None:
            self.exited = "exited" in _available(self.session.stdout)
        return not self.exited

    def stop(self) -> None:
        """End the session: the host stops the server's tree and removes its folder. Bounded; never raises."""
        end_session(self.session, STOP_WAIT_S + 5)
        if self.local_socket is not None:
            Path(self.local_socket).unlink(missing_ok=True)


def _available(pipe: object) -> str:
    """What a session's output holds now, without waiting."""
    fileno = getattr(pipe, "fileno", None)
    if fileno is None:
        return ""
    fd = fileno()
    text = ""
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        text += chunk.decode(errors="replace")
    return text


def start_server(session: Transport, fio: str, token: str, *, timeout: float = START_TIMEOUT_S) -> FioServer:
    """Start a host's fio server in a private folder, inside an SSH session held open here.

    Raises
    ------
    ServerError
        With what the host said, when the server did not come up.
    """
    argv = ["sh", "-c", SERVE_SCRIPT, "sh", fio, token, str(int(STOP_WAIT_S * 10))]
    held = session.stream(argv, stdin=True)
    line = first_line(held, timeout)
    words = line.split()
    if len(words) >= 3 and words[0] == "ready" and words[1].isdigit():
        return FioServer(token, int(words[1]), words[2], words[3] if len(words) > 3 else "", held)
    with contextlib.suppress(OSError):
        if held.stdin is not None:
            held.stdin.close()
    stop_process(held)
    said = line.removeprefix("error ").strip() if line else f"no answer within {timeout:g} s"
    raise ServerError(
        f"fio --server did not start: {said}; try `{fio} --server=sock:/tmp/x.sock` there by hand"
    )


# --- servers a crashed run left ------------------------------------------------------------


@dataclass(frozen=True)
class Leftover:
    """A folder of a server on the host, as :data:`STALE_SCRIPT` found it."""

    folder: str
    token: str
    pid: int | None
    boot_id: str
    cmdline: str


def _leftovers(text: str) -> tuple[list[Leftover], str]:
    """The folders a scan listed, and the host's boot id now."""
    found: list[Leftover] = []
    boot = ""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("B "):
            boot = line[2:].strip()
        elif line.startswith("D ") and i + 2 < len(lines):
            folder, pid_line, cmdline = line[2:], lines[i + 1].split(), lines[i + 2].strip()
            i += 2
            match = _FOLDER.match(os.path.basename(folder))
            if match is not None:
                pid = int(pid_line[0]) if pid_line and pid_line[0].isdigit() else None
                found.append(
                    Leftover(folder, match["token"], pid, pid_line[1] if len(pid_line) > 1 else "", cmdline)
                )
        i += 1
    return found, boot


def stop_stale(session: Transport) -> list[str]:
    """Stop the servers of this machine's runs that are gone, and say what was done.

    A server is killed only when its pid file's process still runs with the
    folder's socket on its command line, on the boot the pid file names;
    anything else keeps running, and the note says why.

    Returns
    -------
    list of str
        One note per leftover folder handled.
    """
    done = session.run(["sh", "-c", STALE_SCRIPT])
    found, boot = _leftovers(done.stdout)
    notes = []
    grace = str(int(STOP_WAIT_S * 10))
    for left in found:
        if not token_stale(left.token):
            continue
        ours = left.pid is not None and f"--server=sock:{left.folder}/{SOCKET}" in left.cmdline
        if left.boot_id and boot and left.boot_id != boot:
            notes.append(
                f"removed {left.folder} of a run from before the host's last boot (nothing of it runs)"
            )
            session.run(["rm", "-rf", "--", left.folder])
        elif ours and left.pid is not None:
            session.run(["sh", "-c", STOP_SCRIPT, "sh", grace, str(left.pid), left.folder], timeout=60)
            notes.append(f"stopped the fio server (pid {left.pid}) a killed run left in {left.folder}")
        elif left.pid is not None and left.cmdline:
            notes.append(
                f"left pid {left.pid} alone: {left.folder}/pid names it, but it runs "
                f"{left.cmdline[:80]!r}, not that folder's server; removed the folder"
            )
            session.run(["rm", "-rf", "--", left.folder])
        else:
            session.run(["rm", "-rf", "--", left.folder])
    return notes


def stop_by_pid(session: Transport, pid: int, folder: str) -> bool:
    """Stop a server of this run through a fresh session when its own session is gone.

    Only when the pid still runs that folder's server. Returns whether it was there to stop.
    """
    done = session.run(["sh", "-c", STALE_SCRIPT])
    found, _ = _leftovers(done.stdout)
    for left in found:
        if left.folder == folder and left.pid == pid and f"--server=sock:{folder}/{SOCKET}" in left.cmdline:
            grace = str(int(STOP_WAIT_S * 10))
            session.run(["sh", "-c", STOP_SCRIPT, "sh", grace, str(pid), folder], timeout=60)
            return True
    if any(left.folder == folder for left in found):
        session.run(["rm", "-rf", "--", folder])
    return False


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

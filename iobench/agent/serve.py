"""The agent's serve loop: one request at a time from its input, one answer each on its output.

What a request may do, by ``op`` (arguments by name):

- reading: ``snapshot``, ``sample``, ``edge``, ``states``, ``looks``,
  ``processes``, ``exits``, file questions (``read``, ``exists``, ``is_dir``,
  ``realpath``, ``list_dir``, ``stat``, ``writable``, ``folder``), the
  guard's (``claimed``, ``readable``) and ``programs`` (fio's version,
  numactl, fio's NUMA support);
- changing: ``write`` (one ``write(2)`` of a setting), ``sync``, ``lock`` /
  ``unlock`` (each disk's ``flock``, held by this process), ``kill`` (a
  process tree: SIGTERM, a grace, SIGKILL), ``run`` (a probe tool, argv only,
  bounded output and time), ``serve_fio`` (fio's server on a socket in a
  private 0700 folder), ``leftovers`` and ``remove`` (what a killed run left).

When its input ends (the controller closed it, died, or the connection
dropped) or it is told to stop by a signal, it releases its locks, stops the
fio server it started with everything under it, removes that server's folder
and exits: nothing is left behind.

This module is sent to hosts: standard library only, Python 3.9 syntax.
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat as statmod
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from types import FrameType
from typing import Any

from iobench.agent import probe
from iobench.agent.protocol import HELLO, VERSION, ProtocolError, Reader, write_message

MAX_OUTPUT = 64 << 10
"""Bytes of a program's output (each stream) an answer carries."""
GRACE_S = 3.0
"""Seconds between SIGTERM and SIGKILL when a process tree is stopped."""
SERVER_START_S = 20.0
"""Seconds fio's server may take to create its socket."""
FOLDER_PREFIX = "iobench-"
_SBIN = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Refused(Exception):
    """A request that cannot be done; its words go back as the answer's error."""


def _alive(root: str, pid: int) -> bool:
    """Whether a process runs (a zombie or a gone one does not)."""
    data = probe.read_bytes(probe.at(root, f"/proc/{pid}/stat"), 4096)
    if not data or b")" not in data:
        return False
    return data.rpartition(b")")[2].split()[:1] not in ([b"Z"], [b"X"])


def stop_tree(root: str, pids: Iterable[int], grace: float = GRACE_S) -> list[int]:
    """SIGTERM every process in and below ``pids``, wait until none runs (up to ``grace`` s), then SIGKILL."""
    doomed: set[int] = set()
    for pid in pids:
        if pid > 1:
            doomed.update(probe.descendants(root, pid))
    doomed.discard(os.getpid())
    left = sorted(p for p in doomed if p > 1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while left and time.monotonic() < deadline:
        left = [p for p in left if _alive(root, p)]
        if left:
            time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def _lock_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "iobench", "locks")


def _private_base() -> str:
    """Where private folders go: ``$TMPDIR`` when absolute and short (a socket path is short), else /tmp."""
    base = os.environ.get("TMPDIR", "")
    return base if base.startswith("/") and len(base) <= 48 else "/tmp"


def _bounded(data: bytes | None) -> str:
    return (data or b"")[:MAX_OUTPUT].decode("utf-8", "replace")


def run_program(argv: Sequence[str], timeout: float, path: str | None = None) -> dict[str, Any]:
    """Run argv (never a shell); its exit status and bounded output. 127 when it is not there."""
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    if path is not None:
        env["PATH"] = path
    try:
        proc = subprocess.Popen(
            [str(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
    except OSError:
        return {"returncode": 127, "stdout": "", "stderr": f"{argv[0]}: not found", "timed_out": False}
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    return {
        "returncode": proc.returncode,
        "stdout": _bounded(out),
        "stderr": _bounded(err),
        "timed_out": timed_out,
    }


class Agent:
    """One agent's state: its root, locks held and the fio server it started."""

    def __init__(self, root: str = "/") -> None:
        self.root = root
        self.locks: dict[str, int] = {}
        self.server: subprocess.Popen[bytes] | None = None
        self.folder: str | None = None

    # --- files ------------------------------------------------------------------------

    def path(self, path: str) -> str:
        """A sysfs or procfs path of the machine under the root (others as given)."""
        path = str(path)
        if not path.startswith("/"):
            raise Refused(f"not an absolute path: {path!r}")
        if path.startswith(("/sys/", "/proc/")) or path in ("/sys", "/proc"):
            return probe.at(self.root, path)
        return path

    def op_read(self, path: str, limit: int = probe.MAX_FILE) -> dict[str, Any]:
        try:
            fd = os.open(self.path(path), os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            return {"errno": exc.errno}
        try:
            return {"text": os.read(fd, min(int(limit), probe.MAX_FILE)).decode("utf-8", "replace")}
        except OSError as exc:
            return {"errno": exc.errno}
        finally:
            os.close(fd)

    def op_write(self, path: str, text: str) -> dict[str, Any]:
        """One ``write(2)``, as a setting's file wants it."""
        try:
            fd = os.open(self.path(path), os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
        except OSError as exc:
            return {"errno": exc.errno}
        try:
            os.write(fd, str(text).encode())
        except OSError as exc:
            return {"errno": exc.errno}
        finally:
            os.close(fd)
        return {}

    def op_writable(self, path: str) -> bool:
        where = self.path(path)
        try:
            mode = os.stat(where).st_mode
        except OSError:
            return False
        return os.access(where, os.W_OK) and bool(mode & 0o222)

    def op_exists(self, path: str) -> bool:
        return os.path.exists(self.path(path))

    def op_is_dir(self, path: str) -> bool:
        return os.path.isdir(self.path(path))

    def op_realpath(self, path: str) -> str:
        return probe.mine(self.root, os.path.realpath(self.path(path)))

    def op_list_dir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(self.path(path)))[:100000]
        except OSError:
            return None

    def op_stat(self, path: str) -> probe.Stat | None:
        return probe.stat_of(self.path(path))

    def op_folder(self, path: str) -> dict[str, Any]:
        """This user's uid, and the folder's owner and mode (for a given server's socket)."""
        try:
            info = os.stat(path)
        except OSError:
            return {"uid": os.getuid(), "owner": None, "mode": None}
        return {"uid": os.getuid(), "owner": info.st_uid, "mode": statmod.S_IMODE(info.st_mode)}

    def op_folders(self, paths: Sequence[str]) -> dict[str, Any]:
        """This user's uid, and each path's owner, mode and owner's name (``lstat``: the write guard's surroundings)."""
        return probe.folders(paths)

    def op_identity(self, path: str) -> str | None:
        """What tells the regular file named ``path`` from any made later (:func:`probe.file_identity`)."""
        return probe.file_identity(path)

    def op_make_files(self, paths: Sequence[str]) -> dict[str, Any]:
        """Each new file target made empty, never through a name that exists; stops at the first that fails."""
        for path in paths:
            try:
                os.close(probe.make_file(path))
            except OSError as exc:
                return {"failed": path, "why": exc.strerror or "exists"}
        return {"failed": None}

    def op_sync(self) -> None:
        os.sync()
        return None

    # --- reading the machine -------------------------------------------------------------

    def op_snapshot(self, targets: Sequence[str] = ()) -> dict[str, Any]:
        return probe.snapshot(self.root, list(targets))

    def op_sample(
        self, devices: Sequence[str] = (), irqs: Sequence[str] = (), threads: bool = False
    ) -> dict[str, Any]:
        return probe.sample(self.root, devices, irqs, threads)

    def op_edge(
        self, targets: Sequence[str] = (), disks: Sequence[str] = (), watch: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return probe.edge(self.root, list(targets), list(disks), watch)

    def op_states(self, targets: Sequence[str] = ()) -> dict[str, Any]:
        return {path: probe.target_state(self.root, path) for path in targets}

    def op_looks(self, pid: int, depth: int, policy_of: Sequence[int] = ()) -> list[dict[str, Any]]:
        return probe.looks(self.root, int(pid), int(depth), [int(p) for p in policy_of])

    def op_processes(self) -> list[dict[str, Any]]:
        return probe.processes(self.root)

    def op_exits(self, pids: Sequence[int] = ()) -> dict[str, int]:
        return probe.exit_codes(self.root, [int(p) for p in pids])

    # --- the guard's questions ------------------------------------------------------------

    def op_claimed(self, node: str) -> bool:
        """Whether the kernel refuses an exclusive open of ``node`` (EBUSY)."""
        try:
            os.close(os.open(node, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC))
        except OSError as exc:
            return exc.errno == 16
        return False

    def op_readable(self, device: str) -> bool:
        """Whether the device's first and last 4 KiB read, as the local guard reads them before probing."""
        try:
            fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
            last = max(0, size // 4096 - 1) * 4096
            os.pread(fd, 4096, 0)
            os.pread(fd, 4096, last)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True

    def op_run(self, argv: Sequence[str], seconds: float = 30.0, sbin: bool = False) -> dict[str, Any]:
        """A probe tool (``blkid``, ...), from argv; ``sbin``: with the system folders on PATH."""
        if not argv:
            raise Refused("no program to run")
        return run_program(argv, float(seconds), _SBIN if sbin else None)

    def op_programs(self, fio: str = "fio") -> dict[str, Any]:
        """fio's version, whether numactl runs, whether fio knows ``numa_mem_policy``; and the python."""
        version = run_program([fio, "--version"], 30.0)
        has = version["returncode"] == 0 and version["stdout"].strip()
        numactl = run_program(["numactl", "--show"], 30.0)["returncode"] == 0
        numa = bool(has) and run_program([fio, "--cmdhelp=numa_mem_policy"], 30.0)["returncode"] == 0
        fio_version = version["stdout"].strip().splitlines()[0] if has else ""
        return {"fio": fio_version, "numactl": numactl, "numa": numa}

    # --- locks ------------------------------------------------------------------------------

    def op_lock(self, disks: Sequence[str]) -> dict[str, Any]:
        """Each disk's lock (``flock`` on its file, as a run on this machine takes it), all or none."""
        folder = _lock_dir()
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            info = os.lstat(folder)
        except OSError as exc:
            raise Refused(f"cannot make {folder}: {exc.strerror}") from None
        # As on the controller (system/locks.py): a lock folder someone else can change, or a
        # lock file that is a link, would let them choose what the holder's line truncates.
        if not statmod.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise Refused(f"{folder} is not a folder of this user's own that only it can write")
        taken: dict[str, int] = {}
        busy: dict[str, str] = {}
        for disk in sorted(set(disks)):
            if not disk or "/" in disk or disk.startswith("."):
                raise Refused(f"{disk!r} is not a device name to lock")
            if disk in self.locks:
                continue
            path = os.path.join(folder, disk + ".lock")
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                lock = os.fstat(fd)
                if not statmod.S_ISREG(lock.st_mode) or lock.st_uid != os.geteuid() or lock.st_nlink != 1:
                    os.close(fd)
                    raise OSError(0, "not a file of this user's own (a link, a device, or another's)")
            except OSError as exc:
                for held in taken.values():
                    os.close(held)
                raise Refused(f"cannot open {path}: {exc.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                busy[disk] = os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
                os.close(fd)
                continue
            taken[disk] = fd
        if busy:
            for fd in taken.values():
                os.close(fd)
            return {"busy": busy}
        for disk, fd in taken.items():
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n".encode(), 0)
            self.locks[disk] = fd
        return {"locked": sorted(self.locks), "folder": folder}

    def op_unlock(self, disks: Sequence[str] | None = None) -> None:
        for disk in list(self.locks) if disks is None else disks:
            fd = self.locks.pop(disk, None)
            if fd is not None:
                os.close(fd)
        return None

    # --- processes and fio's server ------------------------------------------------------------

    def op_kill(self, pids: Sequence[int], grace: float = GRACE_S) -> list[int]:
        """Stop each process and everything below it; the pids still running after SIGKILL was sent."""
        return stop_tree(self.root, [int(p) for p in pids], float(grace))

    def op_serve_fio(self, fio: str, token: str, timeout: float = SERVER_START_S) -> dict[str, Any]:
        """Start fio's server on a socket in a private folder (0700); its pid, folder and the boot id."""
        if self.server is not None:
            raise Refused("a fio server runs already")
        base = _private_base()
        try:
            folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{token}.", dir=base)
        except OSError as exc:
            raise Refused(f"cannot make a private folder in {base}: {exc.strerror}") from None
        self.folder = folder
        boot = (probe.read_text(probe.at(self.root, "/proc/sys/kernel/random/boot_id"), 256) or "").strip()
        socket = folder + "/fio.sock"
        log = os.open(folder + "/server.log", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            self.server = subprocess.Popen(
                [fio, "--server=sock:" + socket], stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=folder
            )
        except OSError as exc:
            raise Refused(f"cannot start {fio}: {exc.strerror}") from None
        finally:
            os.close(log)
        with open(folder + "/pid", "w") as out:
            out.write(f"{self.server.pid} {boot}\n")
        deadline = time.monotonic() + float(timeout)
        while not os.path.exists(socket):
            if self.server.poll() is not None:
                said = (probe.read_text(folder + "/server.log", 4096) or "").strip().splitlines()[-3:]
                raise Refused("fio --server exited: {}".format(" ".join(said)))
            if time.monotonic() > deadline:
                raise Refused(f"fio --server made no socket within {float(timeout):g} s")
            time.sleep(0.02)
        return {"pid": self.server.pid, "folder": folder, "boot": boot}

    def op_server_alive(self) -> bool:
        return self.server is not None and self.server.poll() is None

    def op_stop_fio(self) -> None:
        """Stop the fio server this agent started, everything under it, and remove its folder."""
        if self.server is not None:
            stop_tree(self.root, [self.server.pid])
            try:
                self.server.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            self.server = None
        if self.folder is not None:
            _remove_tree(self.folder)
            self.folder = None

    def op_leftovers(self) -> dict[str, Any]:
        """This user's private folders (a killed run's): each with its pid file's line and that pid's command line."""
        found: list[dict[str, Any]] = []
        seen: set[str] = set()
        for base in (_private_base(), "/tmp"):
            try:
                names = os.listdir(base)
            except OSError:
                continue
            for name in sorted(names):
                folder = os.path.join(base, name)
                # A server's folder: iobench-<token>.<random> (a dot; iobench's other folders have none).
                if (
                    not name.startswith(FOLDER_PREFIX)
                    or "." not in name
                    or folder in seen
                    or folder == self.folder
                ):
                    continue
                seen.add(folder)
                try:
                    info = os.lstat(folder)
                except OSError:
                    continue
                if not statmod.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                    continue
                line = (probe.read_text(folder + "/pid", 256) or "").split("\n")[0].split()
                cmdline = ""
                if line and line[0].isdigit():
                    data = probe.read_bytes(probe.at(self.root, f"/proc/{line[0]}/cmdline"), 4096) or b""
                    cmdline = data.replace(b"\0", b" ").decode("utf-8", "replace").strip()
                found.append({"folder": folder, "pid_line": line[:2], "cmdline": cmdline})
        boot = (probe.read_text(probe.at(self.root, "/proc/sys/kernel/random/boot_id"), 256) or "").strip()
        return {"folders": found, "boot": boot}

    def op_remove(self, folder: str) -> None:
        """Remove one of this user's private folders (named by :meth:`op_leftovers`)."""
        base = os.path.basename(str(folder))
        if not base.startswith(FOLDER_PREFIX) or os.path.dirname(str(folder)) not in (
            _private_base(),
            "/tmp",
        ):
            raise Refused(f"not a private folder of iobench: {folder!r}")
        _remove_tree(str(folder))
        return None

    def close(self) -> None:
        """Release everything this agent holds: locks, the fio server's tree, its folder."""
        self.op_unlock()
        self.op_stop_fio()


def _remove_tree(folder: str) -> None:
    """``rm -rf`` without following a link out of it."""
    for top, dirs, files in os.walk(folder, topdown=False):
        for name in files + dirs:
            path = os.path.join(top, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    os.rmdir(path)
                else:
                    os.unlink(path)
            except OSError:
                pass
    try:
        os.rmdir(folder)
    except OSError:
        pass


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def hello(root: str) -> dict[str, Any]:
    """The agent's first message: protocol version, python version, pid, uid and the machine's boot id."""
    boot = (probe.read_text(probe.at(root, "/proc/sys/kernel/random/boot_id"), 256) or "").strip()
    return {
        "hello": HELLO,
        "version": VERSION,
        "python": list(sys.version_info[:3]),
        "pid": os.getpid(),
        "uid": os.getuid(),
        "boot_id": boot,
    }


def serve(read_fd: int, write_fd: int, root: str = "/") -> None:
    """Greet, then answer requests until the input ends; release everything on the way out."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _stop)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    agent = Agent(root)
    reader = Reader(read_fd)
    try:
        write_message(write_fd, hello(root))
        while True:
            try:
                request = reader.read()
            except ProtocolError:
                return
            handler = getattr(agent, "op_" + str(request.get("op")), None)
            args = request.get("args")
            answer: dict[str, Any] = {"id": request.get("id")}
            if handler is None or not isinstance(args, dict):
                answer.update(ok=False, error="no such request: {!r}".format(request.get("op")))
            else:
                try:
                    answer.update(ok=True, value=handler(**args))
                except Refused as exc:
                    answer.update(ok=False, error=str(exc))
                except (TypeError, ValueError) as exc:
                    answer.update(ok=False, error="bad request {!r}: {}".format(request.get("op"), exc))
            write_message(write_fd, answer)
    except OSError:
        return
    finally:
        agent.close()


def main(argv: Sequence[str] | None = None) -> None:
    """``python3 -m iobench.agent [--root ROOT]``: serve on standard input and output."""
    args = list(sys.argv[1:] if argv is None else argv)
    root = "/"
    if args[:1] == ["--root"] and len(args) > 1:
        root = args[1]
    read_fd, write_fd = sys.stdin.fileno(), sys.stdout.fileno()
    # Nothing else may write to the answers' stream.
    sys.stdout = sys.stderr
    serve(read_fd, write_fd, root)

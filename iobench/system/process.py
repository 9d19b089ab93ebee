"""The one place iobench starts processes: argv lists, own process group, timeouts.

Every child runs in a new session so that a timeout or Ctrl-C can stop the
whole tree (numactl → fio → fio's workers) with one signal to the group.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from iobench.errors import IobenchError
from iobench.system import procfs
from iobench.system.hostfs import SystemRoot

KILL_GRACE_S = 5.0


class CommandNotFound(IobenchError):
    """The program at argv[0] does not exist or cannot be executed."""


@dataclass(frozen=True)
class Completed:
    """What a finished (or stopped) process left behind."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool


def minimal_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An explicit environment for children: PATH and the C locale, nothing inherited by accident."""
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LC_ALL": "C"}
    if extra:
        env.update(extra)
    return env


def descendants(pid: int, proc: str = "/proc") -> list[int]:
    """``pid`` and every process below it.

    fio's job processes call setsid(), so they leave fio's process group: the
    group alone does not name them. The kernel's per-thread ``children`` lists
    give the tree at the cost of a few reads; without them (``CONFIG_PROC_CHILDREN``
    unset, or ``pid`` gone) every process's parent link in /proc is read instead.
    """
    children_of: Callable[[int], list[int]]
    system = SystemRoot(procfs=proc)
    if procfs.has_children_lists(system, pid):
        children_of = functools.partial(procfs.task_children, system)
    else:
        children_of = children_by_scan(proc).__getitem__
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children_of(current))
    return found


def children_by_scan(proc: str) -> defaultdict[int, list[int]]:
    """Parent pid → child pids, from every process's ``stat``."""
    children: defaultdict[int, list[int]] = defaultdict(list)
    for pid, ppid in procfs.parent_pids(SystemRoot(procfs=proc)).items():
        children[ppid].append(pid)
    return children


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _stop_group(proc: subprocess.Popen[bytes], first: int = signal.SIGTERM) -> None:
    """Signal the child's whole group, then SIGKILL whatever is left after a grace period."""
    tree = descendants(proc.pid)
    _signal_group(proc.pid, first)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    # Workers that left the group (fio's setsid) or outlive their parent are killed by pid.
    _signal_group(proc.pid, signal.SIGKILL)
    for pid in tree[1:] + [p for p in descendants(proc.pid)[1:] if p not in tree]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)


def _drain(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """What a stopped child printed; an orphan that still holds its pipes is not waited for."""
    try:
        return proc.communicate(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        return b"", b"(output lost: a process that outlived the timeout kept its pipes open)"


def run_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    on_start: Callable[[int], None] | None = None,
    poll: Callable[[int], float | None] | None = None,
    poll_interval: float = 0.5,
) -> Completed:
    """Run ``argv`` to completion in its own process group and return what it printed.

    Parameters
    ----------
    argv
        The program and its arguments; never interpreted by a shell.
    cwd
        Working directory of the child.
    timeout
        Seconds before the whole process group is stopped (SIGTERM, then SIGKILL).
    env
        The child's complete environment; :func:`minimal_env` when omitted.
    on_start
        Called with the child's pid once it runs.
    poll
        Called with the child's pid while it runs: first after ``poll_interval``
        seconds, then after as many seconds as its last call returned
        (``poll_interval`` when it returned None).

    Raises
    ------
    CommandNotFound
        When ``argv[0]`` cannot be executed.
    KeyboardInterrupt
        Re-raised after the child's group has been stopped.
    """
    args = tuple(str(a) for a in argv)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
            args,
            cwd=Path(cwd) if cwd is not None else None,
            env=dict(env) if env is not None else minimal_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except (FileNotFoundError, PermissionError) as exc:
        raise CommandNotFound(f"cannot execute {args[0]!r}: {exc.strerror}") from None
    if on_start is not None:
        on_start(proc.pid)
    timed_out = False
    deadline = None if timeout is None else started + timeout
    interval = poll_interval
    try:
        while True:
            wait = interval if poll is not None else None
            if deadline is not None:
                remaining = max(deadline - time.monotonic(), 0.0)
                wait = remaining if wait is None else min(wait, remaining)
            try:
                stdout, stderr = proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() >= deadline:
                    # Only a child still running was late: one that ended while a slow poll
                    # ran (a look at /proc under load, an import) finished in time.
                    timed_out = proc.poll() is None
                    if timed_out:
                        _stop_group(proc)
                    stdout, stderr = _drain(proc)
                    break
                if poll is not None:
                    asked = poll(proc.pid)
                    interval = poll_interval if asked is None else asked
    except BaseException:
        _stop_group(proc, signal.SIGINT)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        raise
    return Completed(
        argv=args,
        returncode=proc.returncode,
        stdout=stdout.decode(errors="replace"),
        stderr=stderr.decode(errors="replace"),
        duration_s=time.monotonic() - started,
        timed_out=timed_out,
    )


def spawn_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stderr: str | os.PathLike[str] | None = None,
    stdout: bool = False,
    cwd: str | os.PathLike[str] | None = None,
    stdin: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in the background, in its own session, for a caller that stops it with :func:`stop_process`.

    For children that live as long as a run (an SSH control connection) or
    stream what they print (``stdout=True``), where :func:`run_process`, which
    waits for the end, does not fit.

    Parameters
    ----------
    argv
        The program and its arguments; never interpreted by a shell.
    env
        The child's complete environment; :func:`minimal_env` when omitted.
    stderr
        A file that receives the child's error output (truncated first); discarded when None.
    stdout
        Give the caller a pipe of the child's output (``proc.stdout``); discarded otherwise.
    cwd
        Working directory of the child.
    stdin
        Give the caller a pipe to the child's input (``proc.stdin``): the child
        sees its end when the caller closes it, or exits; ``/dev/null`` otherwise.

    Raises
    ------
    CommandNotFound
        When ``argv[0]`` cannot be executed.
    """
    args = tuple(str(a) for a in argv)
    sink = open(stderr, "wb") if stderr is not None else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(  # noqa: S603 - argv list, no shell
            args,
            env=dict(env) if env is not None else minimal_env(),
            cwd=Path(cwd) if cwd is not None else None,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
            stderr=sink,
            start_new_session=True,
        )
    except (FileNotFoundError, PermissionError) as exc:
        raise CommandNotFound(f"cannot execute {args[0]!r}: {exc.strerror}") from None
    finally:
        if not isinstance(sink, int):
            sink.close()


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Stop a child of :func:`spawn_process` and everything below it (SIGTERM, then SIGKILL); bounded in time."""
    if proc.poll() is None:
        _stop_group(proc)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold back SIGINT and SIGTERM inside the block, so a second Ctrl-C cannot cut a teardown short.

    They are delivered when the block ends. Where signals cannot be masked
    (another platform, a thread without the right), the block runs unprotected.
    """
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    except (AttributeError, OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class Helper:
    """A helper process that answers one request at a time, kept for this process's life.

    For work shared with another CPU (:func:`iobench.parse_fio`'s readers): a
    Python helper costs its interpreter and imports once, not
    at every request. ``argv`` gets the path of the helper's answer file
    appended; a request is bytes on the helper's input, and the helper writes
    its answer into that file, then one newline on its output. The answer
    travels through a file, not a pipe: the helper never waits for this
    process to read (a thread that reads a pipe needs the GIL for every
    chunk, which a busy thread here holds).

    The helper stays in this process's group (a Ctrl-C at the terminal stops
    it too) and ends with this process: its input is closed at exit, and
    ends anyway when this process is killed. Its error output is discarded (a
    helper that fails is replaced by doing its work here).
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.argv = tuple(str(a) for a in argv)
        self.env = dict(env) if env is not None else minimal_env()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._folder: Path | None = None
        atexit.register(self.stop)

    @property
    def pid(self) -> int | None:
        """The running helper's pid; None before the first request and after a failure."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def ask(self, request: bytes) -> bytes | None:
        """The helper's answer to ``request``; None when it failed, or another thread is asking it.

        A helper that failed (killed, or its answer cut short) is stopped; the
        next request starts a new one.

        Raises
        ------
        CommandNotFound
            When ``argv[0]`` cannot be executed.
        """
        if not self._lock.acquire(blocking=False):
            return None
        try:
            proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
            assert proc.stdin is not None and proc.stdout is not None and self._folder is not None
            proc.stdin.write(request)
            proc.stdin.flush()
            if proc.stdout.read(1) != b"\n":
                raise OSError("the helper ended without an answer")
            return (self._folder / "answer").read_bytes()
        except OSError:
            self._end()
            return None
        finally:
            self._lock.release()

    def stop(self) -> None:
        """End the helper (its input closes), bounded in time; the next request starts a new one."""
        with self._lock:
            self._end()

    def _start(self) -> subprocess.Popen[bytes]:
        self._end()
        self._folder = Path(tempfile.mkdtemp(prefix="iobench-helper-"))
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
                [*self.argv, str(self._folder / "answer")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=self.env,
            )
        except (FileNotFoundError, PermissionError) as exc:
            self._end()
            raise CommandNotFound(f"cannot execute {self.argv[0]!r}: {exc.strerror}") from None
        return self._proc

    def _end(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    if pipe is not None:
                        pipe.close()
            try:
                proc.wait(KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        folder, self._folder = self._folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

"""Import what the end of a run needs while the first fio runs, not before it starts.

pandas, pyarrow and matplotlib take most of a second to import on a small
machine; a run needs pandas only once its first point ends and matplotlib only
after its last. Importing them in a background thread while the first point's
fio runs takes them off the path from ``iobench run`` to the first I/O and
from the last I/O to the exit. The runner starts it once the first point's fio
workers have been seen in /proc (an import holds the GIL for long stretches,
and the placement watcher must not miss them). The thread keeps off the
point's CPUs where another CPU is online, as the telemetry sampler does, so
that the first point's measurement does not share its CPUs with the import.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterable, Sequence

from iobench.system.hostfs import SystemRoot
from iobench.system.sampler import keep_thread_off

THREAD_NAME = "iobench-preload"

#: What a run imports after its first point: the parser, the frame, the point module, telemetry,
#: then pyarrow's parquet (its import is one long stretch holding the GIL: seconds under emulation).
RUN_MODULES: tuple[str, ...] = (
    "iobench.results.fioout",
    "iobench.results.assemble",
    "iobench.results.points",
    "iobench.results.telemetry",
    "iobench.results.samples",
    "pyarrow.parquet",
)

_started: set[str] = set()
_threads: list[threading.Thread] = []
_after: list[str] = []
_lock = threading.Lock()


def also(modules: Iterable[str]) -> None:
    """Ask the run's preload to import ``modules`` too, after its own (a front end's: the figures')."""
    with _lock:
        _after.extend(m for m in modules if m not in _after)


def preload_after() -> tuple[str, ...]:
    """What front ends asked to be preloaded with the run's modules (:func:`also`)."""
    with _lock:
        return tuple(_after)


def preload(modules: Iterable[str], *, avoid_cpus: Sequence[int] = ()) -> threading.Thread | None:
    """Import ``modules`` in a daemon thread, each at most once per process.

    Parameters
    ----------
    modules
        Module names, imported in order.
    avoid_cpus
        CPUs the thread keeps off (those of the running point), where another
        CPU is online.

    Returns
    -------
    threading.Thread or None
        The thread, or ``None`` when every module was preloaded or asked for before.
    """
    with _lock:
        todo = [m for m in modules if m not in _started]
        _started.update(todo)
    if not todo:
        return None

    def load() -> None:
        keep_thread_off(avoid_cpus, SystemRoot())
        for name in todo:
            # A module that fails here fails again, with its message, where it is used.
            with contextlib.suppress(Exception):
                importlib.import_module(name)

    thread = threading.Thread(target=load, name=THREAD_NAME, daemon=True)
    with _lock:
        _threads.append(thread)
    thread.start()
    return thread


def wait() -> None:
    """Wait until every preload has finished (before forking: a child must not inherit a held import lock)."""
    with _lock:
        threads, _threads[:] = list(_threads), []
    for thread in threads:
        thread.join()

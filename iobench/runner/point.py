"""One point × repeat, from its job files to its saved folder: the same life on this machine and on hosts.

:class:`PointRunner` asks each :class:`~iobench.runner.sites.Site` of the point
for what it needs (settings, targets, samples) and starts fio one of two ways:

- on this machine, each of the point's fio processes under ``numactl``
  (:class:`LocalLaunch`), watched through ``/proc`` here;
- on hosts, one ``fio --client`` here that drives every host's fio server
  (:class:`ClientLaunch`), each host's jobs watched through its ``/proc`` there.

Either way each fio process of the plan gets a :class:`Share` — what fio
said for it, what ``/proc`` showed of its workers — and one judge decides the
point: a killed fio or worker, a timeout, a fio error, output that cannot be
read (and whether the run directory's disk filled), a job error, placement
not as planned. A target that vanished, a host whose connection dropped, a
full disk are the environment's faults, raised for the sweep to stop on.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from iobench.errors import IobenchError, ResultsError, RunStorageError, TargetVanished, TuningError
from iobench.planner.plans import FioProcess, Plan, PlannedRun, client_argv
from iobench.runner import recording
from iobench.runner.sites import HostSite, PointEdge, Site, TargetState
from iobench.store.records import PointMeta, ProcessRecord, Status
from iobench.store.rundir import RunDir, now, probe, write_text
from iobench.system import procfs
from iobench.system.cpulist import parse_cpulist
from iobench.system.hostfs import SystemRoot
from iobench.system.observe import GroupWatcher, Observed, check_placement
from iobench.system.process import CommandNotFound, Completed, minimal_env
from iobench.system.remote import descendants_in, proc_table
from iobench.system.sampler import Snapshot, Watch, keep_thread_off
from iobench.system.topology import TargetLocation
from iobench.system.tuning import DeviceTuner

if TYPE_CHECKING:
    from iobench.results.assemble import Parsed
    from iobench.results.fioout.rows import Row
    from iobench.results.points import Headline

Executor = Callable[..., Completed]
"""Runs one argv like :func:`iobench.system.process.run_process` (tests pass a fake)."""

TOKEN_VAR = "IOBENCH_POINT"
"""Set in every fio's environment: fio's workers inherit it, so they can be found after fio is gone."""
REAP_WAIT_S = 5.0
#: Seconds between looks at fio's processes (placement, a vanished target) while a point runs.
WATCH_POLL_S = 0.25
#: Seconds between looks while workers the plan expects are not yet seen, for the point's first seconds.
WATCH_QUICK_S = 0.05
WATCH_QUICK_FOR_S = 10.0

LATER_MODULES: tuple[str, ...] = (
    "iobench.results.fioout",
    "iobench.results.assemble",
    "iobench.results.points",
    "iobench.results.telemetry",
    "iobench.results.samples",
    "pyarrow.parquet",
)
"""What a run needs once its first point has run: pandas and pyarrow, a third of a second of imports.

Not imported when the run starts (that would delay the first I/O) but while the first
point's fio runs, once its workers were seen (:meth:`PointRunner.workers_seen`), where the wait
costs nothing.
"""
#: Seconds between looks at the hosts' connections and servers while a point runs on hosts.
HOSTS_POLL_S = 0.5
CLIENT_OUTPUT = "fio.json"
# fio's note when a job process died of a signal; through a server it comes as "<client> fio: ...".
_ABORTED = re.compile(r"^(?:<(?P<client>[^>]+)> )?(?P<line>.*\bAborting\b.*)$", re.M)
_WORKER_SIGNAL = re.compile(r"^(?:<(?P<client>[^>]+)> )?fio: pid=(?P<pid>\d+), got signal=(?P<sig>\d+)", re.M)


class _Killed(Exception):
    """fio or one of its workers died of a signal while the point ran; the point stops at once.

    fio waits forever for a worker killed while starting, and the workers of a
    killed fio keep fio's output pipes open until their runtime ends (or
    forever), so neither case is left to end by itself.
    """


class _Lost(Exception):
    """A host's connection or fio server went away while the point ran."""


@dataclass(frozen=True)
class PointOutcome:
    """How one point × repeat ended, with a headline figure for progress displays.

    The headline (:func:`~iobench.results.points.headline` of the point's
    ``outputs``: each fio's rows) is computed when a display first
    asks for it: a quiet run never pays for it. On several hosts it reads the
    saved point's logs (``run_dir``, ``meta``) for the window all hosts ran.
    """

    key: str
    status: str
    reason: str | None
    duration_s: float
    outputs: Sequence[list[Row]] = field(default=(), repr=False, compare=False)
    fault: TargetVanished | None = field(default=None, repr=False, compare=False)
    """A target found gone or replaced once the point was saved: the sweep stops on it."""
    run_dir: RunDir | None = field(default=None, repr=False, compare=False)
    meta: PointMeta | None = field(default=None, repr=False, compare=False)

    @cached_property
    def _headline(self) -> Headline:
        import pandas

        from iobench.results.assemble import with_host_window
        from iobench.results.fioout.frame import rows_frame
        from iobench.results.points import Headline, headline

        if not self.outputs:
            return Headline(None, None, 1)
        frames = [rows_frame(o) for o in self.outputs]
        hosts = {h for f in frames if "host" in f for h in f["host"].dropna()}
        if len(hosts) > 1 and self.run_dir is not None and self.meta is not None:
            meta = self.meta
            rows = pandas.concat(frames, ignore_index=True).assign(
                point=meta.point, repeat=meta.repeat, status="ok"
            )
            rows = with_host_window(rows, self.run_dir, [(self.run_dir.points / self.key, meta)])
            return headline(rows)
        return headline(frames)

    @property
    def iops(self) -> float | None:
        """The point's IOPS over every direction; None when fio reported none."""
        return self._headline[0]

    @property
    def lat_mean_us(self) -> float | None:
        """The mean latency of the point's I/Os (µs); None when fio reported none."""
        return self._headline[1]

    @property
    def hosts(self) -> int:
        """How many hosts :attr:`iops` sums (1: this machine, or one host)."""
        return self._headline.hosts


def killed_words(signum: int) -> str:
    """``killed by signal 9 (out of memory?)``: SIGKILL out of nowhere is the OOM killer's signature."""
    if signum == signal.SIGKILL:
        return "killed by signal 9 (out of memory?)"
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"killed by signal {signum}"
    return f"killed by signal {signum} ({name})"


def _job_error(code: object) -> str:
    """fio's job ``error`` is an errno: ``28 (No space left on device)``."""
    try:
        number = int(str(code))
    except ValueError:
        return str(code)
    return f"{number} ({os.strerror(number)})" if 0 < number < 4096 else str(number)


def _fio_message(done: Completed) -> str:
    lines = [ln.strip() for ln in (done.stderr + "\n" + done.stdout).splitlines() if ln.strip()]
    useful = [ln for ln in lines if ln.startswith("fio:") or "error" in ln.lower()] or lines
    return "; ".join(useful[-3:]) or f"fio exited with status {done.returncode}"


def _signal_of_zombie(pid: int, system: SystemRoot) -> int:
    """The signal that killed ``pid`` when it is a zombie not yet reaped, else 0 (from its wait status)."""
    info = procfs.process_stat(system, pid)
    if info is None or info.state != "Z":
        return 0
    return (info.exit_code or 0) & 0x7F


def _check_alive(group: Sequence[int], system: SystemRoot) -> None:
    """Raise :class:`_Killed` when fio (``group[0]``) or one of its workers (the rest) was killed by a signal."""
    for index, pid in enumerate(group):
        signum = _signal_of_zombie(pid, system)
        if signum:
            raise _Killed(
                f"fio {killed_words(signum)}"
                if index == 0
                else f"fio worker (pid {pid}) {killed_words(signum)}"
            )


def _alive(pid: int, system: SystemRoot) -> bool:
    """Running or sleeping, not gone nor a zombie waiting for its new parent to reap it."""
    info = procfs.process_stat(system, pid)
    return info is not None and info.state not in ("Z", "X")


def reap(token: str, system: SystemRoot) -> list[int]:
    """SIGKILL every process still carrying ``token`` in its environment, and wait until they are gone.

    A fio killed outright (the OOM killer) leaves its workers running on their
    own, reparented away from fio; their inherited environment still names the
    point, which no other process's does.
    """
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for pid in procfs.pids(system):
        if pid != os.getpid() and needle in (procfs.process_environ(system, pid) or ()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                found.append(pid)
    deadline = time.monotonic() + REAP_WAIT_S
    for pid in found:
        while _alive(pid, system) and time.monotonic() < deadline:
            time.sleep(0.02)
    return found


# --- what fio left for each of its processes -------------------------------------------------


@dataclass
class Share:
    """One planned fio process's part of a point's outcome.

    Attributes
    ----------
    process : FioProcess
        As planned.
    done : Completed
        Its fio (this machine), or the fio client of every host (hosts).
    watcher : GroupWatcher
        What ``/proc`` showed of its workers.
    text : str
        What fio printed for it besides its rows (its stderr here; for a
        host, the lines of the client's output besides the JSON document,
        every server's lines included).
    rows : list of Row or None
        Its rows of the frame; None when fio left nothing readable for it.
    unreadable : str or None
        Why its output could not be read.
    output : Path or None
        The file fio wrote its results to.
    """

    process: FioProcess
    done: Completed
    watcher: GroupWatcher
    text: str
    rows: list[Row] | None = None
    unreadable: str | None = None
    output: Path | None = None
    lost: str | None = None
    client: str | None = None
    """The name a host's server puts before its lines in the client's output (its hostname)."""
    elsewise: str | None = None
    """What fio says the host ran that was not planned for it (or did not run that was)."""


class Launch(Protocol):
    """How a point's fio starts: here under numactl, or as one fio client of the hosts' servers."""

    def argv(self, run: PlannedRun) -> list[list[str]]:
        """Every command the point runs here (for ``argv.json``)."""

    def __call__(self, runner: PointRunner, run: PlannedRun, cwd: Path, token: str) -> list[Share]:
        """Run the point's fio; one share per planned process."""


@dataclass
class LocalLaunch:
    """Each of the point's fio processes here, all at once, watched through this machine's ``/proc``."""

    system: SystemRoot = field(default_factory=SystemRoot)
    live: set[int] = field(default_factory=set)
    """The process groups (fio's pid) of the running point's fio processes."""

    def argv(self, run: PlannedRun) -> list[list[str]]:
        """Each process's own argv."""
        return [list(p.argv) for p in run.processes]

    def _one(
        self, runner: PointRunner, run: PlannedRun, process: FioProcess, cwd: Path, token: str
    ) -> tuple[Completed, GroupWatcher]:
        watcher = GroupWatcher()
        started = time.monotonic()

        def poll(pid: int) -> float:
            _check_alive(watcher(pid), self.system)
            seen = len(watcher.workers())
            # Quick looks until every worker is seen: a short point's workers can live less than a second.
            if seen < process.workers and time.monotonic() - started < WATCH_QUICK_FOR_S:
                return WATCH_QUICK_S
            runner.workers_seen(run, process)
            return WATCH_POLL_S

        done = runner.executor(
            process.argv,
            cwd=cwd,
            timeout=run.timeout_s,
            env=minimal_env({TOKEN_VAR: token}),
            poll=poll,
            poll_interval=WATCH_QUICK_S,
            on_start=self.live.add,
        )
        return done, watcher

    def _left(self) -> bool:
        """Whether a process of the point's fio process groups is still there (fio exited, a worker did not)."""
        for pgid in self.live:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                continue  # the whole group is gone
            except OSError:
                pass  # there, but not ours to signal
            return True
        return False

    def __call__(self, runner: PointRunner, run: PlannedRun, cwd: Path, token: str) -> list[Share]:
        """Start every process; when one of them or a worker is killed, stop the rest (:class:`_Killed`)."""
        self.live.clear()
        ended_whole = False
        try:
            if len(run.processes) == 1:
                results = [self._one(runner, run, run.processes[0], cwd, token)]
            else:
                results = self._together(runner, run, cwd, token)
            ended_whole = all(d.returncode >= 0 and not d.timed_out for d, _ in results) and not self._left()
        except CommandNotFound:
            probe(cwd, cwd)  # fio cannot start in a directory that was removed
            raise
        finally:
            if not ended_whole:
                reap(token, self.system)
        return [
            _local_share(process, done, watcher, cwd)
            for process, (done, watcher) in zip(run.processes, results, strict=True)
        ]

    def _together(
        self, runner: PointRunner, run: PlannedRun, cwd: Path, token: str
    ) -> list[tuple[Completed, GroupWatcher]]:
        # One fio per target, all at once (launch: per-target): threads only wait on them.
        pool = ThreadPoolExecutor(max_workers=len(run.processes))
        try:
            futures = [pool.submit(self._one, runner, run, p, cwd, token) for p in run.processes]
            return [f.result() for f in futures]
        except BaseException:
            for pgid in self.live:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
            raise
        finally:
            pool.shutdown(wait=True)


def _local_share(process: FioProcess, done: Completed, watcher: GroupWatcher, cwd: Path) -> Share:
    from iobench.results.fioout import read_jobs
    from iobench.results.fioout.rows import job_rows

    share = Share(process, done, watcher, done.stderr, output=cwd / process.output)
    if done.returncode != 0 or done.timed_out:
        return share
    try:
        text = (cwd / process.output).read_text(errors="replace")
        share.rows = job_rows(read_jobs(text, origin=process.output), process.output)
    except (OSError, ResultsError) as exc:
        share.unreadable = str(exc)
    return share


@dataclass
class ClientLaunch:
    """One ``fio --client`` here for the point's hosts, each host's jobs watched through its ``/proc``.

    fio names each host's rows and the logs it brings back after the socket it
    was given: a link in the point's folder to the host's forward
    (``host-<name>``), gone before the point is saved.
    """

    fio: str
    system: SystemRoot = field(default_factory=SystemRoot)

    def argv(self, run: PlannedRun) -> list[list[str]]:
        """The one client command."""
        return [client_argv(self.fio, run.processes, self._clients(run), CLIENT_OUTPUT)]

    @staticmethod
    def _clients(run: PlannedRun) -> dict[str, str]:
        return {str(p.host): f"sock:host-{p.host}" for p in run.processes}

    def __call__(self, runner: PointRunner, run: PlannedRun, cwd: Path, token: str) -> list[Share]:
        """Run the client; a host lost mid-point stops it at once (:class:`_Lost`)."""
        sites = [runner.site_of(p) for p in run.processes]
        hosts = [s for s in {id(s): s for s in sites}.values() if isinstance(s, HostSite)]
        fleet = runner.fleet
        assert fleet is not None
        for host in hosts:
            if host.monitor is not None:
                host.monitor.begin_point()

        def poll(pid: int) -> float:
            lost = [h for h in hosts if not h.alive()]
            if lost:
                raise _Lost("; ".join(h.down_reason() for h in lost))
            for host in hosts:
                dead = host.monitor.unreaped() if host.monitor is not None else []
                if dead:
                    raise _Killed(f"host {host.host}: {_remote_killed(host, dead)}")
            if not runner.imported and all(_settled(h, run) for h in hosts):
                for process in run.processes:
                    runner.workers_seen(run, process)
            return HOSTS_POLL_S

        links = [cwd / f"host-{h.host}" for h in hosts]
        for host, link in zip(hosts, links, strict=True):
            link.symlink_to(fleet.socket_of(host.node))
        (argv,) = self.argv(run)
        try:
            done = runner.executor(
                argv,
                cwd=cwd,
                timeout=run.timeout_s,
                env=minimal_env({TOKEN_VAR: token}),
                poll=poll,
                poll_interval=HOSTS_POLL_S,
            )
        except BaseException:
            _stop_jobs(hosts)
            raise
        finally:
            for host in hosts:
                if host.monitor is not None:
                    host.monitor.end_point()
            reap(token, self.system)
            for link in links:
                link.unlink(missing_ok=True)
        if done.timed_out:
            _stop_jobs(hosts)
        return _client_shares(run, sites, done, cwd)


def _settled(host: HostSite, run: PlannedRun) -> bool:
    """Whether the host's agent has seen every worker of the point's fio there (twice)."""
    expected = sum(p.workers for p in run.processes if p.host == host.host)
    monitor = host.monitor
    return monitor is not None and sum(w.settled for w in monitor.workers.values()) >= expected


def _remote_killed(host: HostSite, pids: list[int]) -> str:
    """``fio worker (pid N) killed by signal 9 (out of memory?)`` from the host's ``/proc``."""
    codes = {}
    with contextlib.suppress(IobenchError):
        found = host.node.call("exits", pids=pids)
        for word, code in found.items() if isinstance(found, dict) else ():
            if str(word).isdigit() and type(code) is int:
                codes[int(word)] = code & 0x7F
    signum = codes.get(pids[0], 0)
    return f"fio worker (pid {pids[0]}) " + (killed_words(signum) if signum else "died and was never reaped")


def _stop_jobs(hosts: Sequence[HostSite]) -> None:
    """Stop what a host's server still runs for this point (its children), keeping the server."""
    from iobench.system.fleet import kill_trees

    def stop(site: HostSite) -> None:
        server = site.node.server
        if server is None or site.node.down is not None:
            return
        with contextlib.suppress(IobenchError):
            children = descendants_in(proc_table(site.node), server.pid)
            kill_trees(site.node, [pid for pid, depth in children.items() if depth == 1])

    each(stop, hosts)


def each(work: Callable[[Any], None], items: Sequence[Any]) -> None:
    """``work`` for every item, several at once when there are several (hosts answer in parallel)."""
    if len(items) <= 1:
        for item in items:
            work(item)
        return
    with ThreadPoolExecutor(max_workers=min(32, len(items))) as pool:
        list(pool.map(work, items))


def _host_watcher(site: Site) -> GroupWatcher:
    """What a host's /proc showed of its fio jobs, as the placement check reads it."""
    watcher = GroupWatcher()
    monitor = site.monitor if isinstance(site, HostSite) else None
    for worker in (monitor.workers if monitor is not None else {}).values():
        if not worker.settled:
            continue
        with contextlib.suppress(IobenchError):
            cpus = parse_cpulist(worker.cpus)
            watcher.seen[worker.pid] = Observed(
                worker.pid, worker.name, False, cpus, worker.mems, worker.policy
            )
    return watcher


_SAID = re.compile(r"^(?:<.*|.*(?:fio:|Aborting).*)$", re.M)


def _said(*texts: str) -> str:
    """The lines of the client's output that the judge reads: the servers' lines and fio's messages.

    Without the JSON document between them: on many hosts it is megabytes,
    and every host's share is judged on these lines.
    """
    return "\n".join(line for text in texts for line in _SAID.findall(text))


def _client_shares(run: PlannedRun, sites: Sequence[Site], done: Completed, cwd: Path) -> list[Share]:
    """Each host's share of the client's output, parsed once for every host."""
    from iobench.matrix.fiooptions import fio_filename
    from iobench.results.fioout.clients import Ran, client_key, client_results, host_share, ran_elsewise

    output = cwd / CLIENT_OUTPUT
    missing: str | None = None
    try:
        text = output.read_text(errors="replace")
    except OSError as exc:
        text, missing = "", exc.strerror or "cannot be read"
    clients = {client_key(f"sock:host-{p.host}"): str(p.host) for p in run.processes}
    everything = None
    ran: dict[str, Ran] = {}
    problem = missing
    if text and not done.timed_out:
        try:
            everything, ran = client_results(text, clients, origin=str(output))
        except ResultsError as exc:
            problem = str(exc)
    # What each host was to run: its processes' sections, each on its target (the job file's filename=).
    planned: dict[str, Ran] = {}
    for process in run.processes:
        jobs = zip(process.sections, process.targets, strict=True)
        planned.setdefault(str(process.host), set()).update((s, fio_filename(t)) for s, t in jobs)
    said = _said(text, done.stdout, done.stderr)
    shares = []
    for process, site in zip(run.processes, sites, strict=True):
        share = Share(
            process,
            done,
            _host_watcher(site),
            said,
            output=output,
            client=site.server_name,
        )
        if not site.alive():
            share.lost = site.down_reason()
        if everything is not None:
            host = str(process.host)
            share.elsewise = ran_elsewise(ran.get(host, set()), planned[host])
            share.rows = host_share(everything, host, process.sections) or None
            if share.rows is None:
                share.unreadable = "fio reported no results"
        else:
            share.unreadable = problem or "fio left no output"
        shares.append(share)
    return shares


# --- the runner -------------------------------------------------------------------------------


@dataclass
class PointRunner:
    """Runs and saves one point × repeat at a time (call it with a :class:`PlannedRun`).

    Parameters
    ----------
    run_dir, plan
        Where points are saved; what they are.
    sites
        Each site by its ``host`` (None: this machine).
    executor
        Runs each fio (or fio client) argv here.
    tuners
        Each site's device tuner, by ``host``.
    launch
        How the points start (:class:`LocalLaunch` or :class:`ClientLaunch`).
    fleet
        The hosts' fleet, when the points run on hosts.
    """

    run_dir: RunDir
    plan: Plan
    sites: dict[str | None, Site]
    executor: Executor
    tuners: dict[str | None, DeviceTuner] = field(default_factory=dict)
    launch: Launch = field(default_factory=LocalLaunch)
    fleet: Any = None
    parsed: Parsed = field(default_factory=dict)
    watched: dict[str | None, recording.Watched] = field(default_factory=dict)
    watches: dict[str | None, Watch] = field(default_factory=dict)
    """Each host's counters to sample at a point's edges (its targets' devices and interrupt lines)."""
    seen: dict[tuple[str | None, str], tuple[int, ...]] = field(default_factory=dict)
    created: dict[str | None, list[str]] = field(default_factory=dict)
    made: set[tuple[str | None, str]] = field(default_factory=set)
    """New file targets iobench made before the first point, by site (:meth:`note_new_files`)."""
    observed: set[tuple[str, int]] = field(default_factory=set)
    """The running point's fio processes (point key, index) whose workers were all seen."""
    imported: bool = False
    """Whether :data:`LATER_MODULES` were imported (while the first point ran)."""

    def workers_seen(self, run: PlannedRun, process: FioProcess) -> None:
        """Once every fio of the first point runs with its workers, import :data:`LATER_MODULES` here.

        Not earlier: an import holds the GIL for long stretches, and a watcher
        kept waiting meanwhile could miss a short point's workers altogether.
        The thread keeps off the point's CPUs meanwhile where another CPU is
        online, as the telemetry sampler does.
        """
        if self.imported:
            return
        self.observed.add((run.key, run.processes.index(process)))
        if len({i for key, i in self.observed if key == run.key}) < len(run.processes):
            return
        self.imported = True
        system = SystemRoot()
        allowed = os.sched_getaffinity(0)
        keep_thread_off(sorted({c for p in run.processes if p.host is None for c in p.cpus}), system)
        try:
            for name in LATER_MODULES:
                with contextlib.suppress(ImportError):  # fails again, with its message, where it is used
                    importlib.import_module(name)
        finally:
            os.sched_setaffinity(0, allowed)

    def site_of(self, process: FioProcess) -> Site:
        """The site a process runs on."""
        return self.sites[process.host]

    def sites_of(self, run: PlannedRun) -> list[Site]:
        """The point's sites, in the order of its processes."""
        return list({id(s): s for s in (self.site_of(p) for p in run.processes)}.values())

    # --- around a point ---------------------------------------------------------------------

    def _vanished_in(
        self, run: PlannedRun, edges: dict[str | None, PointEdge], *, before: bool
    ) -> TargetVanished | None:
        """The fault when one of ``run``'s targets is gone or was replaced, as its site showed at a point's edge.

        ``before``: the edge before fio starts, when a path must still lead to
        what the write guard judged, and a file fio is to create must not exist yet.
        """
        for site in self.sites_of(run):
            edge = edges.get(site.host)
            if edge is None:
                continue  # a host that cannot answer is left to its own fault (its connection dropped)
            for path, state in edge.states.items():
                problem = self._vanished(site.host, site.facts.locations[path], state, before=before)
                if problem is not None:
                    return TargetVanished(f"{site.label}target {problem}", path)
        return None

    def _edges(self, run: PlannedRun, sites: Sequence[Site], *, sample: bool) -> dict[str | None, PointEdge]:
        """Each site's edge of the point (one round trip a host, all hosts at once); a silent host is left out."""
        found: dict[str | None, PointEdge] = {}

        def look(site: Site) -> None:
            host = site.host
            paths = sorted({t for p in run.processes if p.host == host for t in p.targets})
            disks = sorted({d for t in paths for d in site.facts.locations[t].disks})
            watch = self.watches.get(host) if sample and isinstance(site, HostSite) else None
            with contextlib.suppress(IobenchError):
                found[host] = site.edge(paths, disks, watch)

        each(look, list(sites))
        return found

    def _vanished(
        self, host: str | None, location: TargetLocation, state: TargetState, *, before: bool
    ) -> str | None:
        """Why the target no longer is what the write guard judged (``location``), or None.

        The guard judged the path when the run was planned and fio opens it at
        each point: a link re-pointed, a file replaced, or a file fio was to
        create that appeared (as a link to a device, say) in between is
        another object than the one judged, and is never handed to fio.
        """
        kind, path, judged = location.kind, location.path, location.identity
        if kind not in ("file", "block"):
            return None
        if state.error is not None:
            return f"unreachable ({state.error})"
        if not state.exists:
            if kind == "file" and (host, path) not in self.seen:
                return None  # fio lays a new file out on the first point
            return "vanished (deleted, or its device removed, during the run)"
        if kind == "block":
            if not state.block:
                return "is no longer a block device"
            if state.sectors == 0:
                return "has no medium (device detached or removed during the run)"
        elif state.block:
            return "now leads to a block device, where the write guard judged a file (it is not written)"
        elif not judged and before and (host, path) not in self.seen and (host, path) not in self.made:
            return (
                "appeared after the write guard judged it as a file fio would create "
                "(made by someone else, or a link; it is not written)"
            )
        if (host, path) in self.made:
            if before:
                return None  # iobench made it; fio may lay it out anew (unlink, create) at the first point
            self.made.discard((host, path))  # what fio left after that point is what later points must find
        if self.seen.setdefault((host, path), judged or state.identity) != state.identity:
            return (
                "was replaced during the run (deleted and made again, or a link re-pointed), "
                "so it is no longer what the write guard judged"
            )
        return None

    def note_new_files(self) -> None:
        """Before the first point: make each site's new file targets (to remember after the first point).

        iobench makes each new file itself (:meth:`Site.make_files`), and a
        name that exists by now (a link, another file) stops the run. fio,
        laying a file out, may unlink and make it again in the same folder,
        which no other user may write (the write guard's rule), so what is
        remembered after the first point is what is there then.

        Raises
        ------
        SafetyError
            When a new file cannot be made (nothing has run).
        """
        for site in self.sites.values():
            paths = [t.path for t in site.facts.targets if site.facts.locations[t.path].kind == "file"]
            try:
                states = site.states(paths) if paths else {}
            except IobenchError:
                continue  # a host that cannot answer is left to its own fault
            self.created[site.host] = [p for p in paths if not states[p].exists]
            site.make_files(self.created[site.host])
            self.made.update((site.host, p) for p in self.created[site.host])

    def remember_files(self, run: PlannedRun) -> None:
        """Files fio just created may be written by later runs (the registry keys them by machine)."""
        for site in self.sites_of(run):
            paths = self.created.pop(site.host, [])
            if paths and site.alive():
                try:
                    site.remember_created(paths)
                except OSError as exc:
                    raise RunStorageError.from_os_error(exc) from None
                except IobenchError:
                    continue

    def drop_caches(self, run: PlannedRun) -> None:
        """Sync and drop every site's page cache (``drop_caches: true``)."""
        each(lambda s: s.drop_caches(), [s for s in self.sites_of(run) if s.alive()])

    # --- a point ---------------------------------------------------------------------------------

    def __call__(self, run: PlannedRun) -> PointOutcome:
        runtime = run.runtime_s
        meta = PointMeta(
            key=run.key,
            point=run.point,
            repeat=run.repeat,
            params=dict(run.params),
            writes=run.writes,
            started=now(),
            runtime_requested_ms=None if runtime is None else round(runtime * 1000),
        )
        cwd = self.run_dir.staging(run.key)
        try:
            if run.status == "skipped":
                return self._ended(cwd, run, meta, "skipped", run.reason)
            down = [s for s in self.sites_of(run) if not s.alive()]
            if down:
                return self._ended(cwd, run, meta, "failed", "; ".join(s.down_reason() for s in down))
            try:
                return self._execute(run, cwd, meta)
            except TuningError as exc:
                return self._ended(cwd, run, meta, "failed", str(exc))
            except KeyboardInterrupt:
                if not cwd.exists():  # the point was saved whole just before the signal came
                    raise
                self._ended(cwd, run, meta, "interrupted", "interrupted while fio ran")
                raise
        except TargetVanished:
            self.run_dir.discard(cwd)  # found before fio started: the point never ran
            raise
        except RunStorageError as fault:
            self.run_dir.discard(cwd)
            fault.what += f" while saving point {run.key}"
            raise

    def _ended(
        self,
        cwd: Path,
        run: PlannedRun,
        meta: PointMeta,
        status: Status,
        reason: str | None,
        started: float | None = None,
        shares: Sequence[Share] | None = None,
    ) -> PointOutcome:
        meta.status, meta.reason, meta.finished = status, reason, now()
        if started is not None:
            meta.duration_s = round(time.monotonic() - started, 3)
        if run.processes:
            by_process = {id(s.process): s for s in shares or ()}
            meta.processes = [self._process_meta(p, by_process.get(id(p))) for p in run.processes]
        self.run_dir.commit(cwd, run.key, meta)
        return PointOutcome(run.key, status, reason, 0.0 if started is None else time.monotonic() - started)

    def _execute(self, run: PlannedRun, cwd: Path, meta: PointMeta) -> PointOutcome:
        for process in run.processes:
            write_text(cwd / process.jobfile_name, process.jobfile)
        write_text(cwd / "argv.json", json.dumps(self.launch.argv(run), indent=2) + "\n")
        sites = self.sites_of(run)
        self._apply_settings(run, sites)
        before = self._edges(run, sites, sample=True)
        vanished = self._vanished_in(run, before, before=True)
        if vanished is not None:
            raise vanished
        meta.settings = {
            disk if host is None else f"{host}:{disk}": dict(values)
            for host, edge in before.items()
            for disk, values in sorted(edge.settings.items())
        }
        started = time.monotonic()
        token = f"{os.getpid()}-{run.key}-{time.monotonic_ns()}"
        sampling = {
            s.host: recording.start(
                self.plan, run, s, known=self.watched.setdefault(s.host, {}), first=_sample(before, s.host)
            )
            for s in sites
        }
        try:
            # Validity facts (iobench.system.pointfacts), read just before and after fio: meta.facts.
            with recording.point_facts(self.plan, run, meta, sites[0]):
                shares = self.launch(self, run, cwd, token)
        except _Killed as dead:
            return self._ended(cwd, run, meta, "failed", str(dead), started)
        except _Lost as lost:
            return self._ended(cwd, run, meta, "failed", f"lost during the point: {lost}", started)
        finally:
            for telemetry in sampling.values():
                if telemetry is not None:
                    telemetry.stop()
        after = self._edges(run, sites, sample=True)
        status, reason, outputs = self._judge(run, cwd, shares)
        for site in sites:
            telemetry = sampling.get(site.host)
            if telemetry is not None:
                mine = [s for s in shares if s.process.host == site.host]
                telemetry.save(
                    cwd,
                    [s.output for s in mine if s.output is not None],
                    [s.rows for s in mine if s.rows is not None],
                    status,
                    last=_sample(after, site.host),
                )
        write_text(cwd / "stderr.txt", "".join(dict.fromkeys(s.done.stderr for s in shares)))
        outcome = self._ended(cwd, run, meta, status, reason, started, shares)
        return PointOutcome(
            outcome.key,
            status,
            reason,
            outcome.duration_s,
            outputs,
            fault=self._vanished_in(run, after, before=False),
            run_dir=self.run_dir,
            meta=meta,
        )

    def _judge(
        self, run: PlannedRun, cwd: Path, shares: Sequence[Share]
    ) -> tuple[Status, str | None, list[list[Row]]]:
        """The point's status and why (the first share that failed, naming its host), and each share's rows."""
        outputs: list[list[Row]] = []
        for share in shares:
            problem = self._problem(run, cwd, share)
            if problem is not None:
                status, why = problem
                where = f"host {share.process.host}: " if share.process.host is not None else ""
                return status, where + why, outputs
            assert share.rows is not None
            outputs.append(share.rows)
            self.parsed[_parsed_key(run.key, share.process)] = share.rows
        done = shares[0].done if shares else None
        if done is not None and done.returncode != 0:
            return "failed", f"fio exited with status {done.returncode}: {_fio_message(done)}", outputs
        return "ok", None, outputs

    def _problem(self, run: PlannedRun, cwd: Path, share: Share) -> tuple[Status, str] | None:
        done = share.done
        # fio reaps a killed worker and goes on with that job's numbers cut short, or, when the
        # worker died while starting, waits for it until the timeout.
        for found in _WORKER_SIGNAL.finditer(share.text):
            if found["client"] in (None, share.client):
                reason = f"fio worker (pid {found['pid']}) {killed_words(int(found['sig']))}"
                if done.timed_out:
                    reason += f"; fio then hung and was stopped after {run.timeout_s:g} s"
                return "failed", reason
        aborted = _ABORTED.search(share.text)
        if aborted is not None and aborted["client"] in (None, share.client):
            # fio refuses a job (a target that appears mounted, say), says "Aborting" and may exit 0.
            return "failed", f"fio aborted: {aborted['line'].strip()}"
        if share.lost is not None:
            return "failed", f"lost during the point ({share.lost})"
        if share.elsewise is not None:
            return "failed", f"fio on this host {share.elsewise}, not what was planned for it"
        if done.timed_out:
            return "timeout", f"fio did not finish within {run.timeout_s:g} s and was stopped"
        if done.returncode < 0:
            return "failed", f"fio {killed_words(-done.returncode)}"
        if done.returncode != 0 and share.client is None:
            return "failed", f"fio exited with status {done.returncode}: {_fio_message(done)}"
        if share.rows is None:
            # fio exits 0 with an empty output when the disk filled: that is no fio failure.
            if share.output is not None:
                probe(cwd, share.output)
            said = _server_lines(share.text, share.client)
            return "failed", f"fio left no readable results: {share.unreadable}" + (
                f": {'; '.join(said[-3:])}" if said else ""
            )
        failed = _first_error(share.rows)
        if failed is not None:
            jobname, code = failed
            return "failed", f"fio job {jobname} ended with error {_job_error(code)}"
        mismatch = check_placement(
            share.watcher,
            cpus=share.process.cpus,
            job_cpus=share.process.job_cpus,
            mem_node=share.process.mem_node,
        )
        if mismatch:
            return "failed", f"placement not as planned: {mismatch}"
        return None

    # --- settings ------------------------------------------------------------------------------

    def _apply_settings(self, run: PlannedRun, sites: Sequence[Site]) -> None:
        """Each site's settings of the point; disks an earlier point changed go back to their originals."""
        wanted_by_site: dict[str | None, dict[str, dict[str, Any]]] = {}
        for key, values in run.settings.items():
            owner, _, disk = key.rpartition(":")
            wanted_by_site.setdefault(owner or None, {})[disk] = values
        problems: list[str] = []

        def apply(site: Site) -> None:
            tuner = self.tuners.get(site.host)
            if tuner is None:
                return
            wanted = wanted_by_site.get(site.host, {})
            originals = tuner.originals()
            try:
                for disk in sorted(set(originals) | set(wanted)):
                    values = {**originals.get(disk, {}), **wanted.get(disk, {})}
                    scheduler, readahead = values.get("scheduler"), values.get("readahead_kb")
                    tuner.apply(
                        disk,
                        scheduler=None if scheduler is None else str(scheduler),
                        readahead_kb=None if readahead is None else int(readahead),
                    )
            except IobenchError as exc:
                problems.append(f"{site.label}{exc}")

        each(apply, list(sites))
        if problems:
            raise TuningError("; ".join(problems))

    def _process_meta(self, process: FioProcess, share: Share | None) -> ProcessRecord:
        site = self.site_of(process)
        data = process.to_json()
        data.pop("jobfile")
        data["sections"] = list(process.sections)
        data["target_disks"] = {
            t: [d if site.host is None else f"{site.host}:{d}" for d in site.facts.locations[t].disks]
            for t in process.targets
        }
        if process.host is not None:
            data["client"] = f"sock:host-{process.host}"
        if share is not None:
            done = share.done
            data.update(
                returncode=done.returncode,
                timed_out=done.timed_out,
                duration_s=round(done.duration_s, 3),
                cpus_observed=share.watcher.cpus(),
                observed=share.watcher.to_json(),
            )
        return ProcessRecord.model_validate(data)


def _sample(edges: dict[str | None, PointEdge], host: str | None) -> Snapshot | None:
    edge = edges.get(host)
    return None if edge is None else edge.sample


def _parsed_key(point: str, process: FioProcess) -> str:
    from iobench.results.assemble import parsed_key

    return parsed_key(point, process)


def _first_error(rows: list[Row]) -> tuple[str, object] | None:
    """The first job that ended with an error: its name and fio's error number."""
    from iobench.results.fioout.rows import FRAME_COLUMNS

    error, jobname = FRAME_COLUMNS.index("error"), FRAME_COLUMNS.index("jobname")
    failed = next((row for row in rows if row[error]), None)
    return None if failed is None else (str(failed[jobname]), failed[error])


def _server_lines(text: str, client: str | None) -> list[str]:
    """What a host's fio server said (``<client> fio: ...`` lines in the client's output)."""
    if client is None:
        return []
    mark = f"<{client}> "
    lines = [ln[len(mark) :].strip() for ln in text.splitlines() if ln.startswith(mark)]
    return [ln for ln in lines if ln.startswith("fio:") or "error" in ln.lower()]

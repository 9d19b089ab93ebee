"""Run a plan: one point × repeat at a time, each saved the moment it ends.

Progress reaches the caller through a :class:`Progress` object whose methods
default to doing nothing; the library itself never prints.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import re
import shlex
import signal
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from iobench.errors import (
    EnvironmentFault,
    IobenchError,
    ResultsError,
    RunStorageError,
    TargetVanished,
    TuningError,
)
from iobench.matrix.model import Matrix
from iobench.planner.plans import FioProcess, Plan, PlannedRun, plan
from iobench.runner import recording
from iobench.store.records import MachineFacts, Manifest, PointMeta, ProcessRecord, Status
from iobench.store.rundir import RunDir, describe_counts, now, probe, remedy, write_text
from iobench.system.hostfs import SystemRoot, devno_text
from iobench.system.locks import device_lock
from iobench.system.metadata import collect_metadata
from iobench.system.observe import GroupWatcher, check_placement
from iobench.system.process import CommandNotFound, Completed, minimal_env, run_process
from iobench.system.safety import remember_created
from iobench.system.sampler import keep_thread_off
from iobench.system.tuning import DeviceTuner, check_no_pending, drop_caches, read_settings

if TYPE_CHECKING:
    import pandas as pd

    from iobench.results.fioout.rows import Row
    from iobench.results.rundir import Parsed

LATER_MODULES: tuple[str, ...] = (
    "iobench.results.fioout",
    "iobench.results.rundir",
    "iobench.results.points",
    "iobench.results.telemetry",
    "iobench.results.samples",
    "pyarrow.parquet",
)
"""What a run needs once its first point has run: pandas and pyarrow, a third of a second of imports.

Not imported here (that would delay the first I/O) but while the first point's fio runs
(:meth:`_PointRunner._seen`), where the wait costs nothing.
"""

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
_WORKER_SIGNAL = re.compile(r"fio: pid=(\d+), got signal=(\d+)")


class _Killed(Exception):
    """fio or one of its workers died of a signal while the point ran; the point stops at once.

    fio waits forever for a worker killed while starting, and the workers of a
    killed fio keep fio's output pipes open until their runtime ends (or
    forever), so neither case is left to end by itself.
    """


class RunInterrupted(IobenchError):
    """Ctrl-C or SIGTERM stopped the run; finished points and the frame were saved."""

    exit_code = 130

    def __init__(self, result: RunResult) -> None:
        self.result = result
        super().__init__(
            f"interrupted: {result.counts.get('ok', 0)} points finished and were saved in {result.run_dir}; "
            f"continue with `iobench run MATRIX --resume {result.run_dir}`"
        )


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C."""


@dataclass(frozen=True)
class PointOutcome:
    """How one point × repeat ended, with a headline figure for progress displays.

    The headline (:func:`~iobench.results.points.headline` of the point's
    ``outputs``: each fio process's rows of the frame) is computed when a
    display first asks for it: a quiet run never pays for it.
    """

    key: str
    status: str
    reason: str | None
    duration_s: float
    outputs: Sequence[list[Row]] = field(default=(), repr=False, compare=False)

    @cached_property
    def _headline(self) -> tuple[float | None, float | None]:
        if not self.outputs:
            return None, None
        from iobench.results.fioout.frame import rows_frame
        from iobench.results.points import headline

        return headline(rows_frame(*self.outputs))

    @property
    def iops(self) -> float | None:
        """The point's IOPS over every direction; None when fio reported none."""
        return self._headline[0]

    @property
    def lat_mean_us(self) -> float | None:
        """The mean latency of the point's I/Os (µs); None when fio reported none."""
        return self._headline[1]


@dataclass
class RunResult:
    """What :func:`run` leaves: the run directory, status counts and the frame."""

    run_dir: Path
    counts: dict[str, int]
    frame: pd.DataFrame | None = field(repr=False)
    plan: Plan = field(repr=False)

    @property
    def exit_code(self) -> int:
        """SPEC §1: 0 when every point is ok (or skipped), 1 when some failed or timed out."""
        return 1 if self.counts.get("failed", 0) or self.counts.get("timeout", 0) else 0


class Progress(Protocol):
    """Callbacks a front end implements to watch a run (all optional in spirit)."""

    def started(self, plan: Plan, todo: Sequence[PlannedRun], run_dir: Path) -> None:
        """The run directory exists and ``todo`` is about to run."""

    def point_started(self, run: PlannedRun, index: int) -> None:
        """``run`` (the ``index``-th of ``todo``) starts."""

    def point_finished(self, run: PlannedRun, outcome: PointOutcome) -> None:
        """``run`` ended and was saved."""

    def finished(self, result: RunResult) -> None:
        """The frame is written (the figures come after)."""


class NullProgress:
    """Progress that shows nothing (the library default)."""

    def started(self, plan: Plan, todo: Sequence[PlannedRun], run_dir: Path) -> None:
        """Nothing."""

    def point_started(self, run: PlannedRun, index: int) -> None:
        """Nothing."""

    def point_finished(self, run: PlannedRun, outcome: PointOutcome) -> None:
        """Nothing."""

    def finished(self, result: RunResult) -> None:
        """Nothing."""


def matrix_fingerprint(matrix: Matrix) -> str:
    """Identifies what a matrix runs, so ``--resume`` refuses a different one."""
    data = {
        "targets": [(t.path, t.size) for t in matrix.targets],
        "fio": matrix.fio,
        "combos": [sorted((k, str(v)) for k, v in c.items()) for c in matrix.combos],
        "repeat": matrix.repeat,
        "order": matrix.order,
        "launch": matrix.launch,
    }
    if matrix.hosts:
        data["hosts"] = [
            (h.name, h.ssh, h.targets and [(t.path, t.size) for t in h.targets]) for h in matrix.hosts
        ]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _device_settings(plan: Plan, run: PlannedRun) -> dict[str, dict[str, Any]]:
    """The scheduler and readahead of every disk under the point's targets, read now."""
    disks = {d for p in run.processes for t in p.targets for d in plan.locations[t].disks}
    sysfs = os.path.join(plan.fsroot, "sys")
    settings: dict[str, dict[str, Any]] = {}
    for name in sorted(disks):
        with contextlib.suppress(TuningError):
            settings[name] = dict(read_settings(name, sysfs=sysfs))
    return settings


def _fio_message(done: Completed) -> str:
    lines = [ln.strip() for ln in (done.stderr + "\n" + done.stdout).splitlines() if ln.strip()]
    useful = [ln for ln in lines if ln.startswith("fio:") or "error" in ln.lower()] or lines
    return "; ".join(useful[-3:]) or f"fio exited with status {done.returncode}"


def _killed(signum: int) -> str:
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


def _signal_of_zombie(pid: int, system: SystemRoot) -> int:
    """The signal that killed ``pid`` when it is a zombie not yet reaped, else 0 (from its wait status)."""
    info = system.process_stat(pid)
    if info is None or info.state != "Z":
        return 0
    return (info.exit_code or 0) & 0x7F


def _check_alive(group: Sequence[int], system: SystemRoot) -> None:
    """Raise :class:`_Killed` when fio (``group[0]``) or one of its workers (the rest) was killed by a signal."""
    for index, pid in enumerate(group):
        signum = _signal_of_zombie(pid, system)
        if signum:
            raise _Killed(
                f"fio {_killed(signum)}" if index == 0 else f"fio worker (pid {pid}) {_killed(signum)}"
            )


def _reap(token: str, system: SystemRoot) -> list[int]:
    """SIGKILL every process still carrying ``token`` in its environment, and wait until they are gone.

    A fio killed outright (the OOM killer) leaves its workers running on their
    own, reparented away from fio; their inherited environment still names the
    point, which no other process's does.
    """
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for pid in system.pids():
        if pid != os.getpid() and needle in (system.process_environ(pid) or ()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                found.append(pid)
    deadline = time.monotonic() + REAP_WAIT_S
    for pid in found:
        while _alive(pid, system) and time.monotonic() < deadline:
            time.sleep(0.02)
    return found


def _alive(pid: int, system: SystemRoot) -> bool:
    """Running or sleeping, not gone nor a zombie waiting for its new parent to reap it."""
    info = system.process_stat(pid)
    return info is not None and info.state not in ("Z", "X")


@dataclass
class _Targets:
    """Checks, around every point, that each target is still the one the run started with."""

    plan: Plan
    system: SystemRoot = field(default_factory=SystemRoot)
    seen: dict[str, tuple[int, int]] = field(default_factory=dict)

    def check(self, run: PlannedRun) -> None:
        """Raise :class:`TargetVanished` when one of ``run``'s targets is gone or was replaced."""
        # fio's unlink options delete the file after each job on purpose.
        unlinks = any(bool(self.plan.matrix.setting(run.params, o)) for o in ("unlink", "unlink_each_loop"))
        for path in sorted({t for p in run.processes for t in p.targets}):
            problem = self._problem(path, self.plan.locations[path].kind, unlinks)
            if problem is not None:
                raise TargetVanished(f"target {problem}", path)

    def _problem(self, path: str, kind: str, unlinks: bool) -> str | None:
        if kind not in ("file", "block") or (kind == "file" and unlinks):
            return None
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if kind == "file" and path not in self.seen:
                return None  # fio lays a new file out on the first point
            return "vanished (deleted, or its device removed, during the run)"
        except OSError as exc:
            return f"unreachable ({exc.strerror})"
        if kind == "block":
            if not stat.S_ISBLK(info.st_mode):
                return "is no longer a block device"
            identity = (info.st_rdev, 0)
            if _sectors(info.st_rdev, self.system) == 0:
                return "has no medium (device detached or removed during the run)"
        else:
            identity = (info.st_dev, info.st_ino)
        if self.seen.setdefault(path, identity) != identity:
            return "was replaced during the run (deleted and made again?)"
        return None


def _sectors(rdev: int, system: SystemRoot) -> int | None:
    """The device's size in sectors: 0 when the kernel no longer has it, None when sysfs cannot tell."""
    entry = f"sys/dev/block/{devno_text(rdev)}"
    if not system.exists(entry):
        return 0 if system.is_dir("sys/dev/block") else None
    return system.read_int(f"{entry}/size")


@dataclass
class _PointRunner:
    run_dir: RunDir
    plan: Plan
    executor: Executor
    tuner: DeviceTuner | None = None
    parsed: Parsed = field(default_factory=dict)
    live: set[int] = field(default_factory=set)
    system: SystemRoot = field(default_factory=SystemRoot)
    watched: recording.Watched = field(default_factory=dict)
    observed: set[int] = field(default_factory=set)
    """Indexes of the running point's fio processes whose workers the watchers have seen."""
    imported: bool = False
    """Whether :data:`LATER_MODULES` were imported (while the first point ran)."""

    def _one(
        self, process: FioProcess, cwd: Path, timeout: float, token: str, run: PlannedRun
    ) -> tuple[Completed, GroupWatcher]:
        watcher = GroupWatcher()
        started = time.monotonic()

        def poll(pid: int) -> float:
            _check_alive(watcher(pid), self.system)
            seen = len(watcher.workers())
            if seen:
                self._seen(run, process)
            # Quick looks until every worker is seen: a short point's workers can live less than a second.
            if seen < process.workers and time.monotonic() - started < WATCH_QUICK_FOR_S:
                return WATCH_QUICK_S
            return WATCH_POLL_S

        done = self.executor(
            process.argv,
            cwd=cwd,
            timeout=timeout,
            env=minimal_env({TOKEN_VAR: token}),
            poll=poll,
            poll_interval=WATCH_QUICK_S,
            on_start=self.live.add,
        )
        return done, watcher

    def _seen(self, run: PlannedRun, process: FioProcess) -> None:
        """Once every fio of the first point runs with its workers, import :data:`LATER_MODULES` here.

        Not earlier: an import holds the GIL for long stretches, and a watcher
        kept waiting meanwhile could miss a short point's workers altogether.
        The thread keeps off the point's CPUs meanwhile where another CPU is
        online, as the telemetry sampler does.
        """
        self.observed.add(run.processes.index(process))
        if self.imported or len(self.observed) < len(run.processes):
            return
        self.imported = True
        allowed = os.sched_getaffinity(0)
        keep_thread_off(sorted({c for p in run.processes for c in p.cpus}), self.system)
        try:
            for name in LATER_MODULES:
                with contextlib.suppress(ImportError):  # fails again, with its message, where it is used
                    importlib.import_module(name)
        finally:
            os.sched_setaffinity(0, allowed)

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

    def _launch(self, run: PlannedRun, cwd: Path, token: str) -> list[tuple[Completed, GroupWatcher]]:
        self.live.clear()  # the process groups (fio's pid) of this point's fio processes
        self.observed.clear()
        if len(run.processes) == 1:
            return [self._one(run.processes[0], cwd, run.timeout_s, token, run)]
        # One fio per target, all at once (launch: per-target): threads only wait on them.
        pool = ThreadPoolExecutor(max_workers=len(run.processes))
        try:
            futures = [pool.submit(self._one, p, cwd, run.timeout_s, token, run) for p in run.processes]
            return [f.result() for f in futures]
        except BaseException:
            for pgid in self.live:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
            raise
        finally:
            pool.shutdown(wait=True)

    def _judge(
        self, run: PlannedRun, cwd: Path, results: list[tuple[Completed, GroupWatcher]]
    ) -> tuple[Status, str | None, list[list[Row]]]:
        """The point's status, why, and each fio's rows of the frame (read without pandas: the frame comes at the end)."""
        from iobench.results.fioout import read_jobs
        from iobench.results.fioout.rows import FRAME_COLUMNS, job_rows

        error, jobname = FRAME_COLUMNS.index("error"), FRAME_COLUMNS.index("jobname")
        outputs: list[list[Row]] = []
        for process, (done, watcher) in zip(run.processes, results, strict=True):
            # fio reaps a killed worker and exits 0 with that job's numbers cut short, or,
            # when the worker died while starting, waits for it until the timeout.
            worker = _WORKER_SIGNAL.search(done.stderr)
            if worker:
                reason = f"fio worker (pid {worker[1]}) {_killed(int(worker[2]))}"
                if done.timed_out:
                    reason += f"; fio then hung and was stopped after {run.timeout_s:g} s"
                return "failed", reason, outputs
            if done.timed_out:
                return "timeout", f"fio did not finish within {run.timeout_s:g} s and was stopped", outputs
            if done.returncode < 0:
                return "failed", f"fio {_killed(-done.returncode)}", outputs
            if done.returncode != 0:
                return "failed", f"fio exited with status {done.returncode}: {_fio_message(done)}", outputs
            try:
                text = (cwd / process.output).read_text(errors="replace")
                rows = job_rows(read_jobs(text, origin=process.output), process.output)
            except (OSError, ResultsError) as exc:
                # fio exits 0 with an empty output when the disk filled: that is no fio failure.
                probe(cwd, cwd / process.output)
                return "failed", f"fio left no readable results: {exc}", outputs
            failed = next((row for row in rows if row[error]), None)
            if failed is not None:
                return (
                    "failed",
                    f"fio job {failed[jobname]} ended with error {_job_error(failed[error])}",
                    outputs,
                )
            mismatch = check_placement(
                watcher, cpus=process.cpus, job_cpus=process.job_cpus, mem_node=process.mem_node
            )
            if mismatch:
                return "failed", f"placement not as planned: {mismatch}", outputs
            outputs.append(rows)
            self.parsed[f"{run.key}/{process.output}"] = rows
        return "ok", None, outputs

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
                _ended(meta, "skipped", run.reason)
                self.run_dir.commit(cwd, run.key, meta)
                return PointOutcome(run.key, "skipped", run.reason, 0.0)
            try:
                return self._execute(run, cwd, meta)
            except TuningError as exc:
                _ended(meta, "failed", str(exc))
                self.run_dir.commit(cwd, run.key, meta)
                return PointOutcome(run.key, "failed", str(exc), 0.0)
            except KeyboardInterrupt:
                if not cwd.exists():  # the point was saved whole just before the signal came
                    raise
                _ended(meta, "interrupted", "interrupted while fio ran")
                meta.processes = [self._process_meta(p, None) for p in run.processes]
                self.run_dir.commit(cwd, run.key, meta)
                raise
        except RunStorageError as fault:
            self.run_dir.discard(cwd)
            fault.what += f" while saving point {run.key}"
            raise

    def _execute(self, run: PlannedRun, cwd: Path, meta: PointMeta) -> PointOutcome:
        for process in run.processes:
            write_text(cwd / process.jobfile_name, process.jobfile)
        write_text(cwd / "argv.json", json.dumps([list(p.argv) for p in run.processes], indent=2) + "\n")
        self._apply_settings(run)
        meta.settings = _device_settings(self.plan, run)
        started = time.monotonic()
        token = f"{os.getpid()}-{run.key}-{time.monotonic_ns()}"
        sampling = recording.start(self.plan, run, known=self.watched)
        ended_whole = False
        try:
            results = self._launch(run, cwd, token)
            ended_whole = all(d.returncode >= 0 and not d.timed_out for d, _ in results) and not self._left()
        except CommandNotFound:
            probe(cwd, cwd)  # fio cannot start in a directory that was removed
            raise
        except _Killed as dead:
            _ended(meta, "failed", str(dead), started)
            meta.processes = [self._process_meta(p, None) for p in run.processes]
            self.run_dir.commit(cwd, run.key, meta)
            return PointOutcome(run.key, "failed", str(dead), time.monotonic() - started)
        finally:
            if sampling is not None:
                sampling.stop()
            if not ended_whole:
                _reap(token, self.system)
        status, reason, outputs = self._judge(run, cwd, results)
        if sampling is not None:
            sampling.save(cwd, [cwd / p.output for p in run.processes], outputs, status)
        write_text(cwd / "stderr.txt", "".join(done.stderr for done, _ in results))
        _ended(meta, status, reason, started)
        meta.processes = [self._process_meta(p, r) for p, r in zip(run.processes, results, strict=True)]
        self.run_dir.commit(cwd, run.key, meta)
        return PointOutcome(run.key, status, reason, time.monotonic() - started, outputs)

    def _apply_settings(self, run: PlannedRun) -> None:
        """The point's scheduler/readahead; disks an earlier point changed go back to their originals."""
        if self.tuner is None:
            return
        originals = self.tuner.originals()
        for disk in sorted(set(originals) | set(run.settings)):
            wanted = {**originals.get(disk, {}), **run.settings.get(disk, {})}
            scheduler, readahead = wanted.get("scheduler"), wanted.get("readahead_kb")
            self.tuner.apply(
                disk,
                scheduler=None if scheduler is None else str(scheduler),
                readahead_kb=None if readahead is None else int(readahead),
            )

    def _process_meta(
        self, process: FioProcess, result: tuple[Completed, GroupWatcher] | None
    ) -> ProcessRecord:
        data = process.to_json()
        data.pop("jobfile")
        data["sections"] = list(process.sections)
        data["target_disks"] = {t: list(self.plan.locations[t].disks) for t in process.targets}
        if result is not None:
            done, watcher = result
            data.update(
                returncode=done.returncode,
                timed_out=done.timed_out,
                duration_s=round(done.duration_s, 3),
                cpus_observed=watcher.cpus(),
                observed=watcher.to_json(),
            )
        return ProcessRecord.model_validate(data)


def _ended(meta: PointMeta, status: Status, reason: str | None, started: float | None = None) -> None:
    meta.status, meta.reason, meta.finished = status, reason, now()
    if started is not None:
        meta.duration_s = round(time.monotonic() - started, 3)


def _open_resume(resume: str | Path, matrix: Matrix) -> tuple[RunDir, Manifest]:
    run_dir = RunDir.open(resume)
    manifest = run_dir.manifest()
    if manifest.matrix_fingerprint != matrix_fingerprint(matrix):
        raise IobenchError(
            f"{resume}: the matrix differs from the one this run started with "
            f"(see {run_dir.path / 'matrix.yaml'}); resume with that matrix, or start a new run"
        )
    return run_dir, manifest


def run(
    matrix: Matrix,
    *,
    out: str | Path = "results",
    resume: str | Path | None = None,
    allow_write: Sequence[str] = (),
    fail_fast: bool = False,
    progress: Progress | None = None,
    executor: Executor | None = None,
) -> RunResult:
    """Run every point of ``matrix`` and save the results (SPEC §6).

    Parameters
    ----------
    matrix
        From :func:`iobench.load_matrix`.
    out
        Parent of the new run directory ``<name>-<YYYYmmdd-HHMMSS>``.
    resume
        An existing run directory: run only what it is missing (points never
        run, or that failed, timed out or were interrupted).
    allow_write
        Devices that may be written despite a signature (``--allow-write``).
    fail_fast
        Stop after the first point that fails or times out.
    progress
        Receives progress callbacks; nothing is shown by default.
    executor
        Runs each argv (default :func:`iobench.system.process.run_process`).

    Returns
    -------
    RunResult
        ``exit_code`` is 1 when some points failed or timed out.

    Raises
    ------
    RunInterrupted
        On Ctrl-C or SIGTERM, after saving finished points and the frame.
    SafetyError, TopologyError
        Before anything runs, when the plan is refused.
    HostsRefused
        With ``hosts:``, before anything runs: a host is unreachable or fails
        a check (:mod:`iobench.runner.hosts`).
    RunStorageError, TargetVanished
        (:class:`~iobench.errors.EnvironmentFault`, exit status 3) when the run
        directory could not be written (disk full, read-only, removed) or a
        target vanished: device settings restored, no fio left running, every
        finished point kept; the message says what was kept and how to finish.
    """
    if matrix.hosts:  # fio's client here, its servers on the hosts (SPEC §11)
        from iobench.runner.hosts import run_hosts

        return run_hosts(
            matrix,
            out=out,
            resume=resume,
            allow_write=allow_write,
            fail_fast=fail_fast,
            progress=progress,
            executor=executor,
        )
    show: Progress = progress or NullProgress()
    earlier: Manifest | None = None
    resumed: RunDir | None = None
    if resume is not None:
        resumed, earlier = _open_resume(resume, matrix)
    the_plan = plan(matrix, allow_write=tuple(allow_write), seed=earlier.seed if earlier else None)
    check_no_pending(sorted({disk for r in the_plan.runs for disk in r.settings}))
    disks = sorted({disk for location in the_plan.locations.values() for disk in location.disks})
    with _sigterm_as_interrupt(), contextlib.ExitStack() as stack:
        stack.enter_context(device_lock(disks))
        run_dir = resumed or _create(out, matrix)
        todo = [r for r in the_plan.runs if r.key not in run_dir.finished_keys()]
        manifest = start_manifest(earlier, matrix, the_plan)
        try:
            run_dir.write_manifest(manifest)
            run_dir.drop_frame()  # stale once new points land; rebuilt at the end or by load()
        except RunStorageError as early:
            raise _not_started(early, run_dir, matrix, resumed=resumed is not None) from None
        tuner = stack.enter_context(DeviceTuner(run_dir=str(run_dir.path)))
        point_runner = _PointRunner(run_dir, the_plan, executor or run_process, tuner=tuner)
        show.started(the_plan, todo, run_dir.path)
        result, interrupted = conclude(
            lambda: _sweep(point_runner, todo, show, matrix, fail_fast=fail_fast),
            {"": tuner},
            run_dir,
            the_plan,
            manifest,
            point_runner,
        )
    show.finished(result)
    if interrupted:
        raise RunInterrupted(result)
    return result


def conclude(
    sweep: Callable[[], bool],
    tuners: Mapping[str, DeviceTuner],
    run_dir: RunDir,
    the_plan: Plan,
    manifest: Manifest,
    runner: _PointRunner,
) -> tuple[RunResult, bool]:
    """Run ``sweep``, put every disk's settings back, and save the run's end; the result and whether it was interrupted.

    ``tuners`` maps a host's name (``""`` for this machine) to its tuner; the
    manifest keeps each disk's originals as ``host:disk`` (``disk`` here).
    Every tuner is restored whatever happened. A setting that could not be put
    back is an error of its own after a sweep that ended well, and a note on
    the :class:`EnvironmentFault` that stopped it otherwise.
    """
    fault: EnvironmentFault | None = None
    try:
        interrupted = sweep()
    except EnvironmentFault as caught:
        fault, interrupted = caught, False
    manifest.settings_restored = {
        f"{host}:{disk}" if host else disk: settings
        for host, tuner in tuners.items()
        for disk, settings in tuner.originals().items()
    }
    problems = []
    for tuner in tuners.values():
        try:
            tuner.restore()
        except TuningError as problem:
            problems.append(str(problem))
    if fault is not None:
        for text in problems:
            fault.add_note(f"{text}\nrun `iobench restore` to retry")
        raise _stopped(fault, run_dir, the_plan, manifest, runner.parsed) from None
    if problems:
        raise TuningError("\n".join(problems))
    result = _finish(run_dir, the_plan, manifest, runner.parsed, interrupted=interrupted)
    return result, interrupted


def _create(out: str | Path, matrix: Matrix) -> RunDir:
    try:
        return RunDir.create(out, matrix.name, matrix.text)
    except RunStorageError as fault:
        fault.what = f"cannot make the run directory: {fault.what}"
        fault.kept = "nothing ran; no run directory was left"
        fault.finish = f"{remedy(fault)}, then `{shlex.join(['iobench', 'run', matrix.source])}` again"
        raise


def _not_started(
    fault: RunStorageError, run_dir: RunDir, matrix: Matrix, *, resumed: bool
) -> RunStorageError:
    """The run directory could not take its manifest: nothing ran."""
    fault.run_dir = str(run_dir.path)
    fault.what = f"cannot write the manifest: {fault.what}"
    if resumed:
        fault.kept = f"nothing new ran; the points saved before are still in {run_dir.path}"
        fault.finish = f"{remedy(fault)}, then `{_resume_command(matrix, run_dir)}`"
    else:
        run_dir.remove()
        fault.kept = "nothing ran; no run directory was left"
        fault.finish = f"{remedy(fault)}, then `{shlex.join(['iobench', 'run', matrix.source])}` again"
    return fault


def _resume_command(matrix: Matrix, run_dir: RunDir) -> str:
    return shlex.join(["iobench", "run", matrix.source, "--resume", str(run_dir.path)])


def _report_command(run_dir: RunDir) -> str:
    return shlex.join(["iobench", "report", str(run_dir.path)])


def _saved_counts(run_dir: RunDir) -> dict[str, int]:
    with contextlib.suppress(OSError, IobenchError):
        return dict(Counter(str(meta.status) for _, meta in run_dir.point_metas()))
    return {}


def _stopped(
    fault: EnvironmentFault,
    run_dir: RunDir,
    the_plan: Plan,
    manifest: Manifest,
    parsed: Parsed,
) -> EnvironmentFault:
    """Save what the file system still takes and say what was kept and how to finish."""
    fault.run_dir = str(run_dir.path)
    source = the_plan.matrix.source
    if not run_dir.path.is_dir():
        fault.what, fault.path = "the run directory was removed during the run", str(run_dir.path)
        fault.kept = "nothing: the directory and every point saved in it are gone"
        fault.finish = f"start again with `{shlex.join(['iobench', 'run', source])}`"
        return fault
    from iobench.results.rundir import build_frame

    frame_saved = False
    with contextlib.suppress(OSError, IobenchError):
        run_dir.write_frame(build_frame(run_dir, parsed))
        frame_saved = True
    fault.counts = counts = _saved_counts(run_dir)
    with contextlib.suppress(OSError, IobenchError):
        manifest.status, manifest.stopped_by = "stopped", f"{fault.what}: {fault.path}"
        manifest.finished, manifest.counts = now(), counts
        run_dir.write_manifest(manifest)
    done = run_dir.finished_keys() if counts else set()
    left = sum(1 for r in the_plan.runs if r.key not in done)
    kept = (
        f"{describe_counts(counts)} in {run_dir.path}"
        if counts
        else f"no point had finished; {run_dir.path} holds the matrix and manifest"
    )
    fault.kept = kept + ("" if frame_saved or not counts else "; the frame (results.parquet) was not written")
    fault.finish = (
        f"{remedy(fault)}, then `{_resume_command(the_plan.matrix, run_dir)}` "
        f"runs the {left} point{'' if left == 1 else 's'} left"
        + (f"; `{_report_command(run_dir)}` draws the figures" if counts else "")
    )
    return fault


def start_manifest(
    earlier: Manifest | None,
    matrix: Matrix,
    the_plan: Plan,
    machine: dict[str, Any] | None = None,
    hosts: list[dict[str, Any]] | None = None,
) -> Manifest:
    """The manifest of a run starting now, or resumed (``earlier``: keeps its start and resume times).

    ``machine``: the facts of the machine fio's results come back to (default:
    this one, with the plan's topology and targets); ``hosts``: each host's,
    where fio runs on hosts (:mod:`iobench.runner.hosts`).
    """
    if machine is None:
        machine = collect_metadata(
            the_plan.topology,
            the_plan.target_facts(),
            fio_version=matrix.fio_version,
            fio_binary=matrix.fio_binary,
        )
    return Manifest(
        name=matrix.name,
        description=matrix.description,
        matrix_source=matrix.source,
        matrix_fingerprint=matrix_fingerprint(matrix),
        order=matrix.order,
        seed=the_plan.seed,
        repeat=matrix.repeat,
        points=len(matrix.combos),
        drop_caches=matrix.drop_caches,
        machine=MachineFacts.model_validate(machine),
        hosts=hosts or [],
        status="running",
        started=earlier.started if earlier else now(),
        resumed=[*earlier.resumed, now()] if earlier else [],
        settings_restored=earlier.settings_restored if earlier else {},
    )


def _sweep(
    point_runner: _PointRunner, todo: list[PlannedRun], show: Progress, matrix: Matrix, *, fail_fast: bool
) -> bool:
    """Run ``todo`` in order; True when Ctrl-C or SIGTERM stopped it."""
    new_files = [
        t.path
        for t in matrix.targets
        if point_runner.plan.locations[t.path].kind == "file" and not Path(t.path).exists()
    ]
    targets = _Targets(point_runner.plan)
    try:
        for index, planned in enumerate(todo):
            if planned.status == "run":
                targets.check(planned)
            show.point_started(planned, index)
            if matrix.drop_caches and planned.status == "run":
                drop_caches()
            outcome = point_runner(planned)
            if new_files:
                try:
                    remember_created(new_files)
                except OSError as exc:
                    raise RunStorageError.from_os_error(exc) from None
                new_files = []
            show.point_finished(planned, outcome)
            if planned.status == "run":
                targets.check(planned)
            if fail_fast and outcome.status in ("failed", "timeout"):
                break
    except KeyboardInterrupt:
        return True
    return False


def _finish(
    run_dir: RunDir,
    the_plan: Plan,
    manifest: Manifest,
    parsed: Parsed,
    *,
    interrupted: bool,
) -> RunResult:
    from iobench.results.rundir import build_frame

    counts: dict[str, int] = dict(Counter(meta.status for _, meta in run_dir.point_metas()))
    frame = build_frame(run_dir, parsed)
    manifest.status = "interrupted" if interrupted else "finished"
    manifest.finished, manifest.counts = now(), counts
    frame_saved = False
    try:
        run_dir.write_frame(frame)
        frame_saved = True
        run_dir.write_manifest(manifest)
    except RunStorageError as fault:
        fault.run_dir, fault.counts = str(run_dir.path), counts
        fault.kept = (
            ("" if interrupted else "every point: ")
            + f"{describe_counts(counts)} in {run_dir.path}"
            + ("" if frame_saved else "; the frame (results.parquet) was not written")
        )
        fault.finish = (
            f"{remedy(fault)}, then `{_report_command(run_dir)}` "
            + ("draws the figures" if frame_saved else "rebuilds the frame and draws the figures")
            + f" (`{_resume_command(the_plan.matrix, run_dir)}` marks the run finished)"
        )
        raise
    return RunResult(run_dir.path, counts, frame, the_plan)

"""Run a matrix: every point × repeat in turn, each saved the moment it ends — on this machine or on hosts.

:func:`run` is the one runner. It opens the sites the matrix runs on (this
machine, or each host through :mod:`iobench.system.fleet`), plans against
them (:func:`~iobench.planner.plans.plan_points`), locks their disks, and
hands every point to :class:`~iobench.runner.point.PointRunner`. Progress
reaches the caller through a :class:`Progress` object whose methods default
to doing nothing; the library itself never prints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from iobench.errors import (
    EnvironmentFault,
    IobenchError,
    NextStep,
    RunStopped,
    RunStorageError,
    SettingsNotRestored,
    TuningError,
)
from iobench.matrix.model import Matrix
from iobench.planner.plans import (
    Plan,
    PlannedRun,
    host_sites,
    host_specs,
    local_site,
    plan_points,
    target_facts,
)
from iobench.runner import faults, recording
from iobench.runner.point import ClientLaunch, Executor, Launch, LocalLaunch, PointOutcome, PointRunner
from iobench.runner.sites import HostSite, LocalSite, Site, site_disks
from iobench.store.records import MachineFacts, Manifest
from iobench.store.rundir import RunDir, describe_counts, now
from iobench.system.fleet import Connector, Fleet, ssh_connector
from iobench.system.locks import LockWait, exclusive_hold
from iobench.system.metadata import collect_metadata
from iobench.system.process import run_process
from iobench.system.topology import discover_topology
from iobench.system.tuning import DeviceTuner, check_no_pending

if TYPE_CHECKING:
    import pandas as pd

    from iobench.results.assemble import Parsed

__all__ = [
    "NullProgress",
    "PointOutcome",
    "Progress",
    "RunInterrupted",
    "RunResult",
    "matrix_fingerprint",
    "run",
]


class RunInterrupted(IobenchError):
    """Ctrl-C or SIGTERM stopped the run; finished points and the frame were saved."""

    exit_code = 130

    def __init__(self, result: RunResult) -> None:
        self.result = result
        super().__init__(
            f"interrupted: {result.counts.get('ok', 0)} points finished and were saved in {result.run_dir}; "
            "resume the run to finish it"
        )


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C."""


@dataclass
class RunResult:
    """What :func:`run` leaves: the run directory, status counts and the frame."""

    run_dir: Path
    counts: dict[str, int]
    frame: pd.DataFrame | None = field(repr=False)
    plan: Plan = field(repr=False)

    @property
    def exit_code(self) -> int:
        """0 when every point is ok (or skipped), 1 when some failed or timed out (docs/running.md)."""
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
    if matrix.slo is not None:
        data["slo"] = dataclasses.asdict(matrix.slo)
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


def kept_points(resumed: RunDir | None) -> set[str]:
    """The point-runs a resume keeps (ok or skipped with readable files); none for a new run."""
    if resumed is None:
        return set()
    from iobench.results.loading import finished_keys  # pandas: only a resume needs it this early

    return finished_keys(resumed.path)


def _open_resume(resume: str | Path, matrix: Matrix) -> tuple[RunDir, Manifest]:
    run_dir = RunDir.open(resume)
    manifest = run_dir.manifest()
    if manifest.matrix_fingerprint != matrix_fingerprint(matrix):
        raise IobenchError(
            f"{resume}: the matrix differs from the one this run started with "
            f"(see {run_dir.path / 'matrix.yaml'}); resume with that matrix, or start a new run"
        )
    return run_dir, manifest


def _open(
    matrix: Matrix, stack: contextlib.ExitStack, allow_write: Sequence[str], connector: Connector
) -> tuple[dict[str | None, Site], Fleet | None]:
    """The sites the matrix runs on, checked (nothing changed yet): this machine, or every host."""
    if not matrix.hosts:
        facts = local_site(matrix, "/", allow_write)
        return {None: LocalSite(facts)}, None
    fleet = stack.enter_context(
        Fleet(
            host_specs(matrix), fio_version=matrix.fio_version, allow_write=allow_write, connector=connector
        )
    )
    fleet.preflight()
    sites: dict[str | None, Site] = {}
    for facts, host in zip(host_sites(matrix, fleet), fleet.hosts, strict=True):
        sites[facts.host] = HostSite(facts, host)
    return sites, fleet


def run(
    matrix: Matrix,
    *,
    out: str | Path = "results",
    resume: str | Path | None = None,
    allow_write: Sequence[str] = (),
    fail_fast: bool = False,
    progress: Progress | None = None,
    executor: Executor | None = None,
    connector: Connector = ssh_connector,
    lock_wait: LockWait | None = None,
) -> RunResult:
    """Run every point of ``matrix`` and save the results.

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
        Devices that may be written despite a signature (``--allow-write``), on every host too.
    fail_fast
        Stop after the first point that fails or times out.
    progress
        Receives progress callbacks; nothing is shown by default.
    executor
        Runs each fio argv here (default :func:`iobench.system.process.run_process`).
    connector
        With ``hosts:``, makes each host's connection (default OpenSSH; tests pass fakes).
    lock_wait
        Wait this long for a disk another run holds (None: refuse at once).

    Returns
    -------
    RunResult
        ``exit_code`` is 1 when some points failed or timed out.

    Raises
    ------
    RunInterrupted
        On Ctrl-C or SIGTERM, after saving finished points and the frame.
    SafetyError, TopologyError, TuningError
        Before anything runs, when the plan is refused (a disk another run
        holds, a target the guard refuses, a setting a disk cannot take).
    HostsRefused
        With ``hosts:``, before anything runs: a host is unreachable or fails
        a check, or its fio server cannot be started.
    EnvironmentFault
        (exit status 3) when the run directory could not be written (disk
        full, read-only, removed), a target vanished, or a host's connection
        dropped: device settings restored, no fio left running, every
        finished point kept and the frame written where the disk allows;
        the fault says what was kept and how to finish.
    """
    show: Progress = progress or NullProgress()
    earlier: Manifest | None = None
    resumed: RunDir | None = None
    if resume is not None:
        resumed, earlier = _open_resume(resume, matrix)
    with _sigterm_as_interrupt(), contextlib.ExitStack() as stack:
        sites, fleet = _open(matrix, stack, allow_write, connector)
        the_plan = plan_points(
            matrix, [s.facts for s in sites.values()], seed=earlier.seed if earlier else None
        )
        for site in sites.values():
            tuned = {
                key.rpartition(":")[2]
                for r in the_plan.runs
                for key in r.settings
                if (key.rpartition(":")[0] or None) == site.host
            }
            check_no_pending(sorted(tuned), host=site.journal_host)
        for site in sites.values():
            stack.enter_context(site.lock(site_disks(site), lock_wait))
        if None in sites:
            stack.enter_context(exclusive_hold(written_devices(the_plan, sites[None])))
        if fleet is not None:
            fleet.start_servers()
        run_dir = resumed or _create(out, matrix)
        stack.enter_context(run_dir.sweeping())  # readers can tell a running sweep from a killed one
        kept = kept_points(resumed)
        todo = [r for r in the_plan.runs if r.key not in kept]
        probes = None
        if matrix.slo is not None:  # the points are decided one after another by the search
            from iobench.runner.probes import Probes  # numpy and pandas: only for a search

            probes = Probes(the_plan, [s.facts for s in sites.values()], run_dir, kept)
            todo = probes.outline()
        manifest = start_manifest(earlier, matrix, the_plan, fleet)
        try:
            run_dir.write_manifest(manifest)
            run_dir.drop_frame()  # stale once new points land; rebuilt at the end or by load()
        except RunStorageError as early:
            raise faults.not_started(early, run_dir, matrix, resumed=resumed is not None) from None
        tuners = {host: stack.enter_context(site.tuner(str(run_dir.path))) for host, site in sites.items()}
        launch: Launch = LocalLaunch() if fleet is None else ClientLaunch(matrix.fio_binary)
        runner = PointRunner(run_dir, the_plan, sites, executor or run_process, tuners, launch, fleet)
        for host, site in sites.items():
            if isinstance(site, HostSite):
                watch = recording.host_watch(the_plan, site, runner.watched.setdefault(host, {}))
                runner.watches[host] = watch
                site.start_monitor(
                    watch if matrix.telemetry_s is not None else None, matrix.telemetry_s or 1.0
                )
                stack.callback(site.stop_monitor)
        show.started(the_plan, todo, run_dir.path)
        result, interrupted = conclude(
            lambda: _sweep(
                runner,
                probes or todo,
                show,
                matrix,
                fail_fast=fail_fast,
                after=probes.finished if probes else None,
            ),
            tuners,
            run_dir,
            the_plan,
            manifest,
            runner.parsed,
        )
    show.finished(result)
    if interrupted:
        raise RunInterrupted(result)
    return result


def written_devices(the_plan: Plan, site: Site) -> dict[str, int | None]:
    """The block devices some point of ``the_plan`` writes on ``site``, with the device number judged."""
    locations = site.facts.locations
    paths = {
        path
        for r in the_plan.runs
        if r.writes and r.status == "run"
        for process in r.processes
        if process.host == site.host
        for path in process.targets
    }
    return {
        path: (locations[path].identity or (None,))[0] for path in paths if locations[path].kind == "block"
    }


def _create(out: str | Path, matrix: Matrix) -> RunDir:
    try:
        return RunDir.create(out, matrix.name, matrix.text)
    except RunStorageError as fault:
        raise faults.cannot_create(fault, matrix) from None


def conclude(
    sweep: Callable[[], bool],
    tuners: Mapping[str | None, DeviceTuner],
    run_dir: RunDir,
    the_plan: Plan,
    manifest: Manifest,
    parsed: Parsed,
) -> tuple[RunResult, bool]:
    """Run ``sweep``, put every disk's settings back, and save the run's end; the result and whether it was interrupted.

    ``tuners`` maps a host's name (None for this machine) to its tuner; the
    manifest keeps each disk's originals as ``host:disk`` (``disk`` here).
    Every tuner is restored whatever happened. A setting that could not be put
    back is an environment fault after a sweep that ended well, and a note on
    the fault that stopped it otherwise. Nothing after points ran is exit 2.
    """
    fault: EnvironmentFault | None = None
    try:
        interrupted = sweep()
    except EnvironmentFault as caught:
        fault, interrupted = caught, False
    except IobenchError as caught:
        # Things ran and changed: whatever stopped the sweep is no longer "invalid input".
        fault, interrupted = RunStopped(str(caught), run_dir.path), False
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
        raise _stopped(fault, run_dir, the_plan, manifest, parsed) from None
    result = _finish(run_dir, the_plan, manifest, parsed, interrupted=interrupted)
    if problems:
        fault = SettingsNotRestored(
            "device settings could not be put back",
            "; ".join(problems),
            kept=f"every point: {describe_counts(result.counts)} in {run_dir.path}, and the frame",
            run_dir=run_dir.path,
        )
        fault.steps = [NextStep("restore", does="puts the settings back")]
        raise fault
    return result, interrupted


def _stopped(
    fault: EnvironmentFault, run_dir: RunDir, the_plan: Plan, manifest: Manifest, parsed: Parsed
) -> EnvironmentFault:
    """Save the frame of what was kept (where the disk takes it) and complete the fault."""
    from iobench.results.assemble import build_frame
    from iobench.results.framecache import save_frame

    frame_saved = False
    if run_dir.path.is_dir():
        with contextlib.suppress(OSError, IobenchError):
            save_frame(run_dir, build_frame(run_dir, parsed))
            frame_saved = True
    return faults.stopped(fault, run_dir, the_plan, manifest, frame_saved)


def start_manifest(
    earlier: Manifest | None, matrix: Matrix, the_plan: Plan, fleet: Fleet | None = None
) -> Manifest:
    """The manifest of a run starting now, or resumed (``earlier``: keeps its start and resume times).

    ``machine`` is this machine's facts (where fio's results come back to);
    with hosts, ``hosts`` holds each host's, with its targets and notes.
    """
    hosts: list[dict[str, Any]] = []
    if fleet is None:
        machine = collect_metadata(
            the_plan.topology,
            the_plan.target_facts(),
            fio_version=matrix.fio_version,
            fio_binary=matrix.fio_binary,
        )
    else:
        machine = collect_metadata(
            discover_topology("/"), [], fio_version=matrix.fio_version, fio_binary=matrix.fio_binary
        )
        for site, host in zip(the_plan.sites, fleet.hosts, strict=True):
            assert host.facts is not None
            facts = host.facts.machine()
            facts["targets"] = [target_facts(t, site.locations[t.path], site.topology) for t in site.targets]
            if host.notes:
                facts["notes"] = list(host.notes)
            hosts.append(facts)
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
        hosts=hosts,
        status="running",
        started=earlier.started if earlier else now(),
        resumed=[*earlier.resumed, now()] if earlier else [],
        settings_restored=earlier.settings_restored if earlier else {},
    )


def _sweep(
    runner: PointRunner,
    todo: Iterable[PlannedRun],
    show: Progress,
    matrix: Matrix,
    *,
    fail_fast: bool,
    after: Callable[[PlannedRun], None] | None = None,
) -> bool:
    """Run ``todo`` in order; True when Ctrl-C or SIGTERM stopped it.

    ``todo`` may decide its next point from the last: ``after`` hears of each
    point once it is saved, before the next is asked for (:mod:`iobench.runner.probes`).

    Before and after each point its targets are checked on their sites (a
    vanished one stops the run, once the point is saved when found after it); a host whose connection dropped fails its
    points, gets one fresh connection to stop what it left, and the run ends
    as an environment fault once the others are done.
    """
    recovered: dict[str, str] = {}
    runner.note_new_files()
    try:
        for index, planned in enumerate(todo):
            show.point_started(planned, index)
            if matrix.drop_caches and planned.status == "run":
                runner.drop_caches(planned)
            outcome = runner(planned)
            if planned.status == "run":
                runner.remember_files(planned)
            show.point_finished(planned, outcome)
            if after is not None:
                after(planned)
            if runner.fleet is not None:
                faults.recover_lost(runner.fleet, recovered)
            if outcome.fault is not None:
                raise outcome.fault
            if fail_fast and outcome.status in ("failed", "timeout"):
                break
    except KeyboardInterrupt:
        return True
    finally:
        if runner.fleet is not None:
            faults.recover_lost(runner.fleet, recovered)
    lost = faults.lost_hosts(runner.fleet, recovered) if runner.fleet is not None else None
    if lost is not None:
        raise lost
    return False


def _finish(
    run_dir: RunDir,
    the_plan: Plan,
    manifest: Manifest,
    parsed: Parsed,
    *,
    interrupted: bool,
) -> RunResult:
    from iobench.results.assemble import build_frame
    from iobench.results.framecache import save_frame

    counts: dict[str, int] = dict(Counter(meta.status for _, meta in run_dir.point_metas()))
    frame = build_frame(run_dir, parsed)
    manifest.status = "interrupted" if interrupted else "finished"
    manifest.finished, manifest.counts = now(), counts
    frame_saved = False
    try:
        save_frame(run_dir, frame)
        frame_saved = True
        run_dir.write_manifest(manifest)
    except RunStorageError as fault:
        raise faults.not_saved(
            fault, run_dir, counts, frame_saved=frame_saved, interrupted=interrupted, matrix=the_plan.matrix
        ) from None
    return RunResult(run_dir.path, counts, frame, the_plan)

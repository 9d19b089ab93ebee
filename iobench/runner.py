"""Run a plan: one point × repeat at a time, each saved the moment it ends.

Progress reaches the caller through a :class:`Progress` object whose methods
default to doing nothing; the library itself never prints.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import pandas as pd

from iobench.errors import IobenchError, ResultsError, TuningError
from iobench.fioout import parse_fio_text
from iobench.locks import device_lock
from iobench.matrix import Matrix
from iobench.metadata import collect_metadata
from iobench.observe import GroupWatcher, check_placement
from iobench.plan import FioProcess, Plan, PlannedRun, plan
from iobench.process import Completed, minimal_env, run_process
from iobench.results import build_frame
from iobench.safety import remember_created
from iobench.store import RunDir, now
from iobench.tuning import DeviceTuner, check_no_pending, drop_caches, read_settings

Executor = Callable[..., Completed]
"""Runs one argv like :func:`iobench.process.run_process` (tests pass a fake)."""


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
    """How one point × repeat ended, with a headline figure for progress displays."""

    key: str
    status: str
    reason: str | None
    duration_s: float
    iops: float | None = None
    lat_mean_us: float | None = None


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
        """The frame and figures are written."""


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


def _headline(frames: list[pd.DataFrame]) -> tuple[float | None, float | None]:
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if rows.empty or "iops" not in rows or rows["iops"].isna().all():
        return None, None
    iops = float(rows["iops"].sum())
    weights = rows["iops"].astype("Float64")
    lat = rows["lat_mean_us"].astype("Float64")
    valid = lat.notna() & weights.notna() & (weights > 0)
    mean = float((lat[valid] * weights[valid]).sum() / weights[valid].sum()) if valid.any() else None
    return iops, mean


def _fio_message(done: Completed) -> str:
    lines = [ln.strip() for ln in (done.stderr + "\n" + done.stdout).splitlines() if ln.strip()]
    useful = [ln for ln in lines if ln.startswith("fio:") or "error" in ln.lower()] or lines
    return "; ".join(useful[-3:]) or f"fio exited with status {done.returncode}"


@dataclass
class _PointRunner:
    run_dir: RunDir
    plan: Plan
    executor: Executor
    tuner: DeviceTuner | None = None
    parsed: dict[str, pd.DataFrame] = field(default_factory=dict)
    live: set[int] = field(default_factory=set)

    def _one(self, process: FioProcess, cwd: Path, timeout: float) -> tuple[Completed, GroupWatcher]:
        watcher = GroupWatcher()
        done = self.executor(
            process.argv,
            cwd=cwd,
            timeout=timeout,
            env=minimal_env(),
            poll=watcher,
            poll_interval=0.25,
            on_start=self.live.add,
        )
        return done, watcher

    def _launch(self, run: PlannedRun, cwd: Path) -> list[tuple[Completed, GroupWatcher]]:
        if len(run.processes) == 1:
            return [self._one(run.processes[0], cwd, run.timeout_s)]
        # One fio per target, all at once (launch: per-target): threads only wait on them.
        self.live.clear()
        pool = ThreadPoolExecutor(max_workers=len(run.processes))
        try:
            futures = [pool.submit(self._one, p, cwd, run.timeout_s) for p in run.processes]
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
    ) -> tuple[str, str | None, list[pd.DataFrame]]:
        frames: list[pd.DataFrame] = []
        for process, (done, watcher) in zip(run.processes, results, strict=True):
            if done.timed_out:
                return "timeout", f"fio did not finish within {run.timeout_s:g} s and was stopped", frames
            if done.returncode != 0:
                return "failed", f"fio exited with status {done.returncode}: {_fio_message(done)}", frames
            try:
                frame = parse_fio_text(
                    (cwd / process.output).read_text(errors="replace"), origin=process.output
                )
            except (OSError, ResultsError) as exc:
                return "failed", f"fio left no readable results: {exc}", frames
            errors = frame[frame["error"].fillna(0) != 0]
            if not errors.empty:
                first = errors.iloc[0]
                return "failed", f"fio job {first['jobname']} ended with error {first['error']}", frames
            mismatch = check_placement(
                watcher, cpus=process.cpus, job_cpus=process.job_cpus, mem_node=process.mem_node
            )
            if mismatch:
                return "failed", f"placement not as planned: {mismatch}", frames
            frames.append(frame)
            self.parsed[f"{run.key}/{process.output}"] = frame
        return "ok", None, frames

    def __call__(self, run: PlannedRun) -> PointOutcome:
        meta: dict[str, Any] = {
            "key": run.key,
            "point": run.point,
            "repeat": run.repeat,
            "params": run.params,
            "values": run.values,
            "writes": run.writes,
            "started": now(),
        }
        runtime = run.runtime_s
        meta["runtime_requested_ms"] = None if runtime is None else round(runtime * 1000)
        if run.status == "skipped":
            meta.update(status="skipped", reason=run.reason, processes=[], finished=now())
            self.run_dir.commit(self.run_dir.staging(run.key), run.key, meta)
            return PointOutcome(run.key, "skipped", run.reason, 0.0)
        cwd = self.run_dir.staging(run.key)
        try:
            return self._execute(run, cwd, meta)
        except TuningError as exc:
            meta.update(status="failed", reason=str(exc), processes=[], finished=now())
            self.run_dir.commit(cwd, run.key, meta)
            return PointOutcome(run.key, "failed", str(exc), 0.0)
        except KeyboardInterrupt:
            meta.update(status="interrupted", reason="interrupted while fio ran", finished=now())
            meta["processes"] = [self._process_meta(p, None) for p in run.processes]
            self.run_dir.commit(cwd, run.key, meta)
            raise

    def _execute(self, run: PlannedRun, cwd: Path, meta: dict[str, Any]) -> PointOutcome:
        for process in run.processes:
            (cwd / process.jobfile_name).write_text(process.jobfile)
        (cwd / "argv.json").write_text(json.dumps([list(p.argv) for p in run.processes], indent=2) + "\n")
        self._apply_settings(run)
        meta["settings"] = _device_settings(self.plan, run)
        started = time.monotonic()
        results = self._launch(run, cwd)
        status, reason, frames = self._judge(run, cwd, results)
        (cwd / "stderr.txt").write_text("".join(done.stderr for done, _ in results))
        meta.update(
            status=status, reason=reason, finished=now(), duration_s=round(time.monotonic() - started, 3)
        )
        meta["processes"] = [self._process_meta(p, r) for p, r in zip(run.processes, results, strict=True)]
        self.run_dir.commit(cwd, run.key, meta)
        iops, lat = _headline(frames)
        return PointOutcome(run.key, status, reason, time.monotonic() - started, iops, lat)

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
    ) -> dict[str, Any]:
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
        return data


def _warm_up_plots() -> None:
    import matplotlib.backends.backend_agg  # noqa: F401

    import iobench.plots  # noqa: F401


def _open_resume(resume: str | Path, matrix: Matrix) -> tuple[RunDir, dict[str, Any]]:
    run_dir = RunDir.open(resume)
    manifest = run_dir.manifest()
    if manifest.get("matrix_fingerprint") != matrix_fingerprint(matrix):
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
    figures: bool = True,
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
        Runs each argv (default :func:`iobench.process.run_process`).
    figures
        Draw the default figures into ``figures/`` at the end.

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
    """
    show: Progress = progress or NullProgress()
    manifest: dict[str, Any] = {}
    resumed: RunDir | None = None
    if resume is not None:
        resumed, manifest = _open_resume(resume, matrix)
    the_plan = plan(matrix, allow_write=tuple(allow_write), seed=manifest.get("seed"))
    check_no_pending(sorted({disk for r in the_plan.runs for disk in r.settings}))
    disks = sorted({disk for location in the_plan.locations.values() for disk in location.disks})
    with _sigterm_as_interrupt(), contextlib.ExitStack() as stack:
        stack.enter_context(device_lock(disks))
        run_dir = resumed or RunDir.create(out, matrix.name, matrix.text)
        todo = [r for r in the_plan.runs if r.key not in run_dir.finished_keys()]
        _start_manifest(manifest, matrix, the_plan, resumed=resumed is not None)
        run_dir.write_manifest(manifest)
        if figures:
            # matplotlib takes a third of a second to import: do it while fio runs, not after.
            threading.Thread(target=_warm_up_plots, name="iobench-warm-up", daemon=True).start()
        tuner = stack.enter_context(DeviceTuner(run_dir=str(run_dir.path)))
        point_runner = _PointRunner(run_dir, the_plan, executor or run_process, tuner=tuner)
        show.started(the_plan, todo, run_dir.path)
        interrupted = _sweep(point_runner, todo, show, matrix, fail_fast=fail_fast)
        manifest["settings_restored"] = tuner.originals()
        tuner.restore()
        result = _finish(
            run_dir, the_plan, manifest, point_runner.parsed, interrupted=interrupted, figures=figures
        )
    show.finished(result)
    if interrupted:
        raise RunInterrupted(result)
    return result


def _start_manifest(manifest: dict[str, Any], matrix: Matrix, the_plan: Plan, *, resumed: bool) -> None:
    manifest.update(
        name=matrix.name,
        description=matrix.description,
        matrix_source=matrix.source,
        matrix_fingerprint=matrix_fingerprint(matrix),
        order=matrix.order,
        seed=the_plan.seed,
        repeat=matrix.repeat,
        points=len(matrix.combos),
        drop_caches=matrix.drop_caches,
        machine=collect_metadata(the_plan),
        status="running",
    )
    manifest.setdefault("started", now())
    manifest.setdefault("resumed", [])
    if resumed:
        manifest["resumed"].append(now())


def _sweep(
    point_runner: _PointRunner, todo: list[PlannedRun], show: Progress, matrix: Matrix, *, fail_fast: bool
) -> bool:
    """Run ``todo`` in order; True when Ctrl-C or SIGTERM stopped it."""
    new_files = [
        t.path
        for t in matrix.targets
        if point_runner.plan.locations[t.path].kind == "file" and not Path(t.path).exists()
    ]
    try:
        for index, planned in enumerate(todo):
            show.point_started(planned, index)
            if matrix.drop_caches and planned.status == "run":
                drop_caches()
            outcome = point_runner(planned)
            if new_files:
                remember_created(new_files)
                new_files = []
            show.point_finished(planned, outcome)
            if fail_fast and outcome.status in ("failed", "timeout"):
                break
    except KeyboardInterrupt:
        return True
    return False


def _finish(
    run_dir: RunDir,
    the_plan: Plan,
    manifest: dict[str, Any],
    parsed: dict[str, pd.DataFrame],
    *,
    interrupted: bool,
    figures: bool,
) -> RunResult:
    counts = Counter(meta.get("status", "?") for _, meta in run_dir.point_metas())
    frame = build_frame(run_dir, parsed)
    run_dir.write_frame(frame)
    if figures and not interrupted and "iops" in frame and frame["iops"].notna().any():
        from iobench.plots import default_figures

        default_figures(frame, run_dir.figures)
    manifest.update(status="interrupted" if interrupted else "finished", finished=now(), counts=dict(counts))
    run_dir.write_manifest(manifest)
    return RunResult(run_dir.path, dict(counts), frame, the_plan)

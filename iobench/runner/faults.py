"""When the machine fails under a run: what was kept, and how to finish, as facts.

Each function completes an :class:`~iobench.errors.EnvironmentFault` (exit
status 3) with what survived in the run directory and the steps that finish
the work (:class:`~iobench.errors.NextStep`: resume, report, restore, run
again); the CLI turns the steps into commands.
"""

from __future__ import annotations

import contextlib
from collections import Counter

from iobench.errors import EnvironmentFault, HostLost, IobenchError, NextStep, RunStorageError
from iobench.matrix.model import Matrix
from iobench.planner.plans import Plan
from iobench.store.records import Manifest
from iobench.store.rundir import RunDir, describe_counts, now, remedy
from iobench.system.fleet import Fleet


def cannot_create(fault: RunStorageError, matrix: Matrix) -> RunStorageError:
    """The run directory could not be made: nothing ran."""
    fault.what = f"cannot make the run directory: {fault.what}"
    fault.kept = "nothing ran; no run directory was left"
    fault.remedy = remedy(fault)
    fault.steps = [NextStep("run", matrix=matrix.source)]
    return fault


def not_started(fault: RunStorageError, run_dir: RunDir, matrix: Matrix, *, resumed: bool) -> RunStorageError:
    """The run directory could not take its manifest: nothing ran."""
    fault.run_dir = str(run_dir.path)
    fault.what = f"cannot write the manifest: {fault.what}"
    fault.remedy = remedy(fault)
    if resumed:
        fault.kept = f"nothing new ran; the points saved before are still in {run_dir.path}"
        fault.steps = [NextStep("resume", run_dir=str(run_dir.path), matrix=matrix.source)]
    else:
        run_dir.remove()
        fault.kept = "nothing ran; no run directory was left"
        fault.steps = [NextStep("run", matrix=matrix.source)]
    return fault


def saved_counts(run_dir: RunDir) -> dict[str, int]:
    """The points saved in ``run_dir``, by status (empty when it cannot be read)."""
    with contextlib.suppress(OSError, IobenchError):
        return dict(Counter(str(meta.status) for _, meta in run_dir.point_metas()))
    return {}


def stopped(
    fault: EnvironmentFault, run_dir: RunDir, the_plan: Plan, manifest: Manifest, frame_saved: bool
) -> EnvironmentFault:
    """Record in the manifest that the run stopped, and say what was kept and how to finish.

    ``frame_saved``: whether the caller could write the frame of the points saved.
    """
    fault.run_dir = str(run_dir.path)
    source = the_plan.matrix.source
    fault.remedy = remedy(fault)
    if not run_dir.path.is_dir():
        fault.what, fault.path = "the run directory was removed during the run", str(run_dir.path)
        fault.kept = "nothing: the directory and every point saved in it are gone"
        fault.remedy = ""
        fault.steps = [NextStep("run", matrix=source)]
        return fault
    fault.counts = counts = saved_counts(run_dir)
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
    fault.steps = [NextStep("resume", run_dir=str(run_dir.path), matrix=source, left=left)]
    if counts:
        fault.steps.append(NextStep("report", run_dir=str(run_dir.path), does="draws the figures"))
    if isinstance(fault, HostLost):
        fault.steps.insert(0, NextStep("restore", does="puts back what was left changed on the host"))
    return fault


def not_saved(
    fault: RunStorageError,
    run_dir: RunDir,
    counts: dict[str, int],
    *,
    frame_saved: bool,
    interrupted: bool,
    matrix: Matrix,
) -> RunStorageError:
    """Every point ran, but the frame or the manifest could not be written."""
    fault.run_dir, fault.counts = str(run_dir.path), counts
    fault.kept = (
        ("" if interrupted else "every point: ")
        + f"{describe_counts(counts)} in {run_dir.path}"
        + ("" if frame_saved else "; the frame (results.parquet) was not written")
    )
    fault.remedy = remedy(fault)
    fault.steps = [
        NextStep(
            "report",
            run_dir=str(run_dir.path),
            does="draws the figures" if frame_saved else "rebuilds the frame and draws the figures",
        ),
        NextStep(
            "resume", run_dir=str(run_dir.path), matrix=matrix.source, left=0, does="marks the run finished"
        ),
    ]
    return fault


def recover_lost(fleet: Fleet, recovered: dict[str, str]) -> None:
    """Once per host whose connection dropped: a fresh connection stops its server (see :meth:`Fleet.recover`)."""
    for host in fleet.hosts:
        if host.lost is not None and host.name not in recovered:
            recovered[host.name] = fleet.recover(host)


def lost_hosts(fleet: Fleet, recovered: dict[str, str]) -> HostLost | None:
    """The fault to stop on when some host's connection dropped during the run, or None."""
    lost = [h for h in fleet.hosts if h.lost is not None]
    if not lost:
        return None
    names = " and ".join(f"host {h.name}" for h in lost)
    fault = HostLost(
        f"the SSH connection to {names} dropped during the run",
        ", ".join(h.spec.target.destination for h in lost),
    )
    for host in lost:
        fault.add_note(recovered.get(host.name, str(host.lost)))
    return fault

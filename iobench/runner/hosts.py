"""Running a plan on hosts (SPEC §11): one ``fio --client`` per point, one fio server per host.

:func:`run_hosts` is :func:`iobench.run` for a matrix with ``hosts:``. Before
the run directory exists, every host is checked (:meth:`~iobench.system.hosts.Fleet.preflight`),
planned against its own topology and given its fio server behind an SSH
forward; any refusal is exit status 2 with nothing left anywhere. Then each
point is one command here::

    fio --output-format=json+ --output=fio.json \\
        --client=127.0.0.1,<port of a> [--readonly] job-a.fio \\
        --client=127.0.0.1,<port of b> job-b.fio

while a thread per host reads its ``/proc`` to see where the jobs ran.
Each host's share of the output is judged on its own: a host that dies fails
the points it is part of with the reason, later points on other hosts go on
(with the ``host`` axis; without it every point needs every host), and
``--resume`` runs what is missing. Device settings are applied and journalled
per host; servers, forwards and connections are stopped on every way out.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iobench.errors import IobenchError, ResultsError, RunStorageError, TuningError
from iobench.matrix.model import Matrix
from iobench.planner.hosts import client_argv, host_specs, host_targets, plan_on_fleet
from iobench.planner.plans import FioProcess, Plan, PlannedRun, target_facts
from iobench.results.fioout.clients import client_key, client_rows, host_share
from iobench.results.fioout.rows import FRAME_COLUMNS, Row
from iobench.results.rundir import parsed_key
from iobench.runner.sweep import (
    TOKEN_VAR,
    Executor,
    NullProgress,
    PointOutcome,
    Progress,
    RunInterrupted,
    RunResult,
    _create,
    _ended,
    _fio_message,
    _job_error,
    _not_started,
    _open_resume,
    _PointRunner,
    _reap,
    _sigterm_as_interrupt,
    conclude,
    start_manifest,
)
from iobench.store.records import Manifest, PointMeta, ProcessRecord, Status
from iobench.store.rundir import RunDir, write_text
from iobench.system.cpulist import parse_cpulist
from iobench.system.hosts import Connector, Fleet, Host, Observers, RemoteMachine, kill_trees, ssh_connector
from iobench.system.metadata import collect_metadata
from iobench.system.observe import GroupWatcher, Observed, check_placement
from iobench.system.process import Completed, minimal_env, run_process
from iobench.system.remote import RemoteRoot, descendants_in, proc_table
from iobench.system.safety import remember_created
from iobench.system.topology import discover_topology
from iobench.system.tuning import DeviceTuner, check_no_pending, read_settings

__all__ = ["run_hosts"]

OUTPUT = "fio.json"


def _watcher(observers: Observers | None, host: str) -> GroupWatcher:
    """What a host's /proc showed of its fio jobs, as the local placement check reads it."""
    watcher = GroupWatcher()
    for worker in (observers.seen.get(host, {}) if observers is not None else {}).values():
        if not worker.settled:
            continue
        with contextlib.suppress(IobenchError):
            cpus = parse_cpulist(worker.cpus)
            watcher.seen[worker.pid] = Observed(
                worker.pid, worker.name, False, cpus, worker.mems, worker.policy
            )
    return watcher


def _server_lines(text: str, hostname: str | None) -> list[str]:
    """What a host's fio server said (``<hostname> fio: ...`` lines in the client's output)."""
    if not hostname:
        return []
    mark = f"<{hostname}> "
    lines = [ln[len(mark) :].strip() for ln in text.splitlines() if ln.startswith(mark)]
    return [ln for ln in lines if ln.startswith("fio:") or "error" in ln.lower()]


@dataclass
class _HostPointRunner(_PointRunner):
    """A :class:`~iobench.runner.sweep._PointRunner` whose points run on the fleet's hosts."""

    fleet: Fleet | None = None
    tuners: dict[str, DeviceTuner] = field(default_factory=dict)
    created: dict[str, list[str]] = field(default_factory=dict)

    def _hosts_of(self, run: PlannedRun) -> list[Host]:
        assert self.fleet is not None
        named = self.fleet.by_name()
        return [named[name] for name in dict.fromkeys(p.host for p in run.processes if p.host is not None)]

    def _facts(self, host: str) -> Any:
        assert self.fleet is not None
        facts = self.fleet.by_name()[host].facts
        assert facts is not None
        return facts

    def _apply_settings(self, run: PlannedRun) -> None:
        """Each host's settings of the point; disks an earlier point changed go back to their originals."""
        assert self.fleet is not None
        wanted_by_host: dict[str, dict[str, dict[str, Any]]] = {}
        for key, values in run.settings.items():
            name, _, disk = key.partition(":")
            wanted_by_host.setdefault(name, {})[disk] = values

        def apply(host: Host) -> None:
            tuner = self.tuners.get(host.name)
            if tuner is None:
                return
            wanted = wanted_by_host.get(host.name, {})
            originals = tuner.originals()
            for disk in sorted(set(originals) | set(wanted)):
                values = {**originals.get(disk, {}), **wanted.get(disk, {})}
                scheduler, readahead = values.get("scheduler"), values.get("readahead_kb")
                tuner.apply(
                    disk,
                    scheduler=None if scheduler is None else str(scheduler),
                    readahead_kb=None if readahead is None else int(readahead),
                )

        problems = self.fleet.each(apply, [h for h in self._hosts_of(run) if h.name in self.tuners])
        if problems:
            raise TuningError("; ".join(f"{who}: {why}" for who, why in problems.items()))

    def _settings_now(self, run: PlannedRun) -> dict[str, dict[str, Any]]:
        """Scheduler and readahead of every disk under the point's targets, per host, read now."""
        assert self.fleet is not None
        found: dict[str, dict[str, Any]] = {}

        def read(host: Host) -> None:
            facts = self._facts(host.name)
            remote = RemoteRoot(host.connection, snapshot=facts.snapshot.root)
            disks = {
                d
                for p in run.processes
                if p.host == host.name
                for t in p.targets
                for d in facts.locations[t].disks
            }
            for disk in sorted(disks):
                with contextlib.suppress(IobenchError):
                    found[f"{host.name}:{disk}"] = dict(read_settings(disk, system=remote))

        self.fleet.each(read, self._hosts_of(run))
        return found

    def _failed_early(self, run: PlannedRun, cwd: Path, meta: PointMeta, reason: str) -> PointOutcome:
        _ended(meta, "failed", reason)
        meta.processes = [self._host_meta(p, None, None) for p in run.processes]
        self.run_dir.commit(cwd, run.key, meta)
        return PointOutcome(run.key, "failed", reason, 0.0)

    def _execute(self, run: PlannedRun, cwd: Path, meta: PointMeta) -> PointOutcome:
        assert self.fleet is not None
        hosts = self._hosts_of(run)
        down = [h for h in hosts if not h.alive() or h.server is None]
        if down:
            reason = "; ".join(h.down or f"{h.describe()}: no fio server" for h in down)
            return self._failed_early(run, cwd, meta, reason)
        clients = {h.name: h.server.client for h in hosts if h.server is not None}
        argv = client_argv(self.plan.matrix.fio_binary, run.processes, clients, OUTPUT)
        for process in run.processes:
            write_text(cwd / process.jobfile_name, process.jobfile)
        write_text(cwd / "argv.json", json.dumps([argv], indent=2) + "\n")
        try:
            self._apply_settings(run)
        except TuningError as exc:
            return self._failed_early(run, cwd, meta, str(exc))
        meta.settings = self._settings_now(run)
        started = time.monotonic()
        token = f"{os.getpid()}-{run.key}-{time.monotonic_ns()}"
        observers = self.fleet.observe(hosts, limit_s=run.timeout_s)
        try:
            with observers:
                done = self.executor(
                    argv,
                    cwd=cwd,
                    timeout=run.timeout_s,
                    env=minimal_env({TOKEN_VAR: token}),
                    on_start=self.live.add,
                )
        except BaseException:
            self._stop_jobs(hosts)
            raise
        finally:
            _reap(token, self.system)
        if done.timed_out:
            self._stop_jobs(hosts)
        status, why, outputs = self._judge_hosts(run, cwd, done, observers)
        write_text(cwd / "stderr.txt", done.stderr)
        _ended(meta, status, why, started)
        meta.processes = [self._host_meta(p, done, observers) for p in run.processes]
        self.run_dir.commit(cwd, run.key, meta)
        return PointOutcome(run.key, status, why, time.monotonic() - started, outputs)

    def _stop_jobs(self, hosts: Sequence[Host]) -> None:
        """Stop what a host's server still runs for this point (its children), keeping the server."""
        assert self.fleet is not None

        def stop(host: Host) -> None:
            if host.server is None or host.server.pid is None:
                return
            children = descendants_in(proc_table(host.connection), host.server.pid)
            kill_trees(host, [pid for pid, depth in children.items() if depth == 1])

        self.fleet.each(stop, [h for h in hosts if h.down is None])

    def _judge_hosts(
        self, run: PlannedRun, cwd: Path, done: Completed, observers: Observers
    ) -> tuple[Status, str | None, list[list[Row]]]:
        """The point's status and reason (each failed host's, named), and each host's rows of the frame."""
        if done.timed_out:
            reason = f"fio did not finish within {run.timeout_s:g} s and was stopped"
            return "timeout", reason, []
        output = cwd / OUTPUT
        text = output.read_text(errors="replace") if output.is_file() else ""
        assert self.fleet is not None
        named = self.fleet.by_name()
        hosts = [named[p.host] for p in run.processes if p.host is not None]
        clients = {client_key(h.server.client): h.name for h in hosts if h.server is not None}
        everything = None
        # Parsed once for every host (not once per host: the output grows with the hosts).
        if text:
            with contextlib.suppress(ResultsError):
                everything = client_rows(text, clients, origin=str(output))
        failed: dict[str, str] = {}
        outputs: list[list[Row]] = []
        for process, host in zip(run.processes, hosts, strict=True):
            rows = None if everything is None else host_share(everything, host.name, process.sections)
            problem = self._judge_one(host, process, rows, text, observers)
            if problem is not None:
                failed.setdefault(host.name, problem)
            elif rows:
                outputs.append(rows)
                self.parsed[parsed_key(run.key, process)] = rows
        if not failed and done.returncode != 0:
            return "failed", f"fio client exited with status {done.returncode}: {_fio_message(done)}", outputs
        if failed:
            return "failed", "; ".join(f"host {name}: {why}" for name, why in failed.items()), outputs
        return "ok", None, outputs

    def _judge_one(
        self, host: Host, process: FioProcess, rows: list[Row] | None, text: str, observers: Observers
    ) -> str | None:
        """What went wrong with one host's share of the point, or None."""
        assert self.fleet is not None
        if not rows:
            if not host.alive() or not self.fleet.server_alive(host):
                host.down = host.down or f"{host.describe()}: its fio server is gone"
                return f"lost during the point ({host.down})"
            said = _server_lines(text, self._facts(host.name).hostname)
            return "fio reported no results" + (f": {'; '.join(said[-3:])}" if said else "")
        error, jobname = FRAME_COLUMNS.index("error"), FRAME_COLUMNS.index("jobname")
        failed = next((row for row in rows if row[error]), None)
        if failed is not None:
            return f"fio job {failed[jobname]} ended with error {_job_error(failed[error])}"
        mismatch = check_placement(
            _watcher(observers, host.name),
            cpus=process.cpus,
            job_cpus=process.job_cpus,
            mem_node=process.mem_node,
        )
        if mismatch:
            return f"placement not as planned: {mismatch}"
        return None

    def _host_meta(
        self, process: FioProcess, done: Completed | None, observers: Observers | None
    ) -> ProcessRecord:
        assert process.host is not None and self.fleet is not None
        host = self.fleet.by_name()[process.host]
        facts = self._facts(process.host)
        data = process.to_json()
        data.pop("jobfile")
        data["sections"] = list(process.sections)
        data["target_disks"] = {
            t: [f"{host.name}:{d}" for d in facts.locations[t].disks] for t in process.targets
        }
        if host.server is not None:
            data["client"] = host.server.client
            data["client_port"] = host.server.port
        if done is not None:
            watcher = _watcher(observers, host.name)
            data.update(
                returncode=done.returncode,
                timed_out=done.timed_out,
                duration_s=round(done.duration_s, 3),
                cpus_observed=watcher.cpus(),
                observed=watcher.to_json(),
            )
        return ProcessRecord.model_validate(data)

    def _process_meta(self, process: FioProcess, result: Any) -> ProcessRecord:
        """A process's meta where the point stopped without results (Ctrl-C)."""
        return self._host_meta(process, None, None)

    def remember_files(self, run: PlannedRun) -> None:
        """Files fio just created on a host may be written by later runs (the registry keys them by host)."""
        assert self.fleet is not None
        for host in self._hosts_of(run):
            paths = self.created.pop(host.name, [])
            facts = self._facts(host.name)
            if paths and host.down is None:
                with contextlib.suppress(IobenchError, OSError):
                    remember_created(paths, RemoteMachine(host, facts.snapshot))


def _host_manifest(earlier: Manifest | None, matrix: Matrix, the_plan: Plan, fleet: Fleet) -> Manifest:
    """The manifest of :func:`~iobench.runner.sweep.run`; ``machine`` is the client, ``hosts`` each host's facts."""
    hosts = []
    for spec, host in zip(matrix.hosts, fleet.hosts, strict=True):
        facts = host.facts
        assert facts is not None
        machine = facts.machine()
        machine["targets"] = [
            target_facts(t, facts.locations[t.path], facts.topology) for t in host_targets(matrix, spec)
        ]
        hosts.append(machine)
    client = collect_metadata(
        discover_topology("/"), [], fio_version=matrix.fio_version, fio_binary=matrix.fio_binary
    )
    return start_manifest(earlier, matrix, the_plan, machine=client, hosts=hosts)


def _host_record(host: Host) -> dict[str, Any]:
    """How journals name the host: how it is reached, labelled with its frame name."""
    return host.spec.target.to_json() | {"label": host.name}


def _drop_caches(host: Host) -> None:
    host.run(["sync"], timeout=600)
    RemoteRoot(host.connection).write_attribute("/proc/sys/vm/drop_caches", "3")


def _sweep_hosts(
    runner: _HostPointRunner, todo: list[PlannedRun], show: Progress, matrix: Matrix, *, fail_fast: bool
) -> bool:
    """Run ``todo`` in order; True when Ctrl-C or SIGTERM stopped it."""
    assert runner.fleet is not None
    for spec, host in zip(matrix.hosts, runner.fleet.hosts, strict=True):
        assert host.facts is not None
        runner.created[host.name] = [
            t.path
            for t in host_targets(matrix, spec)
            if host.facts.locations[t.path].kind == "file" and not host.facts.snapshot.targets[t.path].exists
        ]
    try:
        for index, planned in enumerate(todo):
            show.point_started(planned, index)
            if matrix.drop_caches and planned.status == "run":
                runner.fleet.each(_drop_caches, [h for h in runner._hosts_of(planned) if h.down is None])
            outcome = runner(planned)
            if planned.status == "run":
                runner.remember_files(planned)
            show.point_finished(planned, outcome)
            if fail_fast and outcome.status in ("failed", "timeout"):
                break
    except KeyboardInterrupt:
        return True
    return False


def run_hosts(
    matrix: Matrix,
    *,
    out: str | Path = "results",
    resume: str | Path | None = None,
    allow_write: Sequence[str] = (),
    fail_fast: bool = False,
    progress: Progress | None = None,
    executor: Executor | None = None,
    connector: Connector = ssh_connector,
) -> RunResult:
    """:func:`iobench.run` for a matrix with ``hosts:`` (see the module's description).

    Parameters
    ----------
    matrix, out, resume, allow_write, fail_fast, progress, executor
        As for :func:`iobench.run`; ``allow_write`` devices apply on every host,
        ``executor`` runs the fio client here.
    connector
        Makes each host's connection (default OpenSSH; tests pass fakes).

    Raises
    ------
    HostsRefused
        Before anything runs: a host is unreachable or fails a check, or its
        fio server cannot be started (naming the host and the fix).
    RunInterrupted
        On Ctrl-C or SIGTERM, after saving finished points and the frame.
    """
    show: Progress = progress or NullProgress()
    earlier: Manifest | None = None
    resumed: RunDir | None = None
    if resume is not None:
        resumed, earlier = _open_resume(resume, matrix)
    specs = host_specs(matrix)
    with (
        _sigterm_as_interrupt(),
        Fleet(specs, fio_version=matrix.fio_version, allow_write=allow_write, connector=connector) as fleet,
        contextlib.ExitStack() as stack,
    ):
        fleet.preflight()
        the_plan = plan_on_fleet(matrix, fleet, seed=earlier.seed if earlier else None)
        for host in fleet.hosts:
            disks = {
                k.partition(":")[2]
                for r in the_plan.runs
                for k in r.settings
                if k.partition(":")[0] == host.name
            }
            check_no_pending(sorted(disks), host=_host_record(host))
        fleet.start_servers()
        run_dir = resumed or _create(out, matrix)
        todo = [r for r in the_plan.runs if r.key not in run_dir.finished_keys()]
        manifest = _host_manifest(earlier, matrix, the_plan, fleet)
        try:
            run_dir.write_manifest(manifest)
            run_dir.drop_frame()
        except RunStorageError as early:
            raise _not_started(early, run_dir, matrix, resumed=resumed is not None) from None
        tuners = {}
        for host in fleet.hosts:
            assert host.facts is not None
            tuners[host.name] = stack.enter_context(
                DeviceTuner(
                    run_dir=str(run_dir.path),
                    system=RemoteRoot(host.connection, snapshot=host.facts.snapshot.root),
                    host=_host_record(host),
                )
            )
        runner = _HostPointRunner(run_dir, the_plan, executor or run_process, fleet=fleet, tuners=tuners)
        show.started(the_plan, todo, run_dir.path)
        result, interrupted = conclude(
            lambda: _sweep_hosts(runner, todo, show, matrix, fail_fast=fail_fast),
            tuners,
            run_dir,
            the_plan,
            manifest,
            runner,
        )
    show.finished(result)
    if interrupted:
        raise RunInterrupted(result)
    return result

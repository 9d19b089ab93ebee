"""The points of an ``slo:`` run, decided one after another by the search (docs/slo.md).

:class:`Probes` is what the sweep iterates instead of the plan's fixed list:
for every combination of the other axes it plans the load the search asks
for next as a point of its own, and once the sweep has run and saved it,
:meth:`Probes.finished` reads the saved point back and sends the search its
probe. A resumed run replays the search: a probe already saved is read, not
run again. The answers are written to ``slo.json`` as the search ends.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Generator, Iterator, Sequence
from typing import Any

from iobench.answers.slo import ANSWERS_FILE, Answer, Probe, measure, searching, sentence
from iobench.errors import IobenchError
from iobench.matrix.expand import Combo
from iobench.matrix.model import Matrix
from iobench.matrix.slospec import MAX_PROBES_LIMIT, SloSpec
from iobench.planner.plans import Plan, PlannedRun, SiteFacts, plan_points
from iobench.store.atomic import atomic_write
from iobench.store.rundir import RunDir

#: A group's probes are numbered from ``(group − 1) × SLOTS + 1``: one point per load probed.
SLOTS = MAX_PROBES_LIMIT


def jobs_of(run: PlannedRun, matrix: Matrix) -> int:
    """How many fio jobs share a point's offered load: every target section × ``numjobs``, on every site."""
    numjobs = int(str(matrix.setting(run.params, "numjobs") or 1))
    return max(1, sum(len(p.targets) for p in run.processes) * numjobs)


def probe_combo(matrix: Matrix, combo: Combo, load: int, jobs: int) -> Combo:
    """A group's combination at one load: ``rate_iops`` per job (the total split exactly), Poisson arrivals."""
    spec = matrix.slo
    assert spec is not None
    out = dict(combo)
    if spec.load == "rate_iops":
        out["rate_iops"] = load // jobs
        if matrix.setting(combo, "rate_process") is None:
            out["rate_process"] = "poisson"
    else:
        out["iodepth"] = load
    return out


@dataclasses.dataclass
class Group:
    """One combination of the other axes and its search."""

    number: int
    planned: PlannedRun
    steps: Generator[int, Probe, Answer]
    jobs: int
    load: int | None = None
    point: int = 0
    repeat: int = 0
    last: int | None = None
    """The load of the group's last probe: the same load again is a repeat of that point."""
    answer: Answer | None = None


class Probes:
    """The sweep's points for an ``slo:`` matrix: each group's probes, one after another."""

    def __init__(self, the_plan: Plan, sites: Sequence[SiteFacts], run_dir: RunDir, kept: set[str]) -> None:
        self.plan, self.sites, self.run_dir, self.kept = the_plan, list(sites), run_dir, kept
        self.matrix = the_plan.matrix
        spec = self.matrix.slo
        assert spec is not None
        self.spec: SloSpec = spec
        firsts = {r.point: r for r in the_plan.runs if r.repeat == 1}
        self.groups = [self._group(number, firsts[number]) for number in sorted(firsts)]

    def _group(self, number: int, planned: PlannedRun) -> Group:
        jobs = jobs_of(planned, self.matrix)
        step = jobs if self.spec.load == "rate_iops" else 1
        return Group(number, planned, searching(self.spec, step), jobs)

    def outline(self) -> list[PlannedRun]:
        """The most points the search can take, for a progress display's count."""
        return [g.planned for g in self.groups for _ in range(self.spec.max_probes)]

    def __iter__(self) -> Iterator[PlannedRun]:
        self.save()  # an answers file from the start: a run stopped before any search ended has one too
        for group in self.groups:
            if group.planned.status != "run":
                yield group.planned
                continue
            group.load = next(group.steps)
            while group.answer is None:
                planned = self._probe(group)
                if planned.key not in self.kept:
                    yield planned  # the sweep runs it, then calls finished()
                else:
                    self._record(group, planned)

    def _probe(self, group: Group) -> PlannedRun:
        assert group.load is not None
        if group.repeat and group.last == group.load:
            group.repeat += 1
        else:
            group.point, group.repeat = group.point + 1, 1
        combo = probe_combo(self.matrix, group.planned.params, group.load, group.jobs)
        one = dataclasses.replace(self.matrix, combos=(combo,), repeat=1, order="sequential")
        planned = plan_points(one, self.sites).runs[0]
        number = (group.number - 1) * SLOTS + group.point
        return dataclasses.replace(planned, point=number, repeat=group.repeat)

    def finished(self, planned: PlannedRun) -> None:
        """The sweep saved ``planned``: its probe goes to its group's search."""
        group = next((g for g in self.groups if g.answer is None and g.load is not None), None)
        if group is not None and planned.status == "run":
            self._record(group, planned)

    def _record(self, group: Group, planned: PlannedRun) -> None:
        assert group.load is not None
        probe = self.read_probe(planned, group.load, group.jobs)
        group.last = group.load
        try:
            group.load = group.steps.send(probe)
        except StopIteration as done:
            group.answer = done.value
            self.save()

    def read_probe(self, planned: PlannedRun, load: int, jobs: int) -> Probe:
        """A saved point judged: its metric and interval; behind when its IOPS log fell short of the load."""
        from iobench.results.assemble import point_frame
        from iobench.results.validity import behind_finding

        directory = self.run_dir.points / planned.key
        meta = self.run_dir.point_meta(planned.key)
        if meta is None or meta.status != "ok":  # not saved, or not ok: no probe, judged failed
            return Probe(load, None)
        frame = point_frame(directory, meta, self.run_dir.path.name, None)
        probe = measure(frame.assign(status="ok"), self.spec.metric, load)
        if self.spec.load != "rate_iops":
            return probe
        try:
            columns = [c for c in ("host", "jobname", "job_index", "iops", "total_ios") if c in frame]
            rows = [{str(k): v for k, v in r.items()} for r in frame[columns].to_dict("records")]
            found = behind_finding(self.run_dir, directory, meta, rows)
        except IobenchError:  # logs that cannot be read: judged on its latency alone (the frame notes it)
            found = None
        return dataclasses.replace(probe, behind=found is not None)

    def answers(self) -> list[dict[str, Any]]:
        """One record per group searched: its axes, the target and what the search found."""
        out = []
        for group in self.groups:
            if group.answer is None:
                continue
            answer = group.answer
            out.append(
                {
                    "point": group.number,
                    "params": {k: _plain(v) for k, v in group.planned.params.items()},
                    "metric": self.spec.metric,
                    "limit": self.spec.limit,
                    "limit_us": self.spec.limit_us,
                    "load": self.spec.load,
                    "max_load": answer.max_load,
                    "ci_low": answer.ci_low,
                    "ci_high": answer.ci_high,
                    "status": answer.status,
                    "sentence": sentence(
                        self.spec, answer, "IOPS" if self.spec.load == "rate_iops" else "iodepth"
                    ),
                    "probes": [dataclasses.asdict(p) for p in answer.probes],
                }
            )
        return out

    def save(self) -> None:
        """Write ``slo.json``: every group's answer so far."""
        atomic_write(self.run_dir.path / ANSWERS_FILE, json.dumps(self.answers(), indent=1) + "\n")


def _plain(value: Any) -> Any:
    return value if isinstance(value, bool | int | float | str) or value is None else str(value)

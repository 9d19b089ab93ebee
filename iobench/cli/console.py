"""What the CLI shows while a run goes, in plain lines (one per point), and the words both displays use.

The live display for a terminal is :mod:`iobench.cli.live` (rich loads only for it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from iobench.planner.plans import Plan, PlannedRun
from iobench.runner.sweep import PointOutcome, RunResult
from iobench.system.pcie import format_bandwidth, format_link
from iobench.system.topology import Topology
from iobench.words import counted


def reader_gone(stream: TextIO) -> None:
    """``stream``'s reader went away (``iobench plan M | head -1``): what is written to it from now on is dropped.

    Its file descriptor is pointed at /dev/null, so that neither a later
    write nor the flush at exit fails again.
    """
    with contextlib.suppress(
        OSError, ValueError
    ):  # not a file (a test's capture): nothing to point elsewhere
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)


def describe_params(params: dict[str, Any]) -> str:
    """``bs=4k iodepth=8`` for a point's parameters."""
    return " ".join(f"{k}={v}" for k, v in params.items()) or "(no axes)"


def headline(outcome: PointOutcome) -> str:
    """``12,345 IOPS · 81.0 µs`` (``24,690 IOPS, sum of 2 hosts · ...``) or the status and reason."""
    if outcome.status != "ok":
        return f"{outcome.status}: {outcome.reason or ''}".strip()
    parts = []
    if outcome.iops is not None:
        summed = f", sum of {outcome.hosts} hosts" if outcome.hosts > 1 else ""
        parts.append(f"{outcome.iops:,.0f} IOPS{summed}")
    if outcome.lat_mean_us is not None:
        parts.append(f"{outcome.lat_mean_us:,.1f} µs")
    return " · ".join(parts) or "ok"


def _not_run(runs: Sequence[PlannedRun]) -> list[str]:
    """``12 points skipped``, ``12 points the same as another here``: points not run, each counted once."""
    same = len({r.point for r in runs if r.same_as is not None})
    skipped = len({r.point for r in runs if r.status == "skipped"}) - same
    return [f"{counted(skipped, 'point')} skipped"] * bool(skipped) + [
        f"{counted(same, 'point')} the same as another here"
    ] * bool(same)


def run_header(plan: Plan, todo: Sequence[PlannedRun]) -> str:
    """``72 runs of demo, 12 points skipped`` for a run's start: points not run counted once, not per repeat."""
    ran = sum(1 for r in todo if r.status == "run")
    not_run = _not_run(todo)
    return f"{counted(ran, 'run')} of {plan.matrix.name}" + (
        f", {', '.join(not_run)} (`iobench plan` says why)" if not_run else ""
    )


def result_counts(result: RunResult) -> str:
    """``70 ok, 2 failed; 12 points skipped``: the runs by status, then the points not run, once each."""
    runs = ", ".join(f"{n} {s}" for s, n in sorted(result.counts.items()) if s != "skipped")
    return "; ".join([runs or "no runs", *_not_run(result.plan.runs)])


def run_headline(run: PlannedRun, outcome: PointOutcome) -> str:
    """:func:`headline`, or ``same as point 3`` for a point that coincides with one that runs (the plan says why)."""
    return f"same as point {run.same_as}" if run.same_as is not None else headline(outcome)


def pcie_lines(topology: Topology) -> list[str]:
    """``iobench topology``'s PCIe part: each PCI device's way up, the shared root ports, the notes."""
    lines = []
    for device in topology.devices:
        placement = device.pcie
        if placement is None:
            continue
        hops = []
        for hop in reversed(placement.hops):
            link = hop.link
            state = format_link(link.current_gts, link.current_width)
            if link.below_max:
                state += f" of {format_link(link.max_gts, link.max_width)}"
            hops.append(f"{hop.address} [{state}]" if link.known else hop.address)
        bandwidth = format_bandwidth(placement.link_bw_bytes)
        lines.append(
            f"pcie {device.name:<10} {placement.root_complex or '?'} > {' > '.join(hops)}  ({bandwidth})"
        )
    for port, devices in topology.shared_root_ports().items():
        lines.append(f"root port {port} is shared by {', '.join(devices)}")
    lines.extend(f"note: {f}" for f in topology.pcie_findings() if f.severity == "note")
    return lines


def _clock(seconds: float) -> str:
    seconds = max(int(round(seconds)), 0)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Eta:
    """Remaining time from the remaining fio runtime, corrected by how long points really took."""

    def __init__(self, todo: Sequence[PlannedRun]) -> None:
        self.remaining = [r.expected_s if r.status == "run" else 0.0 for r in todo]
        self.spent = 0.0
        self.expected_done = 0.0
        self.done = 0

    def finish(self, index: int, duration: float) -> None:
        self.spent += duration
        self.expected_done += self.remaining[index] or 0.0
        self.done += 1

    def seconds(self) -> float | None:
        left = self.remaining[self.done :]
        if not left:
            return 0.0
        if all(r is not None for r in left) and self.expected_done > 0:
            ratio = self.spent / self.expected_done
            return sum(r or 0.0 for r in left) * ratio
        if all(r is not None for r in left) and self.done == 0:
            return sum(r or 0.0 for r in left)
        if self.done:
            return self.spent / self.done * len(left)
        return None


class PlainProgress:
    """One line per point, for logs and pipes."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.total = 0
        self.index = 0
        self.skipped: set[int] = set()

    def _say(self, line: str) -> None:
        try:
            print(line, file=self.out, flush=True)
        except BrokenPipeError:
            reader_gone(self.out)  # `iobench run M | head`: the run goes on without its lines

    def started(self, plan: Plan, todo: Sequence[PlannedRun], run_dir: Path) -> None:
        """Say where results go."""
        self.total = len(todo)
        for warning in plan.warnings:
            self._say(f"warning: {warning}")
        self._say(f"iobench: {run_header(plan, todo)} -> {run_dir}")

    def point_started(self, run: PlannedRun, index: int) -> None:
        """Remember the position."""
        self.index = index

    def point_finished(self, run: PlannedRun, outcome: PointOutcome) -> None:
        """One line; a skipped point's once, not once per repeat."""
        if outcome.status == "skipped":
            if run.point in self.skipped:
                return
            self.skipped.add(run.point)
        width = len(str(self.total))
        self._say(
            f"[{self.index + 1:>{width}}/{self.total}] {run.key} {outcome.status:<7} "
            f"{describe_params(run.params)}  {run_headline(run, outcome)}  ({outcome.duration_s:.1f} s)"
        )

    def finished(self, result: RunResult) -> None:
        """Nothing more: the CLI prints the summary."""


def validity_lines(frame: Any, *, verbose: bool = False) -> list[str]:
    """The end of ``iobench run``: the points whose numbers a validity check doubts, one line each.

    A line names the point, its varying parameters, its findings and in how
    many of its repeats each was found; the head counts the points per
    finding. ``verbose`` adds each finding's words under its point, once
    however many repeats said them (the report and the frame have them too).

    Parameters
    ----------
    frame
        The run's tidy frame (with its ``validity`` columns), or None.
    verbose
        Add the findings' details.

    Returns
    -------
    list of str
        Empty when the frame has no verdicts (a run that ran nothing).
    """
    from iobench.results.validity import findings

    if frame is None or "validity" not in frame or "point" not in frame:
        return []
    judged = frame.loc[frame["validity"].notna(), "point"].nunique()
    if not judged:
        return []
    found = findings(frame)
    if found.empty:
        return [f"validity: no check found a trap in the {counted(judged, 'point')} judged"]
    repeats = frame.loc[frame["validity"].notna()].groupby("point")["repeat"].nunique()
    axes = [c for c in found.columns if c not in ("point", "repeat", "validity", "validity_detail")]
    per_point: dict[int, dict[str, int]] = {}
    details: dict[int, dict[str, None]] = {}
    for point_value, codes_text, detail in zip(
        found["point"].tolist(), found["validity"].tolist(), found["validity_detail"].tolist(), strict=True
    ):
        point = int(point_value)
        for code in str(codes_text).split():
            per_point.setdefault(point, {})
            per_point[point][code] = per_point[point].get(code, 0) + 1
        details.setdefault(point, {})[str(detail)] = None
    by_code: dict[str, int] = {}
    for codes in per_point.values():
        for code in codes:
            by_code[code] = by_code.get(code, 0) + 1
    tally = ", ".join(f"{code} {n}" for code, n in sorted(by_code.items(), key=lambda kv: (-kv[1], kv[0])))
    lines = [
        f"validity: {len(per_point)} of {counted(judged, 'point')} with findings ({tally}); "
        + ("" if verbose else "details: --verbose, ")
        + "`iobench report`, the frame's validity columns (docs/validity.md)"
    ]
    params = found.drop_duplicates("point").set_index("point")
    for point, codes in sorted(per_point.items()):
        shown = describe_params({a: params.at[point, a] for a in axes}) if axes else ""
        of = int(repeats.get(point, 1))
        said = ", ".join(code if of == 1 else f"{code} ({n} of {of} repeats)" for code, n in codes.items())
        lines.append(f"  point {point}{f'  {shown}' if shown else ''}: {said}")
        if verbose:
            lines.extend(f"      {detail}" for detail in details[point])
    return lines


def eta_text(seconds: float | None) -> str:
    return "?" if seconds is None else _clock(seconds)

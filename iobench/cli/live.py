"""The live display of a run on a terminal: a rich bar with points done, ETA, the current point and the last result."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from iobench.cli.console import Eta, describe_params, eta_text, run_header, run_headline
from iobench.planner.plans import Plan, PlannedRun
from iobench.runner.sweep import PointOutcome, RunResult


class RichProgress:
    """A live bar with points done, ETA, the current point and the last result."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("points"),
            TimeElapsedColumn(),
            TextColumn("ETA {task.fields[eta]}"),
            console=console,
        )
        self.task = self.bar.add_task("iobench", total=1, eta="?")
        self.current = Text("")
        self.last = Text("")
        self.live = Live(Group(self.bar, self.current, self.last), console=console, refresh_per_second=4)
        self.eta: Eta | None = None
        self.point_start = 0.0

    def started(self, plan: Plan, todo: Sequence[PlannedRun], run_dir: Path) -> None:
        """Start the live display."""
        self.eta = Eta(todo)
        for warning in plan.warnings:
            self.console.print(Text.assemble(("warning: ", "yellow"), str(warning)))
        self.console.print(f"{run_header(plan, todo)} -> {run_dir}", markup=False)
        eta = self.eta.seconds()
        self.bar.update(self.task, description=plan.matrix.name, total=len(todo), eta=eta_text(eta))
        self.live.start()

    def point_started(self, run: PlannedRun, index: int) -> None:
        """Show what runs now."""
        self.point_start = time.monotonic()
        self.current.plain = f"now:  {run.key}  {describe_params(run.params)}"

    def point_finished(self, run: PlannedRun, outcome: PointOutcome) -> None:
        """Advance; show the last result."""
        assert self.eta is not None
        self.eta.finish(self.eta.done, time.monotonic() - self.point_start)
        style = "green" if outcome.status in ("ok", "skipped") else "red"
        self.last = Text.assemble(
            ("last: ", "dim"), (f"{run.key} {outcome.status} ", style), run_headline(run, outcome)
        )
        self.live.update(Group(self.bar, self.current, self.last))
        self.bar.update(self.task, advance=1, eta=eta_text(self.eta.seconds()))

    def finished(self, result: RunResult) -> None:
        """Stop the live display."""
        self.current.plain = ""
        self.live.stop()

"""``iobench compare`` on the terminal: what differs between the runs, then a rich table of verdicts."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from iobench.report.compare_page import (
    comparison_rows,
    condition_lines,
    correction_text,
    machine_rows,
    run_notes,
    verdict_counts,
)


class StdoutConsole(Console):
    """rich's console on stdout, whose reader going away (``iobench compare A B | head``) ends the command quietly.

    rich itself would exit with status 1; a closed pipe is no error for ``head`` to report.
    """

    def on_broken_pipe(self) -> None:
        """Print nothing more and let the command group end the command (with 0)."""
        self.quiet = True
        raise BrokenPipeError


STYLES = {"better": "bold green", "worse": "bold red", "no change": "", "not tested": "dim"}
#: The most rows the terminal table shows (the changed ones first when there are more).
MAX_ROWS = 200


def show_comparison(console: Console, comparison: pd.DataFrame) -> None:
    """Print the runs, the facts that differ between them, the table and the verdict counts."""
    a, b = comparison.attrs.get("a", "A"), comparison.attrs.get("b", "B")
    console.print(f"[bold]A[/] {escape(str(a))}  →  [bold]B[/] {escape(str(b))}   (ratio = B / A)")
    for side, lines in run_notes(comparison):
        console.print(f"[bold yellow]{side}:[/] " + escape("\n  ".join(lines)))
    for line in condition_lines(comparison):
        console.print(f"[bold yellow]{escape(line)}[/]")
    differ, same = machine_rows(comparison)
    if differ:
        facts = Table(title="what differs between the runs", title_justify="left", box=None, padding=(0, 2))
        facts.add_column("fact", style="bold")
        facts.add_column("A", overflow="fold")
        facts.add_column("B", overflow="fold")
        for fact, va, vb in differ:
            facts.add_row(escape(fact), escape(va), escape(vb))
        console.print(facts)
    if same:
        console.print(f"[dim]the same in both: {escape(', '.join(fact for fact, _ in same))}[/]")
    rows = comparison_rows(comparison, limit=MAX_ROWS)
    table = Table(show_lines=False, header_style="bold")
    for key in rows.keys:
        table.add_column(escape(key), no_wrap=True)
    table.add_column("metric", no_wrap=True)
    for title in ("A", "B", "B/A", "95 % CI", "change", "p", "p adj.", "detectable"):
        table.add_column(title, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("note", overflow="fold")
    for row in rows.rows:
        style = STYLES.get(row.verdict, "")
        table.add_row(
            *(escape(text) for text in row.labels),
            row.metric,
            row.a,
            row.b,
            row.ratio,
            row.ci,
            row.change,
            row.p,
            row.p_adjusted,
            row.detectable,
            f"[{style}]{row.verdict}[/]" if style else row.verdict,
            escape(row.reason),
        )
    console.print(table)
    if rows.omitted:
        console.print(
            f"{rows.matched} rows: shown, {len(rows.rows)} of those that changed (better or worse); "
            "every row: compare.csv (-o DIR writes it)"
        )
    for label, points, total in (
        ("only in A", rows.only_a, rows.only_a_total),
        ("only in B", rows.only_b, rows.only_b_total),
    ):
        if points:
            more = f" and {total - len(points)} more" if total > len(points) else ""
            console.print(f"{label} (not compared): {escape('; '.join(points))}{more}")
    for metric, counts in verdict_counts(comparison):
        text = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
        console.print(f"{metric}: {text}")
    console.print(f"[dim]{escape(correction_text(comparison))}[/]")

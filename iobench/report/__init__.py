"""The HTML report of a run: figures, the summary table (``summary.csv``), problems, machine facts."""

from iobench.report.page import Report, render_page, write_report

__all__ = ["Report", "render_page", "write_report"]

"""Every error iobench raises on purpose derives from :class:`IobenchError`.

The CLI catches this base only and turns it into a short message and an exit
code; anything else reaching the user is a bug and keeps its traceback.
"""

from __future__ import annotations


class IobenchError(Exception):
    """Base of all iobench errors. ``exit_code`` is what the CLI exits with."""

    exit_code = 2


class MatrixError(IobenchError):
    """The matrix file is invalid. ``issues`` holds every problem found."""

    def __init__(self, source: str, issues: list[str]) -> None:
        self.source = source
        self.issues = list(issues)
        lines = "\n".join(f"  {issue}" for issue in self.issues)
        count = len(self.issues)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"{source}: {count} {noun}:\n{lines}")


class SafetyError(IobenchError):
    """A run was refused because it could damage data or the system."""


class TopologyError(IobenchError):
    """The machine's topology could not be read, or a target's placement is unknown."""


class TuningError(IobenchError):
    """A device setting could not be read, applied or restored."""


class FioError(IobenchError):
    """fio is missing, too old, or rejected its input."""


class ResultsError(IobenchError):
    """A results directory or fio output cannot be read."""

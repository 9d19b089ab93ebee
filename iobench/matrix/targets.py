"""A target of the matrix, once its path is expanded: what the planner and the guard are given."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A target after ``${VAR}`` expansion, with the job section that drives it."""

    path: str
    size: int | None
    home_node: int | None
    allow_write: bool
    section: str
    where: str = ""
    """Where it was given, for messages: ``matrix.yaml:7:11`` (its ``path:``), or ``--target``."""

    @property
    def from_command_line(self) -> bool:
        """Given with ``--target``: its write permission comes from ``--allow-write``, not the matrix."""
        return self.where == COMMAND_LINE


#: :attr:`Target.where` of a target given on the command line.
COMMAND_LINE = "--target"

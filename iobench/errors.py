"""Every error iobench raises on purpose derives from :class:`IobenchError`.

The CLI catches this base only and turns it into a short message and an exit
code; anything else reaching the user is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Literal

from iobench.words import counted


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


class HistoryError(ResultsError):
    """A history store cannot be used as asked, or a run cannot join it; nothing was changed."""


@dataclass(frozen=True)
class NextStep:
    """One thing to do to finish the work after an :class:`EnvironmentFault`: facts, not a command line.

    The CLI turns each into the command a user types; the library's message
    says it in words.

    Attributes
    ----------
    action : {"resume", "report", "restore", "run"}
        Resume the run directory, draw its report, put device settings back,
        or start the run again.
    run_dir : str or None
        The run directory concerned (resume, report).
    matrix : str or None
        The matrix file (resume, run).
    left : int or None
        How many points a resume would run.
    out : str or None
        Where the report goes, when not the default.
    does : str
        What the step achieves, in words (``draws the figures``).
    """

    action: Literal["resume", "report", "restore", "run"]
    run_dir: str | None = None
    matrix: str | None = None
    left: int | None = None
    out: str | None = None
    does: str = ""

    def words(self) -> str:
        """The step in words, for a message that is not a command line."""
        if self.action == "resume":
            left = "" if self.left is None else f" ({counted(self.left, 'point')} left)"
            return f"resume {self.run_dir}{left}"
        if self.action == "report":
            return f"draw the report of {self.run_dir}" + (f" into {self.out}" if self.out else "")
        if self.action == "restore":
            return "restore the device settings (iobench restore)"
        return f"start {self.matrix} again"


class PlotOptionError(ResultsError):
    """A figure option (x, y, hue, col, row) names a column that does not fit its role.

    Attributes
    ----------
    figure : str
        The figure function, e.g. ``plot``.
    option : str
        The role: ``x``, ``y``, ``hue``, ``col`` or ``row``.
    column : str
        The column given.
    problem : str
        What is wrong with it, e.g. ``is a metric, not a category``.
    fits : list of str
        The columns that would fit the role (empty when the role cannot be chosen).
    hint : str
        What the figure needs beyond that, when it needs something.
    """

    def __init__(
        self, figure: str, option: str, column: str, problem: str, fits: list[str], hint: str = ""
    ) -> None:
        self.figure, self.option, self.column = figure, option, column
        self.problem, self.fits, self.hint = problem, list(fits), hint
        takes = f"; {option} takes {', '.join(fits)}" if fits else ""
        super().__init__(f"{figure}: {option} {column!r} {problem}{takes}" + (f"; {hint}" if hint else ""))


class EnvironmentFault(IobenchError):
    """The machine failed under a run: its disk filled, its directory went away, its target vanished.

    Nothing was wrong with the input, so the exit status is 3, not 2. The
    message is one short paragraph built from the attributes; how to finish
    is kept as facts (:class:`NextStep`), which the CLI turns into commands.

    Attributes
    ----------
    what : str
        What happened, e.g. ``disk full (no space left on device)``.
    path : str
        The file, directory or target it happened to.
    kept : str
        What survived, in words (filled in by the runner once it knows).
    remedy : str
        What to do about the cause before finishing (``free space on /mnt``).
    steps : list of NextStep
        Then how to finish the work.
    errno : int or None
        The operating system's error number, when there was one.
    run_dir : str or None
        The run directory concerned.
    counts : dict
        Saved points by status, when a run directory was involved.
    """

    exit_code = 3

    def __init__(
        self,
        what: str,
        path: str | os.PathLike[str],
        *,
        kept: str = "",
        errno: int | None = None,
        run_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.what = what
        self.path = os.fspath(path)
        self.kept = kept
        self.remedy = ""
        self.steps: list[NextStep] = []
        self.errno = errno
        self.run_dir = None if run_dir is None else os.fspath(run_dir)
        self.counts: dict[str, int] = {}
        super().__init__(what, self.path)

    @property
    def finish(self) -> str:
        """How to finish, in words: the remedy, then each step."""
        steps = "; ".join(
            step.words() + (f" ({step.does})" if step.does and step.action != "resume" else "")
            for step in self.steps
        )
        if self.remedy and steps:
            return f"{self.remedy}, then {steps}"
        return self.remedy or steps

    def __str__(self) -> str:
        lines = [f"{self.what}: {self.path}"]
        if self.kept:
            lines.append(f"  kept: {self.kept}")
        if self.finish:
            lines.append(f"  to finish: {self.finish}")
        return "\n".join(lines)


# What an errno means for a directory iobench writes into, in words a user acts on.
_STORAGE_WORDS = {
    errno.ENOSPC: "disk full (no space left on device)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "no longer there (removed during the run?)",
    errno.ENOTDIR: "no longer there (removed during the run?)",
    errno.ESTALE: "no longer there (stale file handle)",
    errno.EIO: "I/O error",
    errno.EFBIG: "file too large for the file system",
    errno.EMFILE: "too many open files",
    errno.ENFILE: "too many open files",
}

#: Errors that say the disk is full, whatever the file system: free space, then resume.
FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def storage_words(code: int | None) -> str:
    """``disk full (no space left on device)`` for ENOSPC, and so on; the C library's words otherwise."""
    if code is None:
        return "cannot write"
    return _STORAGE_WORDS.get(code) or os.strerror(code)


class RunStorageError(EnvironmentFault):
    """A file or directory iobench writes (run directory, frame, figures, report) could not be written."""

    @classmethod
    def from_os_error(cls, exc: OSError, path: str | os.PathLike[str] | None = None) -> RunStorageError:
        """The fault for ``exc``, naming ``path`` (the file being written), else ``exc.filename``."""
        where = path if path is not None else exc.filename
        return cls(storage_words(exc.errno), os.fspath(where) if where is not None else "?", errno=exc.errno)


class TargetVanished(EnvironmentFault):
    """A target disappeared during the run: its file was deleted or replaced, or its device detached."""


class HostLost(EnvironmentFault):
    """The SSH connection to a host dropped during the run (``path`` names the host)."""


class RunStopped(EnvironmentFault):
    """Something stopped a sweep after points had run (``path`` is the run directory)."""


class SettingsNotRestored(EnvironmentFault):
    """The run ended but a device setting could not be put back (``iobench restore`` retries)."""

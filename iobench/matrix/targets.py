"""A target of the matrix, once its path is expanded: what the planner and the guard are given."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

#: The environment variables a local target's path may name: those named for iobench. A matrix
#: that could name any would copy this machine's environment (a token, a password) into the job
#: files and run files, which record the expanded path.
EXPANDED_PREFIX = "IOBENCH_"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class VariableError(ValueError):
    """A ``${VAR}`` a path may not name, or one that is not set: ``args[0]`` the message, ``args[1]`` the fix."""


def expand_path(text: str, *, remote: bool = False) -> str:
    """``text`` with ``${IOBENCH_…}`` and ``${IOBENCH_…:-default}`` expanded from this machine's environment.

    Parameters
    ----------
    text
        A target's path as the matrix (or ``--target``) gives it.
    remote
        A path on a host: no variable is expanded there, and naming one is refused.

    Raises
    ------
    VariableError
        Naming the variable and the fix: one on a host, one not named for
        iobench, or one unset without a default.
    """

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if remote:
            raise VariableError(
                f"`${{{name}}}` in a host's target path is refused: it would send this machine's "
                "environment to the host",
                "write the path as it is on the host",
            )
        if not name.startswith(EXPANDED_PREFIX):
            raise VariableError(
                f"`${{{name}}}` is not expanded: only variables named {EXPANDED_PREFIX}… are, so the "
                "environment reaches no run file unless it was set for iobench",
                f"export {EXPANDED_PREFIX}{name} and write `${{{EXPANDED_PREFIX}{name}}}`, or write the path",
            )
        found = os.environ.get(name)
        if found is None or (found == "" and default is not None):
            if default is None:
                raise VariableError(
                    f"environment variable ${{{name}}} is not set", f"set it, or write ${{{name}:-default}}"
                )
            return default
        return found

    return _VAR.sub(value, text)


@dataclass(frozen=True)
class Target:
    """A target after ``${IOBENCH_…}`` expansion (:func:`expand_path`), with the job section that drives it."""

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

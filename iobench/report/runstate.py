"""How a loaded run reads, for the CLI and the pages: how far it got, the command that finishes it, the notes.

The library gives facts (:meth:`RunState.facts <iobench.store.inventory.RunState.facts>`
and the notes of :func:`~iobench.results.loading.open_run`); this module words
them, with the command line, for ``iobench report``, ``iobench compare`` and
their pages.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iobench.results.loading import state_text


def finish_command(facts: Mapping[str, Any]) -> str | None:
    """The command that finishes an incomplete run (:attr:`RunState.facts <iobench.store.inventory.RunState.facts>`).

    ``iobench run MATRIX --resume RUN``: MATRIX is the file the run was started
    with where it is still there, else the copy in the run directory. None
    when the run is complete or its sweep is still running.
    """
    if facts.get("complete") or facts.get("running"):
        return None
    run_dir = str(facts.get("run_dir"))
    source = facts.get("matrix_source")
    matrix = str(source) if source and Path(str(source)).is_file() else str(Path(run_dir) / "matrix.yaml")
    return shlex.join(["iobench", "run", matrix, "--resume", run_dir])


def run_lines(facts: Mapping[str, Any], notes: Sequence[str]) -> list[str]:
    """What the CLI and the page say about a run as loaded: how far it got, how to finish it, the notes."""
    lines = []
    state = state_text(facts)
    if state:
        lines.append(state)
        command = finish_command(facts)
        if command:
            lines.append(f"to finish: `{command}`")
        elif facts.get("running"):
            lines.append("look again once the sweep has ended: these are the point-runs done so far")
    return lines + list(notes)

"""The library's public names are those docs/library.md names, whatever was imported first."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import inspect, iobench
{first}
for name in ("load_matrix", "plan", "run", "load", "parse_fio", "summarize", "point_totals",
             "discover_topology"):
    value = getattr(iobench, name)
    assert callable(value) and not inspect.ismodule(value), (name, value)
assert inspect.ismodule(iobench.plots) and callable(iobench.plots.local_vs_remote)
"""


@pytest.mark.parametrize(
    "first", ["", "iobench.run", "import iobench.runner.sweep", "iobench.load", "iobench.report.page"]
)
def test_public_functions_stay_functions(first: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK.format(first=first)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr

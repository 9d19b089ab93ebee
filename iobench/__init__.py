"""iobench: fio sweeps from a YAML matrix, into tidy frames and figures.

Importing iobench is cheap: the API below is loaded on first use.

>>> import iobench
>>> m = iobench.load_matrix("configs/demo.yaml")      # doctest: +SKIP
>>> p = iobench.plan(m)                                # doctest: +SKIP
>>> r = iobench.run(m, out="results/")                 # doctest: +SKIP
>>> df = iobench.load(r.run_dir)                       # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from iobench.errors import (
    FioError,
    IobenchError,
    MatrixError,
    ResultsError,
    SafetyError,
    TopologyError,
    TuningError,
)

__version__ = "0.1.0"

_LAZY = {
    "load_matrix": "iobench.matrix",
    "Matrix": "iobench.matrix",
    "plan": "iobench.planner",
    "Plan": "iobench.planner",
    "run": "iobench.runner",
    "RunResult": "iobench.runner",
    "RunInterrupted": "iobench.runner",
    "load": "iobench.results",
    "parse_fio": "iobench.fioout",
    "parse_fio_text": "iobench.fioout",
    "summarize": "iobench.points",
    "point_totals": "iobench.points",
    "discover_topology": "iobench.topology",
    "plots": "iobench.plots",
    "report": "iobench.report",
}

if TYPE_CHECKING:
    from iobench import plots, report
    from iobench.fioout import parse_fio, parse_fio_text
    from iobench.matrix import Matrix, load_matrix
    from iobench.planner import Plan, plan
    from iobench.points import point_totals, summarize
    from iobench.results import load
    from iobench.runner import RunInterrupted, RunResult, run
    from iobench.topology import discover_topology


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'iobench' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if name in ("plots", "report") else getattr(loaded, name)
    globals()[name] = value
    return value


__all__ = [
    "FioError",
    "IobenchError",
    "Matrix",
    "MatrixError",
    "Plan",
    "ResultsError",
    "RunInterrupted",
    "RunResult",
    "SafetyError",
    "TopologyError",
    "TuningError",
    "__version__",
    "discover_topology",
    "load",
    "load_matrix",
    "parse_fio",
    "parse_fio_text",
    "plan",
    "plots",
    "point_totals",
    "report",
    "run",
    "summarize",
]

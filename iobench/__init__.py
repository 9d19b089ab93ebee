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
from iobench.version import __version__

_LAZY = {
    "load_matrix": "iobench.matrix.model",
    "Matrix": "iobench.matrix.model",
    "plan": "iobench.planner.plans",
    "Plan": "iobench.planner.plans",
    "run": "iobench.runner.sweep",
    "RunResult": "iobench.runner.sweep",
    "RunInterrupted": "iobench.runner.sweep",
    "load": "iobench.results.loading",
    "parse_fio": "iobench.results.fioout",
    "parse_fio_text": "iobench.results.fioout",
    "summarize": "iobench.results.points",
    "point_totals": "iobench.results.points",
    "timeseries": "iobench.results.timeseries",
    "compare": "iobench.results.compare",
    "telemetry": "iobench.results.telemetry",
    "discover_topology": "iobench.system.topology",
    "plots": "iobench.plots",
    "report": "iobench.report",
    "slo": "iobench.answers.slo",
}

if TYPE_CHECKING:
    from iobench import plots, report
    from iobench.answers.slo import slo
    from iobench.matrix.model import Matrix, load_matrix
    from iobench.planner.plans import Plan, plan
    from iobench.results.compare import compare
    from iobench.results.fioout import parse_fio, parse_fio_text
    from iobench.results.loading import load
    from iobench.results.points import point_totals, summarize
    from iobench.results.telemetry import telemetry
    from iobench.results.timeseries import timeseries
    from iobench.runner.sweep import RunInterrupted, RunResult, run
    from iobench.system.topology import discover_topology


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
    "compare",
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
    "slo",
    "summarize",
    "timeseries",
    "telemetry",
]

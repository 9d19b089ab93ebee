"""``iobench history``: a matrix's runs over time, their change points and what explains them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from iobench.errors import IobenchError

history_app = typer.Typer(
    name="history",
    help="Every run of a matrix in one store: series, change points and what changed around them.",
    no_args_is_help=True,
    add_completion=False,
)
StoreOpt = Annotated[Path, typer.Option("--store", help="The history store: a folder of Parquet files.")]


def _fail(exc: IobenchError) -> typer.Exit:
    typer.echo(f"iobench: {exc}", err=True)
    return typer.Exit(code=exc.exit_code)


def add_runs(store: Path, runs: list[Path]) -> list[str]:
    """Add runs and say what happened; shared by ``history add`` and ``run --history``."""
    from iobench.answers import history

    added = history.add(store, runs)
    held = len(runs) - len(added)
    typer.echo(
        f"history: {len(added)} run{'' if len(added) == 1 else 's'} added to {store}"
        + (f"; {held} already there" if held else "")
    )
    return added


@history_app.command("add")
def history_add(
    runs: Annotated[
        list[Path], typer.Argument(help="Run directories made by `iobench run`.", show_default=False)
    ],
    store: StoreOpt,
) -> None:
    """Add finished runs to the store (made when missing). A run held already is left as it is.

    Exit status: 0 added (or held already), 2 a run cannot join (incomplete, damaged, another
    matrix's) or the store cannot be used; nothing is added then.
    """
    try:
        add_runs(store, runs)
    except IobenchError as exc:
        raise _fail(exc) from None


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"


@history_app.command("changes")
def history_changes(
    store: StoreOpt,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Each change point of each series and metric, the unexplained first (docs/history.md)."""
    from iobench.answers import history

    try:
        table = history.changes(store)
    except IobenchError as exc:
        raise _fail(exc) from None
    if as_json:
        typer.echo(json.dumps(json.loads(table.to_json(orient="records")), indent=2))
        return
    if table.empty:
        typer.echo(f"no change found in {store}: every series stayed within its noise")
        return
    for row in table.to_dict("records"):
        where = " ".join(x for x in (row["point"], row["host"], row["direction"]) if x)
        why = row["explained_by"] or "nothing recorded changed"
        typer.echo(
            f"{row['metric']} {row['change_pct']:+.1f} % at {row['run_id']} ({where}): "
            f"{_number(row['before'])} → {_number(row['after'])}, noise {row['noise_pct']:.1f} %; {why}"
        )


@history_app.command("plot")
def history_plot(
    store: StoreOpt,
    out: Annotated[Path, typer.Option("-o", "--out", help="The figure file (.png, .svg, .pdf).")],
    metric: Annotated[
        str, typer.Option("--metric", help="iops, bw_bytes, lat_mean_us or clat_p99_us.")
    ] = "iops",
) -> None:
    """Each series' metric over runs, change points and what changed marked; ratios to the first run."""
    from iobench.answers import history
    from iobench.plots.files import save_figure_file
    from iobench.plots.overruns import history_figure

    if metric not in history.METRICS:
        typer.echo(f"iobench: --metric {metric!r}: give one of {', '.join(history.METRICS)}", err=True)
        raise typer.Exit(code=2)
    try:
        fig = history_figure(history.load(store), history.changes(store), metric=metric)
        save_figure_file(fig, out)
    except IobenchError as exc:
        raise _fail(exc) from None
    typer.echo(str(out))

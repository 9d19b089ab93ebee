"""The ``iobench`` command: a thin Typer layer over the library (docs/running.md)."""

from __future__ import annotations

import errno
import functools
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from iobench.cli.history_commands import add_runs, history_app
from iobench.errors import FULL, EnvironmentFault, IobenchError, NextStep, RunStorageError
from iobench.words import counted

if TYPE_CHECKING:
    from rich.console import Console

    from iobench.system.locks import LockWait


class _Commands(TyperGroup):
    """iobench's commands; one whose reader went away (``iobench plan M | head -1``) ends quietly, with 0."""

    def invoke(self, ctx: Any) -> Any:
        """Run the command; a closed pipe on stdout stops it as ``head`` expects, without a message."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            from iobench.cli.console import reader_gone

            reader_gone(sys.stdout)
            raise typer.Exit(0) from None

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """``run --wait`` with no SECONDS after it (an option or the matrix next) waits without limit."""
        if args[:1] == ["run"]:
            end = args.index("--") if "--" in args else len(args)
            for i in range(1, end):
                if args[i] == "--wait" and (i + 1 == end or not _is_number(args[i + 1])):
                    args = [*args[:i], "--wait=inf", *args[i + 1 :]]
        return super().parse_args(ctx, args)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


app = typer.Typer(
    cls=_Commands,
    name="iobench",
    help="fio sweeps from a YAML matrix: NUMA/SMT placement, tidy frames, figures.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@functools.cache
def _err() -> Console:
    """rich's console on stderr, made when first used: rich is slow to load, and most commands never need it."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


MatrixArg = Annotated[Path, typer.Argument(help="The matrix YAML file.", show_default=False)]
TargetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--target", help="Replace the matrix's targets (repeatable); keeps the first target's size."
    ),
]
AllowWriteOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-write",
        help="Consent to writing this device or existing file (repeatable); a matrix's allow_write grants nothing.",
    ),
]
FsrootOpt = Annotated[
    Path, typer.Option("--fsroot", help="Read DIR/sys instead of /sys (plan for another machine's snapshot).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _fail(exc: IobenchError, run_options: list[str] | None = None) -> typer.Exit:
    """Print ``exc`` as the user reads it; an environment fault's steps become commands.

    ``run_options``: options of the ``iobench run`` that failed (``--target``,
    ``--allow-write``), repeated in the command that resumes it.
    """
    text = _fault_text(exc, run_options or []) if isinstance(exc, EnvironmentFault) else str(exc)
    notes = "".join(f"\n  {note}" for note in getattr(exc, "__notes__", ()))
    _err().print(f"[bold red]iobench:[/] {_escape(text + notes)}", markup=True, soft_wrap=True)
    return typer.Exit(code=exc.exit_code)


def _fault_text(fault: EnvironmentFault, run_options: list[str]) -> str:
    lines = [f"{fault.what}: {fault.path}"]
    if fault.kept:
        lines.append(f"  kept: {fault.kept}")
    steps = "; ".join(_step_text(step, run_options) for step in fault.steps)
    finish = f"{fault.remedy}, then {steps}" if fault.remedy and steps else fault.remedy or steps
    if finish:
        lines.append(f"  to finish: {finish}")
    return "\n".join(lines)


def _step_text(step: NextStep, run_options: list[str]) -> str:
    """A step as the command that does it, and what it does."""
    if step.action == "resume":
        argv = ["iobench", "run", str(step.matrix), *run_options, "--resume", str(step.run_dir)]
        if step.does:
            does = step.does
        elif step.left is not None:
            does = f"runs the {counted(step.left, 'point')} left"
        else:
            does = "runs what is left"
        return f"`{shlex.join(argv)}` {does}"
    if step.action == "report":
        argv = ["iobench", "report", str(step.run_dir)] + ([] if step.out is None else ["-o", step.out])
        return f"`{shlex.join(argv)}`" + (f" {step.does}" if step.does else " again")
    if step.action == "restore":
        return "`iobench restore`" + (f" {step.does}" if step.does else "")
    return f"start again with `{shlex.join(['iobench', 'run', str(step.matrix), *run_options])}`"


def _os_fault(exc: OSError) -> typer.Exit:
    """The last line of defence: a disk fault in a place no library call foresaw still gets one message."""
    if exc.errno not in FULL | {errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}:
        raise exc
    return _fail(RunStorageError.from_os_error(exc))


def _note(lines: list[str]) -> None:
    """What the library noted about a run (incomplete, damaged points, files that cannot be read), on stderr."""
    if lines:
        _err().print("[yellow]note:[/] " + _escape("\n  ".join(lines)), markup=True, soft_wrap=True)


def _load(path: Path) -> Any:
    """:func:`iobench.load`, its warnings (an incomplete run, damaged points) said as notes on stderr."""
    import warnings

    from iobench.report.runstate import run_lines
    from iobench.results.loading import NOTES, RUN, RunWarning, load

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunWarning)
        frame = load(path)
    _note(run_lines(frame.attrs[RUN], frame.attrs[NOTES]) if RUN in frame.attrs else [])
    return frame


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _warn(warnings: Any) -> None:
    """Print a plan's warnings (``Plan.warnings``) to stderr."""
    for warning in warnings:
        _err().print(f"[yellow]warning:[/] {_escape(str(warning))}", markup=True, soft_wrap=True)


def _lock_wait(seconds: float | None) -> LockWait | None:
    """``--wait``'s :class:`~iobench.system.locks.LockWait`, which says on stderr whose run it waits for."""
    import math

    from iobench.system.locks import LockWait

    if seconds is None:
        return None
    limit = "until it ends" if math.isinf(seconds) else f"up to {seconds:g} s"

    def waiting(disk: str, holder: str) -> None:
        _err().print(
            f"iobench: waiting for another iobench run ({holder}) to let go of {disk}, {limit}",
            markup=False,
            soft_wrap=True,
        )

    return LockWait(seconds, waiting)


@app.command()
def run(
    matrix: MatrixArg,
    target: TargetOpt = None,
    out: Annotated[Path, typer.Option("--out", help="Where run directories are made.")] = Path("results"),
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Continue this run directory: run only what is missing.")
    ] = None,
    allow_write: AllowWriteOpt = None,
    fail_fast: Annotated[bool, typer.Option("--fail-fast", help="Stop at the first failed point.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the run directory.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="End with each finding's details under its point.")
    ] = False,
    figures: Annotated[
        bool,
        typer.Option(
            "--figures/--no-figures",
            help="Also draw the default figures into the run directory at the end "
            "(otherwise `iobench report RUN` draws them, with the HTML summary).",
        ),
    ] = False,
    history: Annotated[
        Path | None,
        typer.Option("--history", help="Add the run to this history store when it ends (`iobench history`)."),
    ] = None,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait",
            min=0,
            metavar="[SECONDS]",
            help="When another run holds a disk, wait for it (up to SECONDS; without them, until it ends).",
        ),
    ] = None,
) -> None:
    """Validate the matrix, run every point, save the results (and, with --figures, the default figures).

    Exit status: 0 all points ok, 1 some failed or timed out, 2 invalid input
    or refused for safety (nothing ran), 3 the environment stopped the run
    (disk full, run directory removed or read-only, target vanished; finished
    points kept, the message says how to finish), 130 interrupted (finished
    points kept).
    """
    from iobench.cli.console import PlainProgress
    from iobench.matrix.model import load_matrix
    from iobench.runner.sweep import NullProgress, Progress, RunInterrupted
    from iobench.runner.sweep import run as run_matrix

    progress: Progress
    live = None
    if quiet:
        progress = NullProgress()
    elif sys.stdout.isatty():
        from rich.console import Console

        from iobench.cli.live import RichProgress

        progress = live = RichProgress(Console())
    else:
        progress = PlainProgress(sys.stdout)
    try:
        lock_wait = _lock_wait(wait)
        m = load_matrix(matrix, targets=target or [], allow_write=allow_write or [])
        if history is not None:
            from iobench.answers.history import check_store

            check_store(history, m.name)
        result = run_matrix(
            m,
            out=out,
            resume=resume,
            allow_write=allow_write or [],
            fail_fast=fail_fast,
            progress=progress,
            lock_wait=lock_wait,
        )
        drawn: list[Path] = []
        if figures:
            from iobench.plots.files import run_figures

            drawn = run_figures(result.run_dir, result.frame, result.counts)
    except RunInterrupted as exc:
        options = [f"--target={t}" for t in target or []] + [f"--allow-write={a}" for a in allow_write or []]
        again = shlex.join(["iobench", "run", str(matrix), *options, "--resume", str(exc.result.run_dir)])
        saved = exc.result.counts.get("ok", 0)
        _err().print(
            f"iobench: interrupted: {counted(saved, 'point')} finished and were saved in {exc.result.run_dir}; "
            f"continue with `{again}`",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=exc.exit_code) from None
    except IobenchError as exc:
        options = [f"--target={t}" for t in target or []] + [f"--allow-write={a}" for a in allow_write or []]
        raise _fail(exc, options) from None
    except OSError as exc:
        raise _os_fault(exc) from None
    except KeyboardInterrupt:
        _err().print("iobench: interrupted before the sweep started; nothing was run")
        raise typer.Exit(code=130) from None
    finally:
        if live is not None:
            live.live.stop()
    try:
        if quiet:
            _warn(result.plan.warnings)
            print(result.run_dir)
        else:
            from iobench.cli.console import result_counts, validity_lines

            print(f"results: {result.run_dir}  ({result_counts(result)})")
            print(f"frame:   {result.run_dir / 'results.parquet'}")
            if drawn:
                print("figures: " + "  ".join(str(f) for f in drawn))
            elif not figures:
                print(f"figures: `iobench report {result.run_dir}` draws them (or run with --figures)")
            from iobench.results.steady import unjudged_line

            for line in [*validity_lines(result.frame, verbose=verbose), unjudged_line(result.frame)]:
                if line:
                    print(line)
            if result.plan.matrix.slo is not None:
                from iobench.answers.slo import answer_lines

                try:
                    for line in answer_lines(result.run_dir):
                        print(line)
                except IobenchError as exc:
                    print(f"slo: the answers cannot be read: {exc}")
        if history is not None and result.exit_code in (0, 1):
            try:
                add_runs(history, [result.run_dir])
            except IobenchError as exc:
                raise _fail(exc) from None
    except BrokenPipeError:
        from iobench.cli.console import reader_gone

        reader_gone(sys.stdout)  # the run is saved whatever the reader did: its exit status stands
    raise typer.Exit(code=result.exit_code)


def _describe_hosts(the_plan: Any) -> list[str]:
    """One line per host and per target on it: who it is and where its targets are."""
    from iobench.system.cpulist import format_cpulist

    lines = []
    for site, facts in zip(the_plan.sites, the_plan.hosts, strict=True):
        nodes = ", ".join(f"node {n.id}: cpus {format_cpulist(n.cpus) or '-'}" for n in facts.topology.nodes)
        lines.append(
            f"host {facts.name} ({facts.spec.target.destination}): hostname {facts.hostname or '?'}, "
            f"{facts.fio_version}, kernel {facts.kernel or '?'}; {nodes}"
        )
        for target in site.targets:
            location = site.locations[target.path]
            home = location.home_node if location.home_node is not None else target.home_node
            lines.append(
                f"  target {target.path}: {location.kind}, disks {', '.join(location.disks) or '-'}, "
                f"home node {home if home is not None else 'unknown'}"
            )
    return lines


def _show_plan(the_plan: Any, *, jobfiles: bool) -> None:
    m = the_plan.matrix
    print(
        f"{m.name}: {counted(len(m.combos), 'point')} × {counted(m.repeat, 'repeat')}, order {m.order}"
        + (f" (seed {the_plan.seed})" if the_plan.seed is not None else "")
    )
    if the_plan.hosts:
        print(f"fio: {m.fio_binary} ({m.fio_version}) as client; fio --server on each host")
        print("\n".join(_describe_hosts(the_plan)))
    else:
        print(f"fio: {m.fio_binary} ({m.fio_version}); topology from {the_plan.fsroot}")
    targets = [] if the_plan.hosts else m.targets
    for t in targets:
        loc = the_plan.locations[t.path]
        home = loc.home_node if loc.home_node is not None else t.home_node
        print(
            f"target {t.path}: {loc.kind}, disks {', '.join(loc.disks) or '-'}, home node "
            f"{home if home is not None else 'unknown'}"
        )
    if jobfiles:
        _show_runs(the_plan)
    else:
        _show_points(the_plan)


def _show_points(the_plan: Any) -> None:
    """One line per point: its parameters and where it runs, or why it is skipped."""
    from iobench.cli.console import describe_params

    firsts: dict[int, Any] = {}
    for r in the_plan.runs:
        firsts.setdefault(r.point, r)
    same = [r for r in firsts.values() if r.same_as is not None]
    skipped = sum(1 for r in firsts.values() if r.status == "skipped") - len(same)
    to_run = len(firsts) - skipped - len(same)
    print(
        f"\n{counted(to_run, 'point')} to run"
        + (f", {skipped} skipped" if skipped else "")
        + (f", {len(same)} the same as another here (not run again)" if same else "")
        + ":"
    )
    if same:
        print("placements that coincide here, so each such point runs once:")
        for why in dict.fromkeys((r.reason or "").partition(": ")[2] for r in same):
            print(f"  {why}")
    width = len(str(max(firsts, default=0)))
    for point, r in sorted(firsts.items()):
        if r.same_as is not None:
            where = f"same as point {r.same_as}"
        elif r.status == "skipped":
            where = f"skipped: {r.reason}"
        else:
            where = "; ".join(map(_placement, r.processes))
        print(f"  {point:>{width}}  {describe_params(r.params)}  {where}")
    print("\nfio's command lines and job files: add --jobfiles (all of it as JSON: --json)")


def _placement(p: Any) -> str:
    """``cpus 0-3 (node 0), target node 0``, led by the host or the targets where a point has several fio."""
    cpu_node = "-" if p.cpu_node is None else p.cpu_node
    target_node = "-" if p.target_node is None else p.target_node
    lead = f"host {p.host}: " if p.host is not None else ""
    return f"{lead}cpus {p.to_json()['cpus'] or '-'} (node {cpu_node}), target node {target_node}"


def _show_runs(the_plan: Any) -> None:
    """Every point × repeat with fio's command line, and each point's job files once."""
    m = the_plan.matrix
    seen: set[int] = set()
    for r in the_plan.runs:
        params = " ".join(f"{k}={v}" for k, v in r.params.items()) or "(no axes)"
        print(f"\n{r.key}  {r.status}  {params}")
        if r.status == "skipped":
            print(f"  reason: {r.reason}")
            continue
        if the_plan.hosts:
            from iobench.planner.plans import client_argv

            print(f"  $ {shlex.join(client_argv(m.fio_binary, r.processes))}")
        for p in r.processes:
            if p.host is not None:
                print(f"  host {p.host}:")
            else:
                print(f"  $ {shlex.join(p.argv)}")
            print(
                f"    cpu node {p.cpu_node if p.cpu_node is not None else '-'}, target node "
                f"{p.target_node if p.target_node is not None else '-'}, cpus {p.to_json()['cpus']}"
                + (f", job cpus {p.to_json()['job_cpus']}" if p.job_cpus else "")
            )
            if r.point not in seen:
                print("    " + p.jobfile.rstrip("\n").replace("\n", "\n    "))
        seen.add(r.point)


@app.command()
def plan(
    matrix: MatrixArg,
    target: TargetOpt = None,
    fsroot: FsrootOpt = Path("/"),
    allow_write: AllowWriteOpt = None,
    as_json: JsonOpt = False,
    jobfiles: Annotated[
        bool, typer.Option("--jobfiles", help="Show every run with fio's exact command line and job file.")
    ] = False,
) -> None:
    """Show every point: its parameters and placement, and the skipped ones with why. Runs nothing.

    With --jobfiles, every point × repeat with fio's exact command line and
    job file; with --json, all of it as JSON.
    """
    from iobench.matrix.model import load_matrix
    from iobench.planner.plans import plan as plan_matrix

    try:
        m = load_matrix(matrix, targets=target or [], allow_write=allow_write or [])
        the_plan = plan_matrix(m, fsroot=fsroot, allow_write=allow_write or [])
    except IobenchError as exc:
        raise _fail(exc) from None
    _warn(the_plan.warnings)
    if as_json:
        _print_json(the_plan.to_json())
    else:
        _show_plan(the_plan, jobfiles=jobfiles)


@app.command()
def topology(fsroot: FsrootOpt = Path("/"), as_json: JsonOpt = False) -> None:
    """NUMA nodes, CPUs, SMT siblings, block devices with their home node and PCIe placement."""
    from iobench.cli.console import pcie_lines
    from iobench.system.cpulist import format_cpulist
    from iobench.system.topology import discover_topology

    try:
        topo = discover_topology(fsroot)
    except IobenchError as exc:
        raise _fail(exc) from None
    if as_json:
        _print_json(topo.to_dict())
        return
    for node in topo.nodes:
        print(f"node {node.id}: cpus {format_cpulist(node.cpus) or '-'}  distances {list(node.distances)}")
    threads = {len(c.cpus) for c in topo.cores}
    print(f"{len(topo.cores)} cores, {'/'.join(map(str, sorted(threads))) or '?'} threads per core")
    for d in topo.devices:
        home = d.numa_node if d.numa_node is not None else "?"
        print(
            f"{d.name:<12} node {home}  scheduler {d.scheduler or '-'}  readahead {d.readahead_kb} KiB  "
            f"{d.model or ''}".rstrip()
        )
    for line in pcie_lines(topo):
        print(line)
    _warn(f for f in topo.pcie_findings() if f.severity == "warning")


@app.command()
def parse(
    files: Annotated[list[Path], typer.Argument(help="fio output files (JSON, terse, normal, mixed).")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write .parquet or .csv.")] = None,
) -> None:
    """Read any fio output into the tidy frame, with a column per job option fio states (bs, iodepth, ...).

    Each row's source is its file, relative to the folder common to all the files (said first).
    """
    from iobench.results.fioout import FRAME_HISTOGRAMS, parse_fio
    from iobench.results.fioout.parse import relative_sources

    if output is not None and output.suffix not in (".parquet", ".csv"):
        _err().print(f"iobench: {output}: use a .parquet or .csv file name for -o")
        raise typer.Exit(code=2)
    from iobench.store.rundir import replacing
    from iobench.store.untrusted import csv_safe

    try:
        frame, root = relative_sources(parse_fio(list(files)))
        if output is None:
            print(f"source: relative to {root}")
            print(frame.drop(columns=list(FRAME_HISTOGRAMS)).to_string(max_rows=60))
            return
        with replacing(output) as tmp:
            if output.suffix == ".parquet":
                frame.to_parquet(tmp, index=False)
            else:
                csv_safe(frame).to_csv(tmp, index=False)
        print(f"{output}: {counted(len(frame), 'row')}; source: relative to {root}")
    except IobenchError as exc:
        raise _fail(exc) from None


ResultsArg = Annotated[
    Path,
    typer.Argument(
        help="A run directory, or a .parquet/.csv frame from `iobench parse`.", show_default=False
    ),
]


@app.command()
def plot(
    results: ResultsArg,
    kind: Annotated[
        str,
        typer.Argument(
            help="local-vs-remote, smt, heatmap, latency, cpu-per-io, sweep, line, timeline or lat-heatmap.",
            show_default=False,
        ),
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="The figure file: .png, .svg or .pdf.")],
    x: Annotated[
        str | None, typer.Option("--x", help="The horizontal axis: a category (iodepth, bs ...).")
    ] = None,
    y: Annotated[
        str | None, typer.Option("--y", help="The metric, e.g. iops, bw_bytes, clat_p99_us.")
    ] = None,
    hue: Annotated[
        str | None, typer.Option("--hue", help="A colour per value: a line, a bar in a group, a heatmap row.")
    ] = None,
    col: Annotated[str | None, typer.Option("--col", help="A column of panels per value.")] = None,
    row: Annotated[str | None, typer.Option("--row", help="A row of panels per value.")] = None,
) -> None:
    """Draw one figure of a run (or a parsed frame) into a PNG, SVG or PDF file.

    Every kind reads --x, --y, --hue, --col and --row alike (docs/figures.md);
    an option that names a column that does not fit exits 2 naming those that do.
    """
    from iobench.plots import draw
    from iobench.plots.figures import RUN_KINDS
    from iobench.plots.files import save_figure_file

    try:
        data = results if kind in RUN_KINDS else _load(results)
        save_figure_file(draw(kind, data, x=x, y=y, hue=hue, col=col, row=row), output)
    except IobenchError as exc:
        raise _fail(exc) from None
    print(output)


@app.command()
def report(
    results: Annotated[Path, typer.Argument(help="A run directory.", show_default=False)],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Where to write (default RESULTS/report).")
    ] = None,
    formats: Annotated[
        list[str] | None,
        typer.Option("--format", help="Figure files to write: png (default), svg, pdf; repeatable."),
    ] = None,
    history: Annotated[
        Path | None,
        typer.Option(
            "--history", help="A history store holding the run: add its series over the store's runs."
        ),
    ] = None,
) -> None:
    """Every figure that fits the run, plus a self-contained HTML page (summary with CIs, machine, matrix)."""
    from iobench.report.page import write_report
    from iobench.report.runstate import run_lines

    try:
        written = write_report(results, out, formats=formats or ["png"], history=history)
    except IobenchError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        raise _os_fault(exc) from None
    _note(run_lines(written.run, written.notes))
    print(f"report:  {written.html}")
    print(f"summary: {written.summary}")
    if written.figures:
        print("figures: " + "  ".join(str(f) for f in written.figures))


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="The baseline run directory (A).", show_default=False)],
    run_b: Annotated[Path, typer.Argument(help="The run compared with it (B).", show_default=False)],
    by: Annotated[
        list[str] | None,
        typer.Option("--by", help="Columns that match points, comma-separated (default: the shared axes)."),
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            help="A metric to compare (repeatable; default iops, bw_bytes, lat_mean_us, clat_p99_us).",
        ),
    ] = None,
    min_effect: Annotated[
        float, typer.Option("--min-effect", help="Smallest change that counts, as a fraction (0.01 = 1 %).")
    ] = 0.01,
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Write compare.html, compare.csv and the ratio figure here."),
    ] = None,
    correction: Annotated[
        str,
        typer.Option(
            "--correction",
            help="Adjust the p-values over all the tests made: holm (any false change at most 5 %), "
            "bh (Benjamini–Hochberg: false changes at most 5 % of those found) or none.",
        ),
    ] = "holm",
) -> None:
    """Compare two runs point by point: ratio B/A with its 95 % CI, Welch's p, better/worse/no change.

    Exit status: 0 compared (whatever the verdicts), 2 invalid input (not run
    directories, no point in common, an unknown column or metric).
    """
    from iobench.cli.compare_view import StdoutConsole, show_comparison
    from iobench.report.compare_page import write_compare
    from iobench.results.compare import compare as compare_runs

    columns = [c.strip() for option in by or [] for c in option.split(",") if c.strip()]
    try:
        result = compare_runs(
            run_a,
            run_b,
            by=columns if by else None,
            metrics=metric or None,
            min_effect=min_effect,
            correction=correction,
        )
        page = write_compare(result, out) if out is not None else None
    except IobenchError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        raise _os_fault(exc) from None
    console = StdoutConsole(highlight=False, width=None if sys.stdout.isatty() else 200)
    show_comparison(console, result)
    if page is not None:
        print(f"page:    {page.html}")
        print(f"table:   {page.table}")
        if page.figures:
            print("figures: " + "  ".join(str(f) for f in page.figures))


@app.command()
def restore() -> None:
    """Put back every device setting a crashed or killed run left changed (and `system tune`'s), from the journal."""
    from iobench.system.tuning import restore_from_journals

    try:
        lines = restore_from_journals()
    except IobenchError as exc:
        raise _fail(exc) from None
    for line in lines:
        print(line)
    if not lines:
        print("nothing to restore: no device settings journal is pending")


system_app = typer.Typer(
    name="system",
    help="The machine's settings that make storage numbers unstable: show them, tune them, reset them.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(system_app)
app.add_typer(history_app)
SystemRootOpt = Annotated[
    Path | None,
    typer.Option(
        "--fsroot",
        help="The machine's files under DIR (DIR/sys, DIR/proc) instead of /.",
        show_default=False,
    ),
]
HostsOpt = Annotated[
    Path | None,
    typer.Option(
        "--hosts",
        help="The hosts of this matrix's `hosts:` instead of this machine, each reached as a run reaches it.",
        show_default=False,
    ),
]
HostOpt = Annotated[
    list[str] | None,
    typer.Option("--host", help="Only this host of --hosts (its name: or ssh:); repeatable."),
]


def _system_hosts(hosts: Path | None, host: list[str] | None, fsroot: Path | None) -> Any:
    """The host specs ``--hosts``/``--host`` choose (None: this machine), or exit 2 saying why."""
    if hosts is None:
        if host:
            _err().print(
                "iobench: --host names a host of --hosts MATRIX; give the matrix too",
                markup=False,
                soft_wrap=True,
            )
            raise typer.Exit(code=2)
        return None
    if fsroot is not None:
        _err().print(
            "iobench: --fsroot and --hosts cannot be combined: a host's files are read on the host",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=2)
    from iobench.matrix.model import load_matrix
    from iobench.planner.plans import host_specs
    from iobench.system.hostsettings import select_hosts

    try:
        matrix = load_matrix(hosts)
        if not matrix.hosts:
            _err().print(
                f"iobench: {hosts} has no `hosts:`; without --hosts, iobench system reads this machine",
                markup=False,
                soft_wrap=True,
            )
            raise typer.Exit(code=2)
        return select_hosts(host_specs(matrix), host or [])
    except IobenchError as exc:
        raise _fail(exc) from None


def _hosts_done(outcomes: Any) -> None:
    """The hosts that failed, on stderr, and exit 1 if any did (the others were done)."""
    failed = [o for o in outcomes if o.problem is not None]
    if failed:
        lines = "".join(f"\n  {o.problem}" for o in failed)
        _err().print(
            f"iobench: {len(failed)} of {len(outcomes)} hosts failed (the others were done):{lines}",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=1)


def _setting_lines(states: Any, tune: str, reset: str, indent: str = "") -> list[str]:
    """``system show``'s lines for one machine: each setting's verdict, value and why; what tune would do."""
    width = max(len(s.label) for s in states)
    lines = []
    for state in states:
        lines.append(f"{indent}{state.label:<{width}}  {state.verdict:<7}  {state.value}")
        lines.append(f"{indent}{'':<{width}}  {'':<7}  {state.note}")
    warned = [s.name for s in states if s.verdict == "warning" and s.tunable]
    if warned:
        lines += ["", f"{indent}`{tune}` changes {', '.join(warned)} (as root); `{reset}` undoes it"]
    return lines


@system_app.command("show")
def system_show(
    fsroot: SystemRootOpt = None,
    disk: Annotated[
        list[str] | None,
        typer.Option("--disk", help="A target's whole disk (write cache, polling); default: every disk."),
    ] = None,
    as_json: JsonOpt = False,
    hosts: HostsOpt = None,
    host: HostOpt = None,
) -> None:
    """Each setting with its value and a verdict (ok, note, warning, n/a) and why.

    With --hosts, each host's, one section (--json: one object) per host. Exit
    status: 0 shown, 1 some hosts could not be reached (each named with why;
    the others are shown), 2 invalid input (nothing was reached).
    """
    from iobench.system.hostfs import SystemRoot
    from iobench.system.stability import show

    specs = _system_hosts(hosts, host, fsroot)
    if specs is None:
        states = show(SystemRoot(fsroot or "/"), disk or ())
        if as_json:
            _print_json([s.to_json() for s in states])
        else:
            print("\n".join(_setting_lines(states, "iobench system tune", "iobench system reset")))
        return
    from iobench.system.hostsettings import show_hosts

    outcomes = show_hosts(specs, disk or ())
    if as_json:
        _print_json(
            {
                o.name: {"ssh": o.destination}
                | ({"problem": o.problem} if o.problem else {"settings": [s.to_json() for s in o.states]})
                for o in outcomes
            }
        )
    else:
        sections = []
        for o in outcomes:
            if o.problem is None:
                chosen = shlex.join(["--hosts", str(hosts), "--host", o.chosen_by])
                tune_command, reset_command = (f"iobench system {c} {chosen}" for c in ("tune", "reset"))
                sections.append(
                    "\n".join([o.who, *_setting_lines(o.states, tune_command, reset_command, "  ")])
                )
        print("\n\n".join(sections))
    _hosts_done(outcomes)


def _host_lines(outcomes: Any, nothing: str) -> None:
    """A section per host that was done: its lines, or ``nothing``."""
    for o in outcomes:
        if o.problem is None:
            print(o.who)
            for line in o.done or [nothing]:
                print(f"  {line}")


@system_app.command("tune")
def system_tune(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Settings to tune (default: each one with a warning that can be set now).",
            show_default=False,
        ),
    ] = None,
    fsroot: SystemRootOpt = None,
    hosts: HostsOpt = None,
    host: HostOpt = None,
) -> None:
    """Set what can be set at runtime for a benchmark; the old values are journaled for reset.

    Exit status 2, with nothing changed, when a named setting cannot be changed
    at runtime or a file it needs cannot be written. With --hosts, on each
    host; exit status 1 when some hosts failed (each named with why, nothing
    changed on it; the others were tuned).
    """
    from iobench.system.hostfs import SystemRoot
    from iobench.system.stability import left_alone, tune

    specs = _system_hosts(hosts, host, fsroot)
    if specs is not None:
        from iobench.system.hostsettings import tune_hosts

        try:
            outcomes = tune_hosts(specs, names or ())
        except IobenchError as exc:
            raise _fail(exc) from None
        _host_lines(
            outcomes,
            "nothing to tune: each setting asked for is as a benchmark wants it, or not on the host "
            "(`iobench system show --hosts` says which)",
        )
        if any(o.done for o in outcomes):
            print(
                f"`iobench system reset --hosts {shlex.quote(str(hosts))}` (or `iobench restore`) puts them back"
            )
        _hosts_done(outcomes)
        return
    try:
        done = tune(names or (), system=SystemRoot(fsroot or "/"))
    except IobenchError as exc:
        raise _fail(exc) from None
    for line in done:
        print(line)
    if done:
        print("`iobench system reset` (or `iobench restore`) puts them back")
        return
    for state in left_alone(names or (), system=SystemRoot(fsroot or "/")):
        if state.verdict == "n/a":
            print(f"{state.name}: not on this machine, nothing to tune ({state.note})")
        else:
            print(f"{state.name}: already as a benchmark wants it ({state.value})")


@system_app.command("reset")
def system_reset(fsroot: SystemRootOpt = None, hosts: HostsOpt = None, host: HostOpt = None) -> None:
    """Put back what `iobench system tune` changed, from the settings journal.

    With --hosts, on each host with a pending journal; exit status 1 when some
    could not be put back (their journals are kept for another try).
    """
    from iobench.system.hostfs import SystemRoot
    from iobench.system.stability import reset

    specs = _system_hosts(hosts, host, fsroot)
    if specs is not None:
        from iobench.system.hostsettings import reset_hosts

        outcomes = reset_hosts(specs)
        _host_lines(outcomes, "nothing to reset: no machine settings journal is pending")
        _hosts_done(outcomes)
        return
    try:
        done = reset(system=SystemRoot(fsroot or "/"))
    except IobenchError as exc:
        raise _fail(exc) from None
    for line in done:
        print(line)
    if not done:
        print("nothing to reset: no machine settings journal is pending")


def main() -> None:
    """Entry point of the ``iobench`` command and ``python -m iobench``.

    Output still buffered for a pipe is written here, so that a reader that
    went away ends the command as quietly as one that left while it printed.
    """
    try:
        app()
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            from iobench.cli.console import reader_gone

            reader_gone(sys.stdout)
        except OSError as exc:  # a full disk under `iobench plan M > FILE`
            _err().print(f"iobench: cannot write the output: {exc.strerror}", markup=False)
            raise SystemExit(1) from None

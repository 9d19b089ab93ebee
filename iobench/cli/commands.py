"""The ``iobench`` command: a thin Typer layer over the library (SPEC §1)."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from iobench.errors import FULL, EnvironmentFault, IobenchError, NextStep, RunStorageError

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(
    name="iobench",
    help="fio sweeps from a YAML matrix: NUMA/SMT placement, tidy frames, figures.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@functools.cache
def _err() -> Console:
    """rich's console on stderr, made when first used: rich takes a tenth of a second to load."""
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
    typer.Option("--allow-write", help="Allow writing this device or file despite a signature (repeatable)."),
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
            does = f"runs the {step.left} point{'' if step.left == 1 else 's'} left"
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


class _DrawLater:
    """Progress that gets the figures ready: their modules load while the first point runs, drawing starts
    as soon as the frame of the points is (``frame_ready``), and the command collects them at the end."""

    drawing: Any = None

    def __init__(self, shown: Any) -> None:
        self.shown = shown

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shown, name)

    def frame_ready(self, run_dir: Path, frame: Any) -> None:
        """Start drawing the figures while the runner adds telemetry and steady state to the frame."""
        from iobench.plots.files import start_run_figures

        try:
            self.drawing = start_run_figures(run_dir, frame)
        except (IobenchError, OSError):
            self.drawing = None  # drawn again after the run, where the failure is reported

    def stop_drawing(self) -> None:
        """The run failed after the figures were started: no child is left drawing."""
        if self.drawing is not None:
            self.drawing.cancel()


def _note(lines: list[str]) -> None:
    """What the library noted about a run (incomplete, damaged points, files that cannot be read), on stderr."""
    if lines:
        _err().print("[yellow]note:[/] " + _escape("\n  ".join(lines)), markup=True, soft_wrap=True)


@contextlib.contextmanager
def _closed_pipe_ends_quietly() -> Iterator[None]:
    """Output to a reader that went away (``iobench compare A B | head``) ends the command quietly, with 0."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        # Nothing more can reach the reader; point stdout at /dev/null so that no later flush fails.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise typer.Exit(code=0) from None


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


def _broken_pipe() -> None:
    """For rich's console: a closed pipe is :func:`_closed_pipe_ends_quietly`'s to handle."""
    raise BrokenPipeError


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _warn(warnings: Any) -> None:
    """Print a plan's warnings (``Plan.warnings``) to stderr."""
    for warning in warnings:
        _err().print(f"[yellow]warning:[/] {_escape(str(warning))}", markup=True, soft_wrap=True)


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
    figures: Annotated[
        bool,
        typer.Option(
            "--figures/--no-figures",
            help="Also draw the default figures into the run directory at the end "
            "(otherwise `iobench report RUN` draws them, with the HTML summary).",
        ),
    ] = False,
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
    drawer = _DrawLater(progress) if figures else None
    try:
        m = load_matrix(matrix, targets=target or [], allow_write=allow_write or [])
        result = run_matrix(
            m,
            out=out,
            resume=resume,
            allow_write=allow_write or [],
            fail_fast=fail_fast,
            progress=drawer or progress,
        )
        drawn: list[Path] = []
        if drawer is not None:
            from iobench.plots.files import run_figures

            drawn = run_figures(result.run_dir, result.frame, result.counts, drawing=drawer.drawing)
            drawer.drawing = None
    except RunInterrupted as exc:
        options = [f"--target={t}" for t in target or []] + [f"--allow-write={a}" for a in allow_write or []]
        again = shlex.join(["iobench", "run", str(matrix), *options, "--resume", str(exc.result.run_dir)])
        saved = exc.result.counts.get("ok", 0)
        _err().print(
            f"iobench: interrupted: {saved} points finished and were saved in {exc.result.run_dir}; "
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
        if drawer is not None:
            drawer.stop_drawing()
        if live is not None:
            live.live.stop()
    if quiet:
        _warn(result.plan.warnings)
        print(result.run_dir)
    else:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(result.counts.items()))
        print(f"results: {result.run_dir}  ({counts})")
        print(f"frame:   {result.run_dir / 'results.parquet'}")
        if drawn:
            print("figures: " + "  ".join(str(f) for f in drawn))
        elif not figures:
            print(f"figures: `iobench report {result.run_dir}` draws them (or run with --figures)")
        from iobench.cli.console import validity_lines

        for line in validity_lines(result.frame):
            print(line)
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


def _show_plan(the_plan: Any) -> None:
    m = the_plan.matrix
    print(
        f"{m.name}: {len(m.combos)} points × {m.repeat} repeats, order {m.order}"
        + (f" (seed {the_plan.seed})" if the_plan.seed is not None else "")
    )
    if the_plan.hosts:
        from iobench.planner.plans import client_argv

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
    seen: set[int] = set()
    for r in the_plan.runs:
        params = " ".join(f"{k}={v}" for k, v in r.params.items()) or "(no axes)"
        print(f"\n{r.key}  {r.status}  {params}")
        if r.status == "skipped":
            print(f"  reason: {r.reason}")
            continue
        if the_plan.hosts:
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
) -> None:
    """Show every point: parameters, placement, the exact argv and job file. Runs nothing."""
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
        _show_plan(the_plan)


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
    """Read any fio output into the tidy frame."""
    from iobench.results.fioout import FRAME_HISTOGRAMS, parse_fio

    if output is not None and output.suffix not in (".parquet", ".csv"):
        _err().print(f"iobench: {output}: use a .parquet or .csv file name for -o")
        raise typer.Exit(code=2)
    from iobench.store.rundir import replacing

    try:
        frame = parse_fio(list(files))
        if output is None:
            print(frame.drop(columns=list(FRAME_HISTOGRAMS)).to_string(max_rows=60))
            return
        with replacing(output) as tmp:
            if output.suffix == ".parquet":
                frame.to_parquet(tmp, index=False)
            else:
                frame.to_csv(tmp, index=False)
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
            help="local-vs-remote, smt, heatmap, latency, cpu-per-io, sweep, line or timeline.",
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
) -> None:
    """Every figure that fits the run, plus a self-contained HTML page (summary with CIs, machine, matrix)."""
    from iobench.report.page import write_report
    from iobench.report.runstate import run_lines

    try:
        written = write_report(results, out, formats=formats or ["png"])
    except IobenchError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        raise _os_fault(exc) from None
    _note(run_lines(written.run, written.notes))
    with _closed_pipe_ends_quietly():
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
    from iobench.cli.compare_view import show_comparison
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
    from rich.console import Console

    console = Console(highlight=False) if sys.stdout.isatty() else Console(highlight=False, width=200)
    console.on_broken_pipe = _broken_pipe  # type: ignore[method-assign]  # rich would exit with 1
    with _closed_pipe_ends_quietly():
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
SystemRootOpt = Annotated[
    Path, typer.Option("--fsroot", help="The machine's files under DIR (DIR/sys, DIR/proc) instead of /.")
]


@system_app.command("show")
def system_show(
    fsroot: SystemRootOpt = Path("/"),
    disk: Annotated[
        list[str] | None,
        typer.Option("--disk", help="A target's whole disk (write cache, polling); default: every disk."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Each setting with its value and a verdict (ok, note, warning, n/a) and why."""
    from iobench.system.hostfs import SystemRoot
    from iobench.system.stability import show

    states = show(SystemRoot(fsroot), disk or ())
    if as_json:
        _print_json([s.to_json() for s in states])
        return
    width = max(len(s.label) for s in states)
    for state in states:
        print(f"{state.label:<{width}}  {state.verdict:<7}  {state.value}")
        print(f"{'':<{width}}  {'':<7}  {state.note}")
    warned = [s.name for s in states if s.verdict == "warning" and s.tunable]
    if warned:
        print(
            f"\n`iobench system tune` changes {', '.join(warned)} (as root); `iobench system reset` undoes it"
        )


@system_app.command("tune")
def system_tune(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Settings to tune (default: each one with a warning that can be set now).",
            show_default=False,
        ),
    ] = None,
    fsroot: SystemRootOpt = Path("/"),
) -> None:
    """Set what can be set at runtime for a benchmark; the old values are journaled for reset.

    Exit status 2, with nothing changed, when a named setting cannot be changed
    at runtime or a file it needs cannot be written.
    """
    from iobench.system.hostfs import SystemRoot
    from iobench.system.stability import tune

    try:
        done = tune(names or (), system=SystemRoot(fsroot))
    except IobenchError as exc:
        raise _fail(exc) from None
    for line in done:
        print(line)
    if done:
        print("`iobench system reset` (or `iobench restore`) puts them back")
    else:
        print("nothing to tune: every setting asked for is already as a benchmark wants it")


@system_app.command("reset")
def system_reset(fsroot: SystemRootOpt = Path("/")) -> None:
    """Put back what `iobench system tune` changed, from the settings journal."""
    from iobench.system.hostfs import SystemRoot
    from iobench.system.stability import reset

    try:
        done = reset(system=SystemRoot(fsroot))
    except IobenchError as exc:
        raise _fail(exc) from None
    for line in done:
        print(line)
    if not done:
        print("nothing to reset: no machine settings journal is pending")


def main() -> None:
    """Entry point of the ``iobench`` command and ``python -m iobench``.

    Once the command has ended, whatever it wrote is closed and synced and its
    output flushed; the interpreter's own teardown (a quarter of a second
    with pandas and matplotlib loaded) would only make the shell wait, so the
    process exits at once.
    """
    try:
        app()
        code: int = 0
    except SystemExit as done:
        if isinstance(done.code, str):
            print(done.code, file=sys.stderr)
            code = 1
        else:
            code = int(done.code or 0)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach the reader
            code = code or 1
    os._exit(code)

"""The matrix file (docs/matrix.md): pydantic models, every error at once, then expansion."""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)

from iobench.errors import MatrixError
from iobench.matrix.expand import Combo, expand, matrix_size
from iobench.matrix.fiocatalog import FioCatalog, FioOption, fio_catalog
from iobench.matrix.fiooptions import (
    OPTIONS,
    PLACEMENT_OPTIONS,
    TRIM_OPTIONS,
    allowed_engine,
    filename_problem,
    rule,
    value_problem,
)
from iobench.matrix.hosts import NAME_PATTERN, Host, parse_server
from iobench.matrix.slospec import SloModel, SloSpec, slo_spec
from iobench.matrix.targets import COMMAND_LINE, Target, VariableError, expand_path
from iobench.matrix.units import parse_seconds, parse_size
from iobench.matrix.values import (
    IOBENCH_AXES,
    LAUNCHES,
    PLACEMENTS,
    Scalar,
    Value,
    axis_value,
    fio_text,
    option_value,
)
from iobench.matrix.yamlsource import YamlSyntaxError, load_yaml, locate, locate_key, read_matrix
from iobench.system.fleet import MAX_HOSTS, too_many_hosts
from iobench.system.sshoptions import destination_problem, host_ssh_options_problem, ssh_option_problem

SUPPORTED_VERSIONS = (1,)
MAX_RUNS = 10_000
WRITE_MODES = {
    "write",
    "trim",
    "randwrite",
    "randtrim",
    "rw",
    "readwrite",
    "randrw",
    "trimwrite",
    "randtrimwrite",
}
#: The values of iobench's own axes that are words, for suggestions.
AXIS_CHOICES = {"placement": PLACEMENTS, "launch": LAUNCHES, "binding": ("none", "local", "remote")}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _scalar(value: Any) -> Scalar:
    if isinstance(value, bool | int | float | str):
        return value
    if value is None:
        raise ValueError("empty value (a bare `null` in YAML is nothing; quote it: 'null')")
    raise ValueError("must be a single value (string, number or boolean), not a list or mapping")


ScalarValue = Annotated[Any, BeforeValidator(_scalar)]


class TargetModel(BaseModel):
    """One entry of ``targets:``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: StrictStr = Field(min_length=1)
    size: StrictStr | StrictInt | None = None
    home_node: int | None = Field(default=None, ge=0)
    allow_write: StrictBool = False


class HostModel(BaseModel):
    """One entry of ``hosts:`` (:mod:`iobench.matrix.hosts`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: StrictStr | None = Field(default=None, pattern=NAME_PATTERN)
    ssh: StrictStr = Field(min_length=1)
    ssh_options: list[StrictStr] = []
    targets: list[TargetModel] | None = None
    server: StrictStr | None = None


class AxesModel(BaseModel):
    """``matrix:``: axes (any key) plus ``include`` and ``exclude``."""

    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, list[ScalarValue]] = Field(init=False)

    include: list[dict[str, ScalarValue]] = []
    exclude: list[dict[str, ScalarValue]] = []


#: Seconds between telemetry samples when the matrix does not say.
TELEMETRY_INTERVAL_S = 1.0
#: The shortest and longest interval ``telemetry: {interval: ...}`` accepts.
TELEMETRY_LIMITS_S = (0.05, 3600.0)


class MatrixModel(BaseModel):
    """The whole matrix file, structure only; meaning is checked afterwards."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    description: str = ""
    targets: list[TargetModel] = []
    hosts: list[HostModel] = []
    fio: dict[str, ScalarValue] = {}
    matrix: AxesModel = AxesModel()
    repeat: int = Field(default=1, ge=1, le=1000)
    order: Literal["sequential", "interleaved", "shuffled"] = "interleaved"
    seed: int | None = None
    launch: Literal["single", "per-target"] = "single"
    timeout: StrictStr | StrictInt | None = None
    drop_caches: StrictBool = False
    telemetry: Any = True
    slo: SloModel | None = None


@dataclass(frozen=True)
class Matrix:
    """A validated matrix: what :func:`iobench.plan` and :func:`iobench.run` take."""

    source: str
    text: str
    name: str
    description: str
    targets: tuple[Target, ...]
    fio: dict[str, Value]
    axes: dict[str, tuple[Value, ...]]
    combos: tuple[Combo, ...]
    repeat: int
    order: str
    seed: int | None
    launch: str
    timeout_s: float | None
    drop_caches: bool
    fio_binary: str
    fio_version: str
    telemetry_s: float | None = TELEMETRY_INTERVAL_S
    """Seconds between telemetry samples while a point runs; None when ``telemetry: false``."""
    hosts: tuple[Host, ...] = ()
    slo: SloSpec | None = None
    """The latency target whose highest load each combination searches for (docs/slo.md); None: a grid."""

    @property
    def runs(self) -> int:
        """Points × repeats."""
        return len(self.combos) * self.repeat

    @property
    def values(self) -> tuple[Combo, ...]:
        """Each point's canonical values (sizes in bytes): the frame's parameter columns."""
        return self.combos

    def setting(self, combo: Combo, name: str) -> Value | None:
        """A point's canonical value of ``name``: its axis value, else the ``fio:`` one."""
        return combo[name] if name in combo else self.fio.get(name)


def _suggestion(text: str, choices: tuple[str, ...]) -> str:
    """``did you mean `randread`?`` for a mistyped choice (``randred``); empty when nothing is close."""
    head = text.strip().partition(":")[0].lower()
    close = difflib.get_close_matches(head, choices, n=1)
    return f"did you mean `{close[0]}`?" if close else ""


def _dotted(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top)"


class _Issues:
    """Collects problems with their YAML position so all are reported at once."""

    def __init__(self, source: str, node: Any) -> None:
        self.source, self.node, self.items = source, node, []  # type: ignore[var-annotated]

    def where(self, loc: tuple[str | int, ...], *, key: bool = False) -> str:
        """``matrix.yaml:7:11``: the file and the line and column of ``loc`` in it."""
        return f"{Path(self.source).name}:{(locate_key if key else locate)(self.node, loc)}"

    def add(self, loc: tuple[str | int, ...], message: str, hint: str = "", *, key: bool = False) -> None:
        text = f"{self.where(loc, key=key)}: {_dotted(loc)}: {message}"
        self.items.append(f"{text} (hint: {hint})" if hint else text)

    def raise_if_any(self) -> None:
        """Raise every problem found so far, in the order of the file (line, then column)."""
        if self.items:
            raise MatrixError(self.source, sorted(self.items, key=_file_order))


_POSITION = re.compile(r"^[^:]*:(\d+):(\d+): ")


def _file_order(item: str) -> tuple[int, int]:
    found = _POSITION.match(item)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def _pydantic_issues(exc: ValidationError, issues: _Issues) -> None:
    allowed = {
        (): sorted(MatrixModel.model_fields),
        ("targets",): sorted(TargetModel.model_fields),
        ("hosts",): sorted(HostModel.model_fields),
        ("hosts", "targets"): sorted(TargetModel.model_fields),
        ("slo",): sorted(SloModel.model_fields),
    }
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
        kind = err["type"]
        if kind == "extra_forbidden":
            parent = tuple(p for p in loc[:-1] if not isinstance(p, int))
            names = allowed.get(parent, [])
            close = difflib.get_close_matches(str(loc[-1]), names, n=1)
            hint = f"did you mean `{close[0]}`?" if close else f"allowed keys: {', '.join(names)}"
            if parent == ():
                hint += "; fio options go under `fio:`, axes under `matrix:`"
            issues.add(loc, "unknown key", hint, key=True)
        elif kind == "missing" and loc == ("version",):
            issues.add((), "`version` is missing", "put `version: 1` at the top of the file")
        elif kind == "missing":
            issues.add(loc[:-1], f"`{loc[-1]}` is required", f"add `{loc[-1]}:`")
        elif kind == "string_pattern_mismatch" and loc == ("name",):
            issues.add(loc, "invalid run name", "use letters, digits, '.', '_' and '-' (at most 64)")
        elif kind == "string_pattern_mismatch" and loc[0] == "hosts" and loc[-1] == "name":
            issues.add(loc, "invalid host name", "use letters, digits, '.', '_' and '-' (at most 64)")
        else:
            issues.add(loc, err["msg"].removeprefix("Value error, "))


#: Longest job section name kept from a target's file name (fio reads at most 254 characters).
SECTION_CHARS = 200


def _section_name(path: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]", "_", Path(path).name)[:SECTION_CHARS] or "target"
    if base.startswith("global"):
        # fio makes every section whose name starts with "global" a [global] one.
        base = f"target-{base}"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return name


def _check_text(issues: _Issues, loc: tuple[str | int, ...], value: str, what: str) -> bool:
    if _CONTROL.search(value):
        issues.add(
            loc, f"{what} contains a newline or control character", "a matrix is data: one line per value"
        )
        return False
    return True


@dataclass
class _Checker:
    """The meaning of a structurally valid matrix, checked against the installed fio."""

    model: MatrixModel
    catalog: FioCatalog
    issues: _Issues

    def engines(self) -> tuple[str, ...]:
        """The allowed engines the matrix names, whose own options it may use.

        Only these are ever handed to fio (``--enghelp``): fio loads a name that
        is not one of its engines as a library (``dlopen``), running its code.
        """
        found = [self.model.fio.get("ioengine")]
        found += list(self.model.matrix.__pydantic_extra__.get("ioengine", []))
        found += [entry.get("ioengine") for entry in self.model.matrix.include]
        names = (str(e).strip().lower() for e in found if e is not None)
        return tuple(dict.fromkeys(name for name in names if allowed_engine(name)))

    def refusal(self, loc: tuple[str | int, ...], name: str) -> bool:
        """Record why option ``name`` may not be set, per :mod:`iobench.matrix.fiooptions`; False if it may."""
        entry = rule(name)
        if entry.kind == "managed":
            self.issues.add(loc, f"`{name}` is set by iobench: {entry.why}", entry.instead, key=True)
        elif entry.kind == "refused":
            self.issues.add(loc, f"`{name}` is refused: {entry.why}", entry.instead, key=True)
        return entry.kind != "allowed"

    def option(self, loc: tuple[str | int, ...], name: str) -> FioOption | None:
        if not _check_text(self.issues, loc, name, "option name"):
            return None
        # Named in the table as it is written (`include`, an alias iobench knows): no need to ask fio.
        if name in OPTIONS and self.refusal(loc, name):
            return None
        found = self.catalog.lookup(name, self.engines())
        if found is None:
            names = self.catalog.option_names() + list(IOBENCH_AXES)
            close = difflib.get_close_matches(name, names, n=1)
            hint = (
                f"did you mean `{close[0]}`?"
                if close
                else "see `fio --cmdhelp` for the options this fio knows"
            )
            self.issues.add(loc, f"unknown fio option `{name}` ({self.catalog.version})", hint, key=True)
            return None
        if self.refusal(loc, found.name):
            return None
        return found

    def value(self, loc: tuple[str | int, ...], option: FioOption, value: Scalar) -> Value | None:
        """The canonical value of ``option``; None (with the problem recorded) when it is refused."""
        text = fio_text(value)
        if not _check_text(self.issues, loc, text, "value"):
            return None
        problem = value_problem(text)
        if problem:
            self.issues.add(loc, f"{problem}: {text!r}", "write the value out without `$`, `;` or `#`")
            return None
        check = rule(option.name).check
        problem = check(text.strip()) if check else None
        if problem:
            self.issues.add(loc, problem)
            return None
        if option.name == "ioengine":
            # The engine table is the allowlist; `fio --cmdhelp=ioengine` leaves some engines out.
            return text.strip().lower()
        try:
            return option_value(option, value)
        except ValueError as exc:
            self.issues.add(loc, str(exc), _suggestion(text, option.choices))
            return None

    def axis_value(self, loc: tuple[str | int, ...], axis: str, value: Scalar) -> Value | None:
        text = fio_text(value)
        if not _check_text(self.issues, loc, text, "value"):
            return None
        try:
            return axis_value(axis, value)
        except ValueError as exc:
            self.issues.add(loc, str(exc), _suggestion(text, AXIS_CHOICES.get(axis, ())))
            return None

    def key(self, loc: tuple[str | int, ...], name: str) -> str | None:
        """Check an axis/include key; return its canonical name, or None when invalid."""
        if name in IOBENCH_AXES:
            return name
        option = self.option(loc, name)
        return option.name if option else None

    def any_value(self, loc: tuple[str | int, ...], name: str, value: Scalar) -> Value | None:
        """The canonical value of axis ``name`` (already a canonical name); None when invalid."""
        if name in IOBENCH_AXES:
            return self.axis_value(loc, name, value)
        option = self.catalog.lookup(name, self.engines())
        if option is None:
            return None
        canonical = self.value(loc, option, value)
        if name == "bs" and isinstance(canonical, str):
            self.issues.add(
                loc,
                f"a bs axis takes single sizes, not {value!r}",
                "use bsrange or bssplit in `fio:` for mixes",
            )
            return None
        return canonical


def _fio_section(checker: _Checker) -> dict[str, Value]:
    fio: dict[str, Value] = {}
    for name, value in checker.model.fio.items():
        option = checker.option(("fio", name), name)
        if option is None:
            continue
        canonical = checker.value(("fio", name), option, value)
        if option.name in fio:
            checker.issues.add(("fio", name), f"`{option.name}` is given twice (once as an alias)")
        if canonical is not None:
            fio[option.name] = canonical
    return fio


def _axes(checker: _Checker, fio: dict[str, Value]) -> dict[str, tuple[Value, ...]]:
    axes: dict[str, tuple[Value, ...]] = {}
    for name, values in checker.model.matrix.__pydantic_extra__.items():
        loc: tuple[str | int, ...] = ("matrix", name)
        canonical = checker.key(loc, name)
        if canonical is None:
            continue
        if canonical in fio:
            checker.issues.add(
                loc,
                f"`{canonical}` is both an axis and set under `fio:`",
                "remove it from one of them",
                key=True,
            )
        if canonical in axes:
            checker.issues.add(loc, f"axis `{canonical}` is given twice (once as an alias)", key=True)
        if not values:
            checker.issues.add(loc, "an axis needs at least one value")
        seen: dict[Value, Scalar] = {}
        for i, value in enumerate(values):
            typed = checker.any_value((*loc, i), canonical, value)
            if typed is None:
                continue
            if typed in seen:
                first = seen[typed]
                same = "" if first == value else f": {first!r} and {value!r} are both {fio_text(typed)}"
                checker.issues.add(
                    (*loc, i),
                    f"duplicate value {value!r}{same}",
                    "each value makes one point; list it once",
                )
                continue
            seen[typed] = value
        axes[canonical] = tuple(seen)
    if "binding" in axes or "placement" in axes:
        for name in PLACEMENT_OPTIONS:
            if name in fio:
                checker.issues.add(
                    ("fio", name),
                    f"`{name}` conflicts with the binding/placement axes",
                    "let the axes place fio, or drop them",
                    key=True,
                )
    return axes


def _entries(checker: _Checker, kind: str, axes: dict[str, tuple[Value, ...]]) -> list[Combo]:
    entries: list[Combo] = []
    source = checker.model.matrix.include if kind == "include" else checker.model.matrix.exclude
    for i, entry in enumerate(source):
        combo: Combo = {}
        if not entry:
            checker.issues.add(("matrix", kind, i), f"empty {kind} entry")
        for name, value in entry.items():
            loc: tuple[str | int, ...] = ("matrix", kind, i, name)
            canonical = checker.key(loc, name)
            if canonical is None:
                continue
            if kind == "exclude" and canonical not in axes:
                checker.issues.add(
                    loc,
                    f"exclude names `{canonical}`, which is not an axis",
                    f"axes: {', '.join(axes) or 'none'}",
                    key=True,
                )
            typed = checker.any_value(loc, canonical, value)
            if typed is not None:
                combo[canonical] = typed
        entries.append(combo)
    return entries


def _targets(checker: _Checker, extra: tuple[str, ...], allow_write: tuple[str, ...]) -> tuple[Target, ...]:
    issues = checker.issues
    specs: list[tuple[tuple[str | int, ...], TargetModel]] = []
    if extra:
        template = checker.model.targets[0] if checker.model.targets else None
        for path in extra:
            specs.append(
                (
                    (COMMAND_LINE,),
                    TargetModel(
                        path=path, size=template.size if template else None, allow_write=path in allow_write
                    ),
                )
            )
    else:
        specs = [(("targets", i), t) for i, t in enumerate(checker.model.targets)]
    hosts = checker.model.hosts
    if not specs and (not hosts or any(h.targets is None for h in hosts)):
        issues.add(("targets",), "no targets", "add `targets:` with a `path:`, or pass --target PATH")
    return _target_list(issues, specs)


def _target_list(
    issues: _Issues, specs: list[tuple[tuple[str | int, ...], TargetModel]], *, remote: bool = False
) -> tuple[Target, ...]:
    """Targets from their entries; ``remote``: paths on another host, which must be absolute."""
    targets: list[Target] = []
    taken: set[str] = set()
    for loc, spec in specs:
        try:
            path = expand_path(spec.path, remote=remote)
        except VariableError as exc:
            issues.add((*loc, "path"), *exc.args)
            continue
        if not _check_text(issues, (*loc, "path"), path, "path"):
            continue
        if remote and not path.startswith("/"):
            issues.add(
                (*loc, "path"), f"{path!r} is not an absolute path", "a host's targets are paths on it"
            )
            continue
        size = None
        if spec.size is not None:
            try:
                size = parse_size(spec.size)
            except ValueError as exc:
                issues.add((*loc, "size"), str(exc))
        absolute = os.path.abspath(path)
        spelling = filename_problem(path) or filename_problem(absolute)
        if spelling:
            shown = repr(path) if absolute == path else f"{path!r} ({absolute!r})"
            issues.add(
                (*loc, "path"),
                f"target {shown} is refused: {spelling}, so fio would open another file than the one judged",
                "rename or link it to a path without blanks at its ends, `;`, `#`, `$` or `\\`",
            )
            continue
        if any(t.path == absolute for t in targets):
            issues.add((*loc, "path"), f"target {absolute} is listed twice")
        where = COMMAND_LINE if loc == (COMMAND_LINE,) else issues.where((*loc, "path"))
        targets.append(
            Target(absolute, size, spec.home_node, spec.allow_write, _section_name(absolute, taken), where)
        )
    return tuple(targets)


def _telemetry(checker: _Checker) -> float | None:
    """``telemetry:``: true (every :data:`TELEMETRY_INTERVAL_S`), false, or ``{interval: 0.5}``."""
    raw = checker.model.telemetry
    if raw is False:
        return None
    if raw is True:
        return TELEMETRY_INTERVAL_S
    hint = "write `telemetry: false`, `telemetry: true` or `telemetry: {interval: 0.5}`"
    if not isinstance(raw, dict):
        checker.issues.add(("telemetry",), f"{raw!r} is not true, false or a mapping", hint)
        return None
    for key in raw:
        if key != "interval":
            checker.issues.add(("telemetry", str(key)), "unknown key", "allowed keys: interval", key=True)
    interval = raw.get("interval", TELEMETRY_INTERVAL_S)
    if isinstance(interval, bool) or not isinstance(interval, int | float | str):
        checker.issues.add(("telemetry", "interval"), f"{interval!r} is not a duration", hint)
        return None
    try:
        seconds = parse_seconds(interval)
    except ValueError as exc:
        checker.issues.add(("telemetry", "interval"), str(exc))
        return None
    low, high = TELEMETRY_LIMITS_S
    if not low <= seconds <= high:
        checker.issues.add(
            ("telemetry", "interval"),
            f"interval {seconds:g} s is outside {low:g}–{high:g} s",
            "1 s is the default; `telemetry: false` turns sampling off",
        )
    return seconds


def _slo(checker: _Checker, fio: dict[str, Value], axes: dict[str, tuple[Value, ...]]) -> SloSpec | None:
    """``slo:`` checked, and its load refused where the matrix also sets it (an axis, ``fio:``, an include)."""
    model = checker.model.slo
    if model is None:
        return None
    spec, problems = slo_spec(model)
    for name, message, hint in problems:
        checker.issues.add(("slo", name), message, hint)
    load = model.load
    places: list[tuple[str | int, ...]] = [("matrix", load)] if load in axes else []
    places += [("fio", load)] if load in fio else []
    places += [
        ("matrix", "include", i, load) for i, e in enumerate(checker.model.matrix.include) if load in e
    ]
    for place in places:
        checker.issues.add(
            ("slo", "load"),
            f"`{load}` is the load the search sets, but {_dotted(place)} ({checker.issues.where(place, key=True)}) "
            "sets it too",
            f"remove `{load}` from {_dotted(place[:-1])}, or search another load",
        )
    return spec


def _hosts(checker: _Checker, axes: dict[str, tuple[Value, ...]], entries: list[Combo]) -> tuple[Host, ...]:
    """``hosts:`` checked for form, and the ``host`` axis against their names."""
    issues = checker.issues
    hosts: list[Host] = []
    seen: dict[str, int] = {}
    if len(checker.model.hosts) > MAX_HOSTS:
        issues.add(
            ("hosts",),
            too_many_hosts(len(checker.model.hosts)),
            f"split the hosts over several runs of at most {MAX_HOSTS}",
            key=True,
        )
        return ()
    for index, model in enumerate(checker.model.hosts):
        loc: tuple[str | int, ...] = ("hosts", index)
        problem = destination_problem(model.ssh)
        if problem and _check_text(issues, (*loc, "ssh"), model.ssh, "ssh destination"):
            issues.add((*loc, "ssh"), f"ssh destination {model.ssh!r} is refused", problem)
        for i, option in enumerate(model.ssh_options):
            refused = ssh_option_problem(option)
            if refused:
                issues.add((*loc, "ssh_options", i), *refused)
            else:
                _check_text(issues, (*loc, "ssh_options", i), option, "ssh option")
        together = host_ssh_options_problem(model.ssh_options)
        if together:
            issues.add((*loc, "ssh_options"), *together)
        server = None
        if model.server is not None:
            try:
                server = parse_server(model.server)
            except ValueError as exc:
                issues.add((*loc, "server"), str(exc))
        targets = None
        if model.targets is not None:
            if not model.targets:
                issues.add((*loc, "targets"), "empty list", "drop `targets:` to use the matrix's targets")
            specs = [((*loc, "targets", i), t) for i, t in enumerate(model.targets)]
            targets = _target_list(issues, specs, remote=True)
        key = model.name or f"{model.ssh} {' '.join(model.ssh_options)}"
        if key in seen:
            what = f"host name `{model.name}`" if model.name else f"ssh destination {model.ssh!r}"
            issues.add(
                (*loc, "name" if model.name else "ssh"),
                f"{what} is given twice (hosts[{seen[key]}] and hosts[{index}])",
                "give each host its own `name:`",
            )
        seen[key] = index
        hosts.append(Host(model.name, model.ssh, tuple(model.ssh_options), targets, server, index))
    names = {h.name for h in hosts if h.name}
    counts: list[tuple[tuple[str | int, ...], Value]] = [
        (("matrix", "host_count", i), v) for i, v in enumerate(axes.get("host_count", ()))
    ]
    counts += [
        (("matrix", "include", i, "host_count"), e["host_count"])
        for i, e in enumerate(entries)
        if "host_count" in e
    ]
    for loc, value in counts:
        if not checker.model.hosts:
            issues.add(loc, "the `host_count` axis needs `hosts:`", "list the hosts under `hosts:`")
            break
        if isinstance(value, int) and value > len(hosts):
            issues.add(
                loc,
                f"host_count {value} is more than the {len(hosts)} hosts under `hosts:`",
                f"use 1 to {len(hosts)}, or list more hosts",
            )
    if counts and (axes.get("host") or any("host" in e for e in entries)):
        issues.add(
            ("matrix", "host_count"),
            "`host_count` and `host` both choose the hosts of a point",
            "keep one: `host` runs each point on one named host, `host_count` on the first N hosts at once",
        )
    wanted: list[tuple[tuple[str | int, ...], Value]] = [
        (("matrix", "host", i), v) for i, v in enumerate(axes.get("host", ()))
    ]
    wanted += [(("matrix", "include", i, "host"), e["host"]) for i, e in enumerate(entries) if "host" in e]
    for loc, value in wanted:
        if not checker.model.hosts:
            issues.add(
                loc, "the `host` axis needs `hosts:`", "list the hosts under `hosts:` with a name each"
            )
            break
        if value not in names:
            issues.add(
                loc,
                f"{value!r} is not the name of a host",
                f"host names: {', '.join(sorted(names)) or 'none'} (give each host a `name:`)",
            )
    return tuple(hosts)


def _timeout(checker: _Checker) -> float | None:
    raw = checker.model.timeout
    if raw is None:
        return None
    try:
        seconds = parse_seconds(raw)
    except ValueError as exc:
        checker.issues.add(("timeout",), str(exc))
        return None
    if seconds <= 0:
        checker.issues.add(("timeout",), "timeout must be positive")
    return seconds


PARSE_CHECK_SECTIONS = 512


def _fio_accepts(catalog: FioCatalog, fio: dict[str, Value], combos: list[Combo], issues: _Issues) -> None:
    """Let fio itself parse every distinct option set once (``--parse-only``), as a last check."""
    sections: dict[tuple[tuple[str, str], ...], int] = {}
    for index, combo in enumerate(combos, start=1):
        options = {k: fio_text(v) for k, v in fio.items()}
        options.update({k: fio_text(v) for k, v in combo.items() if k not in IOBENCH_AXES})
        # One job per section: parsing only, and fio caps the number of jobs it will hold.
        options["numjobs"] = "1"
        sections.setdefault(tuple(options.items()), index)
        if len(sections) >= PARSE_CHECK_SECTIONS:
            break
    text = "".join(
        f"[point{index}]\n" + "".join(f"{k}={v}\n" for k, v in options) + "filename=/nonexistent/iobench\n"
        for options, index in sections.items()
    )
    complaint = catalog.parse_only(text)
    if complaint:
        issues.add(("matrix",) if combos != [{}] else ("fio",), f"{catalog.version} rejects it: {complaint}")


def _check_size(
    issues: _Issues, axes: dict[str, tuple[Value, ...]], include: list[Combo], repeat: int
) -> None:
    """Refuse a matrix too large to run from its axis lengths alone, before anything is expanded."""
    points = matrix_size(axes, len(include))
    runs = points * repeat
    if runs <= MAX_RUNS:
        return
    factors = " × ".join(f"{name} ({len(values)})" for name, values in axes.items()) or "no axes"
    extra = f" + {len(include)} include entries" if include else ""
    issues.add(
        ("matrix",),
        f"the matrix has up to {factors}{extra} = {points:,} points × {repeat} repeats = {runs:,} runs; "
        f"the limit is {MAX_RUNS:,}",
        "split it into several matrices or drop axis values",
    )
    issues.raise_if_any()


def _null_engine(data: dict[str, Any]) -> None:
    """``ioengine: null`` in YAML reads as nothing; fio's null engine is what was meant."""
    fio, axes = data.get("fio"), data.get("matrix")
    if isinstance(fio, dict) and "ioengine" in fio and fio["ioengine"] is None:
        fio["ioengine"] = "null"
    if isinstance(axes, dict):
        engines = axes.get("ioengine")
        if isinstance(engines, list):
            axes["ioengine"] = ["null" if e is None else e for e in engines]
        for entry in [*(axes.get("include") or []), *(axes.get("exclude") or [])]:
            if isinstance(entry, dict) and "ioengine" in entry and entry["ioengine"] is None:
                entry["ioengine"] = "null"


def parse_matrix(
    text: str,
    source: str = "<matrix>",
    *,
    targets: tuple[str, ...] = (),
    allow_write: tuple[str, ...] = (),
    fio: str | None = None,
) -> Matrix:
    """Validate matrix ``text`` completely and expand it; see :func:`load_matrix`."""
    issues = _Issues(source, None)
    try:
        data, node = load_yaml(text)
    except YamlSyntaxError as exc:
        raise MatrixError(source, [f"{Path(source).name}:{exc.where}: not valid YAML: {exc}"]) from None
    issues.node = node
    if not isinstance(data, dict):
        raise MatrixError(
            source,
            [
                f"{Path(source).name}:1:1: a matrix file is a mapping "
                "(version:, name:, targets:, fio:, matrix:)"
            ],
        )
    version = data.get("version")
    if isinstance(version, int) and version not in SUPPORTED_VERSIONS:
        issues.add(
            ("version",),
            f"matrix version {version} is not supported",
            f"this iobench reads version {', '.join(map(str, SUPPORTED_VERSIONS))}",
        )
        issues.raise_if_any()
    _null_engine(data)
    try:
        model = MatrixModel.model_validate(data)
    except ValidationError as exc:
        _pydantic_issues(exc, issues)
        issues.raise_if_any()
        raise AssertionError("unreachable") from None
    catalog = fio_catalog(fio)
    checker = _Checker(model, catalog, issues)
    fio_options = _fio_section(checker)
    axes = _axes(checker, fio_options)
    include = _entries(checker, "include", axes)
    exclude = _entries(checker, "exclude", axes)
    target_list = _targets(checker, targets, allow_write)
    host_list = _hosts(checker, axes, include)
    timeout_s = _timeout(checker)
    telemetry_s = _telemetry(checker)
    slo = _slo(checker, fio_options, axes)
    _check_text(issues, ("name",), model.name, "name")
    _check_size(issues, axes, include, model.repeat)
    issues.raise_if_any()
    combos = expand(axes, include, exclude) if (axes or include) else [{}]
    if axes and not combos:
        issues.add(("matrix", "exclude"), "exclude removes every combination")
    issues.raise_if_any()
    _fio_accepts(catalog, fio_options, combos, issues)
    catalog.save()
    issues.raise_if_any()
    return Matrix(
        source=source,
        text=text,
        name=model.name,
        description=model.description,
        targets=target_list,
        fio=fio_options,
        axes=axes,
        combos=tuple(combos),
        repeat=model.repeat,
        order=model.order,
        seed=model.seed,
        launch=model.launch,
        timeout_s=timeout_s,
        drop_caches=model.drop_caches,
        fio_binary=catalog.binary,
        fio_version=catalog.version,
        telemetry_s=telemetry_s,
        hosts=host_list,
        slo=slo,
    )


def load_matrix(
    path: str | os.PathLike[str],
    *,
    targets: tuple[str, ...] | list[str] = (),
    allow_write: tuple[str, ...] | list[str] = (),
    fio: str | None = None,
) -> Matrix:
    """Read, validate and expand a matrix file.

    Every problem is collected and reported at once, each with its file, line,
    column, field and a hint, before anything runs.

    Parameters
    ----------
    path
        The YAML matrix file (docs/matrix.md).
    targets
        Paths that replace the file's targets (``--target``); they keep the
        first target's ``size`` but never its ``allow_write``.
    allow_write
        Targets given on the command line that may be written (``--allow-write``).
    fio
        The fio binary to validate against (default: ``$IOBENCH_FIO`` or ``fio``).

    Raises
    ------
    MatrixError
        With every problem found, when the file is invalid.
    FioError
        When fio cannot be found or run.
    """
    source = os.fspath(path)
    try:
        text = read_matrix(source)
    except OSError as exc:
        raise MatrixError(source, [f"{source}: cannot read the matrix: {exc.strerror}"]) from None
    except UnicodeDecodeError:
        raise MatrixError(source, [f"{source}: not a text file"]) from None
    allowed = tuple(os.path.abspath(p) for p in allow_write)
    wanted = tuple(os.path.abspath(_expand_vars_safe(p)) for p in targets)
    return parse_matrix(text, source, targets=wanted, allow_write=allowed, fio=fio)


def _expand_vars_safe(path: str) -> str:
    try:
        return expand_path(path)
    except VariableError:
        return path


def point_writes(matrix: Matrix, combo: Combo) -> bool:
    """Whether a point writes: its ``rw`` writes or trims, or it sets a ``trim_*`` option (a trim is a write)."""
    rw = matrix.setting(combo, "rw")
    if any(matrix.setting(combo, name) is not None for name in TRIM_OPTIONS):
        return True
    return str(rw if rw is not None else "read").split(":", 1)[0] in WRITE_MODES

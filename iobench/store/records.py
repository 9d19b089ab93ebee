"""iobench's records, typed: a point's ``meta.json``, a run's ``manifest.json``, a disk's settings journal.

Each record carries its schema version. Reading goes through :func:`read_record`,
which migrates an older version step by step, refuses a newer one (naming the
version and what reads it) and turns a corrupt or truncated file into an error
naming the file and the field. Writing goes through :func:`write_record`
(atomic: a crash leaves the old file or the whole new one).

Schema history
--------------
Point ``meta.json`` (``schema_version``):

1. untyped; ``params`` and its copy ``values``.
2. typed (this module); ``values`` dropped (it always equalled ``params``).
3. ``facts``: what the validity checks read of the machine just before and after fio
   (:mod:`iobench.system.pointfacts`); absent in older points.

Run ``manifest.json`` (``schema_version``):

1. untyped.
2. typed (this module); same fields.

Settings journal (``version``):

1. a disk's queue settings.
2. ``journal``: ``disk`` (absent, as in 1) or ``system``: machine files ``iobench system tune``
   changed, keyed by their path from ``/``; ``dev`` then holds the boot id.

The frame (``results.parquet``) is not a record but a cache of the points:
its columns and version are :mod:`iobench.results.schema`'s, and
:mod:`iobench.results.framecache` rebuilds it whenever it differs from what
it was built from.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)
from pydantic_core import ErrorDetails

from iobench.errors import ResultsError
from iobench.store.atomic import atomic_write
from iobench.store.untrusted import RECORD, parse_json, read_text

Status = Literal["ok", "failed", "timeout", "skipped", "interrupted"]
RunStatus = Literal["running", "finished", "interrupted", "stopped"]


class RecordError(ResultsError):
    """A record file is missing, corrupt, truncated, or of a version this iobench does not read."""


class Record(BaseModel):
    """A versioned JSON record; unknown fields are refused (a typo or a newer writer, not silence)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    kind: ClassVar[str]
    version_field: ClassVar[str] = "schema_version"
    current: ClassVar[int]
    migrations: ClassVar[dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {}


class ObservedProcess(BaseModel):
    """One process of fio's group as ``/proc`` showed it while it ran."""

    model_config = ConfigDict(extra="forbid")

    pid: int
    comm: str
    leader: bool
    cpus: str
    mems: str | None = None
    policy: str | None = None


class ProcessRecord(BaseModel):
    """One fio process of a point: what was planned, and how it ended."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    argv: list[str]
    jobfile_name: str
    output: str
    targets: list[str]
    sections: list[str]
    cpu_node: int | None = None
    mem_node: int | None = None
    target_node: int | None = None
    cpus: str = ""
    job_cpus: list[str] | None = None
    target_disks: dict[str, list[str]] = Field(default_factory=dict)
    returncode: int | None = None
    timed_out: bool | None = None
    duration_s: float | None = None
    cpus_observed: str | None = None
    observed: list[ObservedProcess] = Field(default_factory=list)
    host: str | None = None
    """The host whose fio server ran it (``hosts:``); absent for this machine."""
    client: str | None = None
    """What ``fio --client=`` took for that host (``127.0.0.1,<port>``, the SSH forward)."""
    client_port: int | None = None
    """The client port: the key of the host's rows in fio's ``client_stats``."""

    @model_serializer(mode="wrap")
    def _without_absent_host(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in ("host", "client", "client_port"):
            if data.get(name) is None:
                data.pop(name, None)  # a local process's record is as it always was
        return data


def _meta_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    data = dict(data)
    values = data.pop("values", None)
    data.setdefault("params", values or {})
    return data


class PointMeta(Record):
    """``points/<key>/meta.json``: one point × repeat, written once when it ends."""

    kind: ClassVar[str] = "point record (meta.json)"
    current: ClassVar[int] = 3
    migrations: ClassVar[dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {1: _meta_1_to_2, 2: dict}

    schema_version: int = 3
    key: str
    point: int
    repeat: int
    params: dict[str, Any]
    writes: bool = False
    status: Status = "interrupted"
    reason: str | None = None
    started: str | None = None
    finished: str | None = None
    duration_s: float | None = None
    runtime_requested_ms: int | None = None
    settings: dict[str, dict[str, Any]] = Field(default_factory=dict)
    processes: list[ProcessRecord] = Field(default_factory=list)
    facts: dict[str, Any] | None = None
    """``{"before": ..., "after": ...}``: :func:`iobench.system.pointfacts.collect` around fio; None
    when the point did not run here (skipped, a snapshot's plan) or predates it."""


class MachineFacts(BaseModel):
    """The machine a run happened on (:func:`iobench.system.metadata.collect_metadata`).

    Facts a newer collector adds are kept (``extra="allow"``): they describe, they do not steer.
    """

    model_config = ConfigDict(extra="allow")

    host: str | None = None
    kernel: str | None = None
    os: str | None = None
    machine: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    python: str | None = None
    iobench_version: str | None = None
    fio_version: str | None = None
    fio_binary: str | None = None
    numactl_version: str | None = None
    topology: dict[str, Any] = Field(default_factory=dict)
    targets: list[dict[str, Any]] = Field(default_factory=list)
    system: list[dict[str, Any]] = Field(default_factory=list)
    """``iobench system show`` when the run started: each setting's ``name``, ``label``, ``value``,
    ``verdict``, ``note``, ``tunable`` (:mod:`iobench.system.stability`); empty in older runs."""

    def facts(self) -> dict[str, Any]:
        """Every fact as a plain dict (collected fields and any a newer collector added)."""
        return self.model_dump(mode="json")


def _manifest_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    return dict(data)


class Manifest(Record):
    """``manifest.json``: the run as a whole, rewritten as it goes (started, resumed, finished)."""

    kind: ClassVar[str] = "run manifest (manifest.json)"
    current: ClassVar[int] = 2
    migrations: ClassVar[dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {1: _manifest_1_to_2}

    schema_version: int = 2
    name: str = ""
    description: str | None = None
    matrix_source: str | None = None
    matrix_fingerprint: str | None = None
    order: str | None = None
    seed: int | None = None
    repeat: int = 1
    points: int = 0
    drop_caches: bool = False
    status: RunStatus = "running"
    started: str | None = None
    resumed: list[str] = Field(default_factory=list)
    finished: str | None = None
    stopped_by: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    settings_restored: dict[str, dict[str, Any]] = Field(default_factory=dict)
    machine: MachineFacts = Field(default_factory=MachineFacts)
    hosts: list[dict[str, Any]] = Field(default_factory=list)
    """Each host's machine facts (``hosts:``); ``machine`` is then the client. Absent when empty."""

    @model_serializer(mode="wrap")
    def _without_empty_hosts(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not data.get("hosts"):
            data.pop("hosts", None)
        return data


class JournalRecord(Record):
    """``<state>/journal/<disk>.json``: a disk's settings (or the machine's) before iobench changed them."""

    kind: ClassVar[str] = "settings journal"
    version_field: ClassVar[str] = "version"
    current: ClassVar[int] = 2
    migrations: ClassVar[dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {1: dict}

    version: int = 2
    journal: Literal["disk", "system"] = "disk"
    """What was changed: a disk's queue settings, or machine files (``iobench system tune``)."""
    disk: str
    dev: str
    originals: dict[str, str | int]
    pid: int
    pid_start_ticks: int | None = None
    started: str = ""
    run_dir: str | None = None
    sysfs: str = "/sys"
    host: dict[str, Any] | None = None
    """The host whose disk it is (destination, options, label); absent for this machine's disks."""

    @model_serializer(mode="wrap")
    def _without_absent_host(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("host") is None:
            data.pop("host", None)
        if data.get("journal") == "disk":
            data.pop("journal", None)  # a disk's journal reads as it always did
        return data


R = TypeVar("R", bound=Record)


def _where(error: ErrorDetails) -> str:
    return ".".join(str(part) for part in error["loc"]) or "(the whole record)"


def parse_record(model: type[R], data: object, path: str | os.PathLike[str]) -> R:
    """Validate ``data`` (a decoded JSON value) as ``model``, migrating older versions.

    Raises
    ------
    RecordError
        Naming ``path`` and each bad field, or the version and what reads it.
    """
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a {model.kind}: expected a JSON object, found {type(data).__name__}")
    version = data.get(model.version_field, 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordError(f"{path}: {model.version_field}: not a schema version: {version!r}")
    if version > model.current:
        raise RecordError(
            f"{path}: {model.kind} schema version {version} was written by a newer iobench; "
            f"this one reads versions 1 to {model.current}: upgrade iobench to read it"
        )
    while version < model.current:
        data = model.migrations.get(version, dict)(data)
        version += 1
        data[model.version_field] = version
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_where(e)}: {e['msg']}" for e in exc.errors(include_url=False))
        raise RecordError(f"{path}: corrupt {model.kind}: {problems}") from None


def read_record(
    model: type[R], path: str | os.PathLike[str], within: str | os.PathLike[str] | None = None
) -> R:
    """Read and validate one record file (:func:`parse_record`), through :mod:`iobench.store.untrusted`.

    ``within``: the run directory the record belongs to (no link followed below it).

    Raises
    ------
    RecordError
        When the file cannot be read (not a regular file, too large, too
        deep, an integer too long), is not JSON (truncated), or does not validate.
    """
    try:
        text = read_text(path, RECORD, within)
        data = parse_json(path, text)
    except OSError as exc:
        raise RecordError(f"{path}: cannot read the {model.kind}: {exc.strerror}") from None
    except ValueError as exc:
        state = "empty" if not text.strip() else "truncated or not JSON"
        raise RecordError(f"{path}: {state} {model.kind} ({exc})") from None
    return parse_record(model, data, path)


def record_json(record: Record) -> str:
    """The file text of ``record`` (stamped with the current schema version)."""
    data = record.model_dump(mode="json")
    data[record.version_field] = record.current
    return json.dumps(data, indent=2) + "\n"


def write_record(path: str | os.PathLike[str], record: Record, *, mode: int = 0o666) -> None:
    """Write ``record`` atomically (``OSError`` when the file system refuses; the caller words it)."""
    atomic_write(path, record_json(record), mode=mode)

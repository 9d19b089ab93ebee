"""The parts of fio's JSON document that are read, as typed records.

:class:`FioDoc` and the records under it declare every key
:mod:`iobench.results.fioout.jsonout` reads and nothing else. A document gets
there one of two ways, both ending in the same records:

- :func:`decode_document`: fio's ``--output`` file as bytes, decoded by msgspec
  straight into the records; keys not declared (40 % of the bytes:
  ``iodepth_level``, ``latency_*``, the ``bw_*``/``iops_*`` sample statistics)
  are skipped without making Python objects;
- :func:`to_document`: any decoded JSON object (the text path's, first key
  winning), converted field by field with the leaf rules below.

Leaf rules, by declared type (one place, applied by both ways):

- ``float``: a JSON number as a float; anything else (``true``, a string) is
  ``None``;
- ``int``: a JSON integer as it is up to 2**53, beyond that through float (as
  every count is rounded the same way everywhere); a number with a fraction is
  truncated; anything else is ``None``;
- ``str``: ``str()`` of the value; ``str | None`` keeps ``null`` as ``None``;
- ``Any``: the value as decoded;
- a record: a JSON object, else ``None``; a list of records: the objects of a
  JSON array, else empty.

msgspec applies these rules in C to every value that is already of the
declared type; a document holding any other value (a string where a number
belongs, an integer beyond 2**53, a float where an integer belongs) is refused
by :func:`decode_document` and read through :func:`to_document`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType, field
from msgspec import inspect as mi

_EXACT = 2**53  # ints up to this size survive the trip through float unchanged

Count = Annotated[int, Meta(ge=-_EXACT, le=_EXACT)]
"""An integer the fast decoder accepts; larger ones take the general path (:func:`to_int`)."""


def to_float(value: Any) -> float | None:
    """The ``float`` leaf rule: a JSON number as a float, anything else ``None``."""
    # Exact types first: json only makes int and float.
    kind = type(value)
    if kind is float:
        return value  # type: ignore[no-any-return]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer past any float: no number fio writes
        return None


def to_int(value: Any) -> int | None:
    """The ``int`` leaf rule: beyond 2**53 through float, as :func:`to_float`; a fraction truncated."""
    if type(value) is int and -_EXACT <= value <= _EXACT:
        return value
    number = to_float(value)
    return None if number is None or not math.isfinite(number) else int(number)


# gc=False: records made from JSON never form reference cycles; untracked, they cost less to make.
class Latency(Struct, gc=False):
    """A latency object (``clat_ns``, fio 2.x ``clat``, ...) in fio's own units."""

    min: float | None = None
    max: float | None = None
    mean: float | None = None
    #: Samples; fio 2.x omits it (``UNSET``).
    N: Count | None | UnsetType = UNSET
    percentile: dict[str, float | None] | None = None
    #: json+ histogram, as decoded (:func:`iobench.results.fioout.bins.encode` checks it).
    bins: Any = None


class Direction(Struct, gc=False):
    """One ``read``/``write``/``trim``/``mixed`` object of a job."""

    io_bytes: Count | None = None
    #: Only its presence matters (3.x: ``io_bytes`` is bytes); ``UNSET`` when absent.
    io_kbytes: Any = UNSET
    total_ios: Count | None = None
    bw_bytes: float | None = None
    bw: float | None = None
    iops: float | None = None
    runtime: Count | None = None
    clat_ns: Latency | None = None
    lat_ns: Latency | None = None
    slat_ns: Latency | None = None
    clat: Latency | None = None
    lat: Latency | None = None
    slat: Latency | None = None


class JobOptions(Struct, gc=False):
    """A job's ``job options`` (or the ``global options``): the name as given (fio truncates
    ``jobname``) and the options a parsed frame lifts (:mod:`iobench.results.fioout.joboptions`)."""

    name: Any = None
    rw: Any = None
    readwrite: Any = None
    bs: Any = None
    blocksize: Any = None
    iodepth: Any = None
    numjobs: Any = None
    ioengine: Any = None
    direct: Any = None
    rwmixread: Any = None


class Job(Struct, gc=False):
    """One entry of ``jobs`` (or ``client_stats``)."""

    jobname: str = ""
    groupid: Count | None = None
    error: Count | None = None
    job_options: JobOptions | None = field(name="job options", default=None)
    read: Direction | None = None
    write: Direction | None = None
    trim: Direction | None = None
    mixed: Direction | None = None
    job_runtime: Count | None = None
    usr_cpu: float | None = None
    sys_cpu: float | None = None
    ctx: Count | None = None
    #: Client/server entries only: ``UNSET`` when absent.
    hostname: Any = UNSET
    port: Any = None


class FioDoc(Struct, gc=False):
    """A fio JSON document: local (``jobs``) or client/server (``client_stats``)."""

    fio_version: str | None = field(name="fio version", default=None)
    jobs: list[Job] = []
    #: ``None`` unless the document is client/server output.
    client_stats: list[Job] | None = None
    global_options: JobOptions | None = field(name="global options", default=None)


class _WholeDoc(Struct, gc=False):
    """What :func:`decode_document` decodes: ``client_stats`` only noticed, ``jobs`` required."""

    fio_version: str | None = field(name="fio version", default=None)
    jobs: list[Job] | None | UnsetType = UNSET
    client_stats: msgspec.Raw | UnsetType = UNSET
    global_options: JobOptions | None = field(name="global options", default=None)


_DECODER = msgspec.json.Decoder(_WholeDoc)


def decode_document(data: bytes) -> FioDoc | None:
    """fio's results if ``data`` is one JSON document that decodes into the records, else ``None``.

    ``None`` (not JSON, text around it, a value outside the leaf types,
    client/server output, no ``jobs``) means: read the document another way and
    convert it with :func:`to_document`. Client/server output is left to the
    text path because fio repeats option keys there and the first occurrence
    is the one fio meant.
    """
    try:
        whole = _DECODER.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError):  # ValidationError is a DecodeError
        return None
    if whole.jobs is UNSET or whole.client_stats is not UNSET:
        return None
    return FioDoc(whole.fio_version, whole.jobs or [], None, whole.global_options)


Converter = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _to_str(value: Any) -> str:
    return str(value)


def _to_optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _leaf(kind: mi.Type) -> Converter:
    """The converter for a declared type (see the module's leaf rules)."""
    optional = False
    if isinstance(kind, mi.UnionType):
        optional = any(isinstance(t, mi.NoneType) for t in kind.types)
        others = [t for t in kind.types if not isinstance(t, mi.NoneType)]  # UNSET is not listed
        if len(others) != 1:
            raise TypeError(f"no leaf rule for {kind}")
        kind = others[0]
    if isinstance(kind, mi.Metadata):
        kind = kind.type
    if isinstance(kind, mi.FloatType):
        return to_float
    if isinstance(kind, mi.IntType):
        return to_int
    if isinstance(kind, mi.StrType):
        return _to_optional_str if optional else _to_str
    if isinstance(kind, mi.AnyType):
        return _identity
    if isinstance(kind, mi.StructType):
        cls = kind.cls
        return lambda value: _record(cls, value) if isinstance(value, dict) else None
    if isinstance(kind, mi.ListType) and isinstance(kind.item_type, mi.StructType):
        cls = kind.item_type.cls

        def records(value: Any) -> list[Any] | None:
            if isinstance(value, list):
                return [_record(cls, v) for v in value if isinstance(v, dict)]
            return None if optional else []

        return records
    if isinstance(kind, mi.DictType) and isinstance(kind.key_type, mi.StrType):
        value_rule = _leaf(kind.value_type)
        return lambda value: {k: value_rule(v) for k, v in value.items()} if isinstance(value, dict) else None
    raise TypeError(f"no leaf rule for {kind}")


@functools.cache
def _plan(cls: type[Struct]) -> tuple[tuple[str, str, Converter], ...]:
    """For a record type: each field's JSON key, attribute name and converter."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return tuple((f.encode_name, f.name, _leaf(f.type)) for f in info.fields)


def _record(cls: type[Struct], obj: Mapping[str, Any]) -> Any:
    return cls(**{name: convert(obj[key]) for key, name, convert in _plan(cls) if key in obj})


def to_document(obj: Mapping[str, Any]) -> FioDoc:
    """Convert a decoded fio JSON object into the records, applying the leaf rules.

    Parameters
    ----------
    obj : mapping
        The document as a JSON decoder returned it.

    Returns
    -------
    FioDoc
        The same records :func:`decode_document` makes of the same document.
    """
    doc: FioDoc = _record(FioDoc, obj)
    return doc

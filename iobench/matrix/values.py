"""Canonical values: every axis and option value is typed once, when the matrix is loaded.

Later modules receive these values and never parse them again. The types:

- **sizes and integers** (``bs``, ``size``, ``rate``, ``iodepth``, ``numjobs``, any
  fio integer option): ``int`` — bytes or a count, read with fio's one size
  grammar (:func:`iobench.matrix.units.parse_size`, ``kb_base=1024``; ``0x`` hex too);
  ``4k``, ``4096`` and ``4KiB`` are the same value.
- **lists, ranges and percentages** of integers (``bs: 4k,8k``, ``bsrange: 4k-16k``,
  ``size: 50%``): ``str``, each number written out in bytes (``4096,8192``).
- **booleans**: ``int`` 0 or 1 (``true``, ``on``, ``yes`` are 1).
- **durations** (fio's time options): :class:`Duration`, a ``float`` of seconds
  that is written back to fio with an explicit unit.
- **choices** (``rw``, ``ioengine``, …): ``str``, lower-cased to fio's spelling.
- iobench's own axes: ``binding`` (``none``/``local``/``remote``/``node:N``),
  ``placement``, ``launch`` and ``scheduler`` as lower-case ``str``;
  ``readahead_kb`` as ``int``; ``host`` (a name under ``hosts:``) as ``str``.
- any other fio option (strings): ``str`` as written.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from iobench.matrix.units import parse_seconds, parse_size

if TYPE_CHECKING:
    from iobench.matrix.fiocatalog import FioOption

Scalar = str | int | float | bool
Value = str | int | float

IOBENCH_AXES = ("binding", "placement", "scheduler", "readahead_kb", "launch", "host", "host_count")
PLACEMENTS = ("node", "same-core", "diff-cores")
LAUNCHES = ("single", "per-target")
BINDINGS = "none, local, remote or node:N (N a NUMA node number, e.g. node:1)"

# fio reads a bare number as seconds for these time options and as microseconds for the others.
SECONDS_BY_DEFAULT = frozenset(
    {"runtime", "timeout", "ramp_time", "startdelay", "steadystate_duration", "steadystate_ramp_time"}
)
# Ranges iobench itself needs beyond what fio allows (fio takes numjobs=0, and caps jobs at 4096;
# log_avg_msec=0 would log every I/O instead of the windows iobench's time series are made of).
RANGES = {"numjobs": (1, 4096), "iodepth": (1, 65536), "log_avg_msec": (1, 86_400_000)}
# fio describes these as strings, but they are sizes (or percentages) in the one size grammar.
SIZE_OPTIONS = frozenset({"size", "filesize", "io_size", "offset", "offset_increment"})

_NODE_BINDING = re.compile(r"node:(\d+)")
_SCHEDULER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_INT_PART = re.compile(r"^\s*-?(0x[0-9a-f]+|\d+(?:\.\d+)?\s*[kmgtpe]?i?b?)\s*$", re.IGNORECASE)
_SEPARATORS = re.compile(r"([,:/-])")


class Duration(float):
    """Seconds of a fio time option; written back to fio with its unit (``30s``, ``500000us``)."""

    __slots__ = ()

    def fio(self) -> str:
        """The duration as fio reads it, whatever the option's default unit."""
        if float(self).is_integer():
            return f"{int(self)}s"
        return f"{round(float(self) * 1e6)}us"


def fio_text(value: Scalar) -> str:
    """A canonical (or YAML) value as it is written into a job file."""
    if isinstance(value, Duration):
        return value.fio()
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def parse_binding(value: Scalar) -> str:
    """The canonical binding: ``Local`` → ``local``, ``node:01`` → ``node:1``.

    Raises
    ------
    ValueError
        Naming the accepted forms.
    """
    text = fio_text(value).strip().lower()
    if text in ("none", "local", "remote"):
        return text
    match = _NODE_BINDING.fullmatch(text)
    if match:
        return f"node:{int(match.group(1))}"
    raise ValueError(f"binding {value!r} is not one of {BINDINGS}")


def binding_node(binding: str) -> int | None:
    """The node of a canonical ``node:N`` binding; None for the others."""
    return int(binding.removeprefix("node:")) if binding.startswith("node:") else None


def _one_of(name: str, value: Scalar, allowed: tuple[str, ...]) -> str:
    text = fio_text(value).strip().lower()
    if text not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return text


def _whole(name: str, value: Scalar, low: int, high: int | None) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{name} takes a whole number, not {value!r}")
    try:
        number = int(value) if isinstance(value, int | float) else _number(value)
    except ValueError:
        raise ValueError(f"{name} takes a whole number, not {value!r}") from None
    return _in_range(name, value, number, low, high)


class _OutOfRange(ValueError):
    """A number of the right form outside the allowed range."""


def _in_range(name: str, raw: Scalar, number: int, low: int | None, high: int | None) -> int:
    allowed = f" (allowed: {low}..{high})" if low is not None and high is not None else ""
    if low is not None and number < low:
        raise _OutOfRange(f"{name} must be at least {low}; got {raw!r}{allowed}")
    if high is not None and number > high:
        raise _OutOfRange(f"{name} must be at most {high}; got {raw!r}{allowed}")
    return number


def axis_value(name: str, value: Scalar) -> Value:
    """The canonical value of one of iobench's own axes (:data:`IOBENCH_AXES`).

    Raises
    ------
    ValueError
        Saying what is allowed.
    """
    if name == "binding":
        return parse_binding(value)
    if name == "placement":
        return _one_of("placement", value, PLACEMENTS)
    if name == "launch":
        return _one_of("launch", value, LAUNCHES)
    if name == "scheduler":
        text = fio_text(value).strip().lower()
        if isinstance(value, bool | int | float) or not _SCHEDULER_NAME.match(text):
            raise ValueError(f"scheduler must be a scheduler name such as none or mq-deadline, not {value!r}")
        return text
    if name == "host":
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"host takes the name of a host under `hosts:`, not {value!r}")
        return value.strip()
    if name == "host_count":
        text = fio_text(value).strip()
        if isinstance(value, bool | float) or not text.isdigit() or int(text) < 1:
            raise ValueError(f"host_count takes a number of hosts (1 or more), not {value!r}")
        return int(text)
    if name == "readahead_kb":
        text = fio_text(value).strip()
        if isinstance(value, bool | float) or not text.isdigit():
            raise ValueError(f"readahead_kb must be a whole number of KiB (0 or more), not {value!r}")
        return int(text)
    raise ValueError(f"{name} is not an iobench axis")


def _number(text: str) -> int:
    text = text.strip()
    sign = -1 if text.startswith("-") else 1
    text = text.removeprefix("-").strip()
    return sign * (int(text, 16) if text.lower().startswith("0x") else parse_size(text))


def _integer(option: FioOption, value: Scalar) -> Value:
    """fio's integer options: one number, or a list/range/percentage of numbers."""
    low, high = RANGES.get(option.name, (option.minimum, option.maximum))
    if high is not None and high <= 0:
        high = None
    if isinstance(value, bool):
        raise ValueError(f"{option.name} takes a number, not {value!r}")
    if isinstance(value, int | float):
        return _whole(option.name, value, low if low is not None else 0, high)
    text = value.strip()
    if _INT_PART.match(text):
        try:
            return _in_range(option.name, value, _number(text), low, high)
        except _OutOfRange:
            raise
        except ValueError:
            raise ValueError(f"{option.name} {value!r} is not a whole number of bytes") from None
    if option.name in RANGES:
        raise ValueError(f"{option.name} takes one whole number, not {value!r}")
    return _composite(option.name, text)


def _composite(name: str, text: str) -> str:
    """``4k,8k`` → ``4096,8192``; ``4k-16k`` → ``4096-16384``; ``50%`` stays."""
    out: list[str] = []
    parts = _SEPARATORS.split(text)
    for index, part in enumerate(parts):
        if index % 2:  # a separator, between two numbers
            out.append(part)
            continue
        stripped = part.strip()
        if stripped.endswith("%") and stripped[:-1].replace(".", "", 1).isdigit():
            out.append(stripped)
        elif _INT_PART.match(stripped):
            try:
                out.append(str(_number(stripped)))
            except ValueError:
                raise ValueError(f"{name}: {part!r} in {text!r} is not a whole number of bytes") from None
        else:
            raise ValueError(
                f"{name} takes a number (4096, 4k, 1M, 0x1000), a list (4k,8k) or a range (4k-16k), "
                f"not {text!r}"
            )
    return "".join(out)


def _boolean(option: FioOption, value: Scalar) -> int:
    if isinstance(value, bool):
        return int(value)
    text = fio_text(value).strip().lower()
    if text in _TRUE:
        return 1
    if text in _FALSE:
        return 0
    raise ValueError(f"{option.name} takes 0 or 1 (or true/false), not {value!r}")


def _duration(option: FioOption, value: Scalar) -> Value:
    if isinstance(value, bool):
        raise ValueError(f"{option.name} takes a duration, not {value!r}")
    text = fio_text(value).strip()
    if "-" in text or "," in text or ":" in text:
        return text
    default_unit = "s" if option.name in SECONDS_BY_DEFAULT else "us"
    if re.fullmatch(r"\d+(\.\d+)?", text):
        text += default_unit
    try:
        seconds = parse_seconds(text)
    except ValueError as exc:
        raise ValueError(f"{option.name}: {exc}") from None
    return Duration(round(seconds * 1e6) / 1e6)


def _choice(option: FioOption, value: Scalar) -> str:
    text = fio_text(value).strip()
    head, sep, tail = text.partition(":")
    if option.choices and head.lower() not in option.choices:
        raise ValueError(f"{option.name} must be one of {', '.join(option.choices)}; got {value!r}")
    return head.lower() + sep + tail


def option_value(option: FioOption, value: Scalar) -> Value:
    """The canonical value of fio option ``option`` (see the module docstring).

    Raises
    ------
    ValueError
        Saying what is wrong and what is allowed.
    """
    if option.kind == "int" or option.name in SIZE_OPTIONS:
        return _integer(option, value)
    if option.kind == "bool":
        return _boolean(option, value)
    if option.kind == "time":
        return _duration(option, value)
    if option.kind == "choice":
        return _choice(option, value)
    if isinstance(value, bool):
        return int(value)
    return value

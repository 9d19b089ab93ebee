"""The kernel's two CPU-set notations: lists (``0-3,8``) and hex masks (``ff,0000ff00``).

sysfs writes both: ``cpulist``, ``online`` and ``thread_siblings_list`` use lists;
``cpumap`` and ``thread_siblings`` (all that old kernels have) use masks made of
comma-separated 32-bit hex words, most significant word first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from iobench.errors import TopologyError

__all__ = ["format_cpulist", "parse_cpulist", "parse_cpumask"]

_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_HEX_WORD = re.compile(r"[0-9a-fA-F]{1,8}")


def _clean(text: str) -> str:
    return text.replace("\x00", "").strip()


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a kernel CPU list such as ``"0-3,8,10-11"``.

    Parameters
    ----------
    text : str
        The list as sysfs writes it. NUL bytes, surrounding whitespace and a
        trailing newline are ignored; an empty string is the empty set.

    Returns
    -------
    tuple of int
        The CPUs, sorted and without duplicates.

    Raises
    ------
    TopologyError
        When the text is not a CPU list (``"0-"``, ``"3-1"``, ``"a"``).

    Examples
    --------
    >>> parse_cpulist("0-3,8\\n")
    (0, 1, 2, 3, 8)
    """
    cleaned = _clean(text)
    if not cleaned:
        return ()
    cpus: set[int] = set()
    for item in cleaned.split(","):
        match = _RANGE.fullmatch(item.strip())
        if match is None:
            raise TopologyError(f"invalid CPU list {text!r}: {item!r} is not N or N-M")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise TopologyError(f"invalid CPU list {text!r}: range {item!r} runs backwards")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """Write CPUs in the kernel's list notation, collapsing runs into ranges.

    Parameters
    ----------
    cpus : iterable of int
        CPU numbers, in any order, duplicates allowed.

    Returns
    -------
    str
        For example ``"0-3,8"``; ``""`` for no CPUs.

    Raises
    ------
    ValueError
        When a CPU number is negative.

    Examples
    --------
    >>> format_cpulist([8, 0, 1, 2, 3])
    '0-3,8'
    """
    ordered = sorted(set(cpus))
    if ordered and ordered[0] < 0:
        raise ValueError(f"CPU numbers cannot be negative: {ordered[0]}")
    parts: list[str] = []
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        first, last = ordered[start], ordered[end]
        parts.append(str(first) if first == last else f"{first}-{last}")
        start = end + 1
    return ",".join(parts)


def parse_cpumask(text: str) -> tuple[int, ...]:
    """Parse a kernel hex CPU mask such as ``"00000000,0000ff00"``.

    Parameters
    ----------
    text : str
        Comma-separated hex words of 32 bits, most significant first, as in
        ``cpumap`` and ``thread_siblings``. An optional ``0x`` prefix, NUL
        bytes and surrounding whitespace are ignored (hwloc writes ``0x`` on
        every word); an empty string is the empty set.

    Returns
    -------
    tuple of int
        The CPUs whose bits are set, sorted.

    Raises
    ------
    TopologyError
        When a word is not 1 to 8 hex digits.

    Examples
    --------
    >>> parse_cpumask("00000001,00000101")
    (0, 8, 32)
    """
    cleaned = _clean(text)
    if not cleaned:
        return ()
    cpus: list[int] = []
    for position, raw in enumerate(reversed(cleaned.split(","))):
        word = raw.strip()
        if word[:2].lower() == "0x":
            word = word[2:]
        if _HEX_WORD.fullmatch(word) is None:
            raise TopologyError(f"invalid CPU mask {text!r}: {word!r} is not a 32-bit hex word")
        bits = int(word, 16)
        cpus.extend(position * 32 + bit for bit in range(32) if bits >> bit & 1)
    return tuple(cpus)

"""Find the results in fio output: a JSON object, terse lines or normal text.

fio writes warnings, ``fio: terminating on signal 2``, job descriptions and ETA
lines around its results, and ``--output-format=json,normal`` writes both forms.
This module only locates things; the readers interpret them.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_JSON_START = re.compile(r"^[ \t]*\{", re.MULTILINE)
_RESULT_KEYS = ("jobs", "client_stats")
# A terse line starts with its version (2..5), then (v3+) fio's version.
_TERSE_LINE = re.compile(r"^(?:<[^>\n]*>\s*)?[2-5];(?:fio-[^;]*;)?[^;\n]*;\d+;\d+;", re.MULTILINE)
_NORMAL_HEADER = re.compile(r"\(groupid=\d+, jobs=\d+\)")


def _keep_first(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Old fio repeats keys (three "0.00" percentiles in 3.1; options in client
    # mode); the first occurrence is the one fio meant.
    out: dict[str, Any] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def _orjson_document(data: str | bytes) -> dict[str, Any] | None:
    # The C decoder without a hook is ~1.5x faster than the stdlib's; fio's
    # duplicate keys only differ in value in client mode's option lists, so that
    # output is left to find_json's first-occurrence-wins decoding.
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if isinstance(obj, dict) and "jobs" in obj and "client_stats" not in obj:
        return obj
    return None


def whole_json(data: bytes) -> dict[str, Any] | None:
    """Return the fio results if ``data`` is one JSON document and nothing else, else ``None``.

    The fast path for fio's ``--output`` files, read as bytes: no decoding to
    text, no search. ``None`` means "use :func:`find_json` on the text", which
    covers everything else (text around the JSON, client/server output).
    """
    if not data.lstrip().startswith(b"{"):
        return None
    return _orjson_document(data)


def find_json(text: str) -> dict[str, Any] | None:
    """Return the first JSON object in ``text`` that holds fio results.

    Parameters
    ----------
    text : str
        fio output, possibly with other text before or after the JSON.

    Returns
    -------
    dict or None
        The decoded object (with ``jobs`` or ``client_stats``), or ``None``.
    """
    if text.lstrip().startswith("{"):
        # Fast path: the whole text is one JSON document (fio's --output file).
        obj = _orjson_document(text)
        if obj is not None:
            return obj
    decoder = json.JSONDecoder(object_pairs_hook=_keep_first)
    for match in _JSON_START.finditer(text):
        start = match.end() - 1
        try:
            obj, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and any(key in obj for key in _RESULT_KEYS):
            return obj
    return None


def terse_lines(text: str) -> list[str]:
    """Return the terse (``--minimal``) result lines in ``text``, in order."""
    return [line.strip() for line in text.splitlines() if _TERSE_LINE.match(line.strip())]


def has_normal(text: str) -> bool:
    """Whether ``text`` holds human-readable ("normal") job results."""
    return _NORMAL_HEADER.search(text) is not None

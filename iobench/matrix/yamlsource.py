"""YAML read once for its data and once for where each value sits in the file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from iobench.store.untrusted import MATRIX, read_bytes


class YamlSyntaxError(ValueError):
    """The text is not YAML; ``where`` is ``line:column``."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        super().__init__(message)


MAX_BYTES = MATRIX.max_bytes
MAX_VALUES = 100_000


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many nodes ``node`` stands for once every alias is expanded, without expanding any."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    sizes[key] = 1  # a node that (through aliases) contains itself counts once
    if isinstance(node, yaml.SequenceNode):
        total = 1 + sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    else:
        total = 1
    sizes[key] = min(total, MAX_VALUES + 1)
    return sizes[key]


def _duplicate_key(node: yaml.Node, seen: set[int]) -> yaml.Node | None:
    """The first key given twice in one mapping (PyYAML would keep the last silently)."""
    if id(node) in seen:
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in keys:
                    return key
                keys.add(key.value)
            found = _duplicate_key(value, seen)
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for child in node.value:
            found = _duplicate_key(child, seen)
            if found is not None:
                return found
    return None


def read_matrix(source: str) -> str:
    """The text of the matrix file ``source``: a regular file of at most :data:`MAX_BYTES` (links followed).

    A FIFO, a device such as ``/dev/zero`` or a directory is refused at once,
    never waited on or read without end (:func:`iobench.store.untrusted.read_text`).

    Raises
    ------
    OSError
        Its ``strerror`` says why (no such file, a FIFO, too large...).
    UnicodeDecodeError
        When it is not UTF-8 text.
    """
    data = read_bytes(source, MATRIX, None)
    return data.decode("utf-8")


def load_yaml(text: str) -> tuple[Any, yaml.Node | None]:
    """Return the data of ``text`` (``safe_load``) and its node tree for locations.

    A matrix is small: text over 1 MiB, nesting deeper than Python can follow, or
    aliases that would expand to more than 100,000 values are refused before
    anything is built from them.
    """
    if len(text) > MAX_BYTES:
        raise YamlSyntaxError("1:1", f"the file is {len(text):,} bytes; a matrix is at most {MAX_BYTES:,}")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None and _expanded_size(node, {}) > MAX_VALUES:
            raise YamlSyntaxError(
                "1:1", f"its anchors and aliases expand to more than {MAX_VALUES:,} values; write it out"
            )
        twice = None if node is None else _duplicate_key(node, set())
        if twice is not None:
            mark = twice.start_mark
            raise YamlSyntaxError(
                f"{mark.line + 1}:{mark.column + 1}", f"key `{twice.value}` is given twice in one mapping"
            )
        data = yaml.safe_load(text)
    except RecursionError:
        raise YamlSyntaxError("1:1", "it is nested too deeply") from None
    except YamlSyntaxError:
        raise
    except ValueError as exc:  # an integer of more digits than Python converts
        raise YamlSyntaxError("1:1", str(exc)) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{mark.line + 1}:{mark.column + 1}" if mark else "1:1"
        raise YamlSyntaxError(where, str(exc.problem or exc)) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError("1:1", str(exc)) from None
    return data, node


def locate(node: yaml.Node | None, loc: Sequence[str | int]) -> str:
    """Return ``line:column`` of the deepest node along ``loc`` (1-based)."""
    best = node
    key_node: yaml.Node | None = None
    for part in loc:
        if isinstance(best, yaml.MappingNode):
            for key, value in best.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    key_node, best = key, value
                    break
            else:
                break
        elif isinstance(best, yaml.SequenceNode) and isinstance(part, int):
            if 0 <= part < len(best.value):
                key_node, best = None, best.value[part]
            else:
                break
        else:
            break
    target = best if best is not None else key_node
    if target is None:
        return "1:1"
    mark = target.start_mark
    return f"{mark.line + 1}:{mark.column + 1}"


def locate_key(node: yaml.Node | None, loc: Sequence[str | int]) -> str:
    """Like :func:`locate`, but point at the key of the last step (for unknown keys)."""
    parent = node
    for part in loc[:-1]:
        if isinstance(parent, yaml.MappingNode):
            parent = next((v for k, v in parent.value if getattr(k, "value", None) == str(part)), None)
        elif isinstance(parent, yaml.SequenceNode) and isinstance(part, int) and part < len(parent.value):
            parent = parent.value[part]
        else:
            return locate(node, loc[:-1])
    if isinstance(parent, yaml.MappingNode) and loc:
        for key, _ in parent.value:
            if getattr(key, "value", None) == str(loc[-1]):
                mark = key.start_mark
                return f"{mark.line + 1}:{mark.column + 1}"
    return locate(node, loc)

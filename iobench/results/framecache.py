"""``results.parquet``: a cache of the points' frame that knows what it caches.

The frame is saved with what it was built from (:class:`~iobench.results.assemble.BuiltFrom`,
in the file's metadata): the schema's fingerprint (:func:`iobench.results.schema.fingerprint`),
each point directory's stamp (its files' names, sizes and modification times,
:mod:`iobench.store.inventory`) and the notes made while building it
(supporting files that could not be read). :func:`read_cached` gives it back
only when all of that still holds; otherwise it says why not — a point added,
removed or changed since, another schema, a file that cannot be read — and the
caller rebuilds it. A copy that kept the files' times (``cp -a``, ``rsync -a``)
keeps its cache; one that did not is rebuilt once.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from iobench.results import schema
from iobench.results.assemble import BUILT_FROM, BuiltFrom
from iobench.store.inventory import Inventory
from iobench.store.rundir import RunDir
from iobench.store.untrusted import UnreadableRunFile, read_table, table_metadata

SCHEMA_KEY = "iobench_schema"
BUILT_KEY = "iobench_built_from"
#: What a frame that does not say what it was built from records as its schema.
UNKNOWN = "unknown"
#: The key frames written before the cache recorded its points carried (an integer version).
OLD_VERSION_KEY = b"iobench_schema_version"


def save_frame(run: RunDir, frame: pd.DataFrame) -> None:
    """Save ``frame`` as the run's ``results.parquet``, with what it was built from.

    A frame that does not say what it was built from (not made by
    :func:`~iobench.results.assemble.build_frame` or :func:`iobench.load`) is
    saved as such, and the next load rebuilds it.

    Raises
    ------
    RunStorageError
        When it cannot be written; no ``results.parquet`` is left half written.
    """
    built = frame.attrs.get(BUILT_FROM)
    metadata = {SCHEMA_KEY: UNKNOWN}
    if isinstance(built, BuiltFrom):
        metadata = {SCHEMA_KEY: built.schema, BUILT_KEY: str(built)}
    run.write_frame(frame, metadata)


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(sorted(names)[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _differences(saved: dict[str, str], now: dict[str, str]) -> str | None:
    """What changed among the point directories since the frame was built, in words; None when nothing."""
    added = [k for k in now if k not in saved]
    removed = [k for k in saved if k not in now]
    changed = [k for k in now if k in saved and saved[k] != now[k]]
    parts = []
    for names, what in ((added, "added"), (removed, "removed"), (changed, "changed")):
        if names:
            parts.append(f"{len(names)} point{'' if len(names) == 1 else 's'} {what} ({_listed(names)})")
    return "; ".join(parts) or None


def read_cached(run: RunDir, inventory: Inventory) -> tuple[pd.DataFrame | None, str | None]:
    """The saved frame when it still is the frame of ``inventory``'s points; else why not.

    Parameters
    ----------
    run : RunDir
        The run directory.
    inventory : Inventory
        Its point directories as they are now.

    Returns
    -------
    tuple
        ``(frame, None)`` when the cache holds (its ``attrs`` carry what it was
        built from); ``(None, None)`` when there is no ``results.parquet``;
        ``(None, why)`` when it must be rebuilt: why, in words, beginning
        with ``results.parquet``.
    """
    import pyarrow as pa

    path = run.frame_path
    if not path.exists() and not path.is_symlink():
        return None, None
    try:
        metadata = table_metadata(path, run.path)
        written = metadata.get(SCHEMA_KEY.encode(), b"").decode()
        if not written:
            old = metadata.get(OLD_VERSION_KEY, b"?").decode()
            return None, f"results.parquet was written by an older iobench (frame version {old})"
        if written == UNKNOWN:
            return None, "results.parquet does not say which points it was built from"
        if written != schema.fingerprint():
            return None, (
                f"results.parquet was written with another frame schema ({written}; "
                f"this iobench writes {schema.fingerprint()})"
            )
        built = BuiltFrom(metadata.get(BUILT_KEY.encode(), b"").decode())
        try:
            stamps, _ = built.stamps, built.notes
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            raise ValueError("its record of the points it was built from is not iobench's") from None
        changed = _differences(stamps, inventory.stamps())
        if changed is not None:
            return None, f"results.parquet is out of date: {changed} since it was written"
        frame = read_table(path, run.path).to_pandas()
    except UnreadableRunFile as exc:
        return None, f"results.parquet cannot be read ({exc.strerror})"
    except (OSError, ValueError, RecursionError, pa.ArrowException) as exc:
        return None, f"results.parquet cannot be read ({type(exc).__name__}: {exc})"
    frame.attrs[BUILT_FROM] = built
    return frame, None

"""What a program said, remembered per program file: asked again only when the file changes.

fio takes 40 ms to print its version and numactl and dpkg-query as long to
print theirs; a run asks each of them once per installed file, not once per
command. The answer is kept under ``$XDG_CACHE_HOME/iobench`` (else
``~/.cache/iobench``), named after the file's path, inode, modification time
and size: an upgraded or replaced binary is a new name, so a stale answer is
never read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from iobench.store.atomic import atomic_write, others_can_change


def answer_path(binary: str, kind: str, extra: str = "") -> Path | None:
    """Where the answer of ``kind`` (``fio-version``…) about ``binary`` is kept; None when the file is gone.

    ``extra`` goes into the name too (what else the answer depends on).
    """
    try:
        info = os.stat(binary)
    except OSError:
        return None
    key = f"{binary}:{info.st_ino}:{info.st_mtime_ns}:{info.st_size}:{extra}"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "iobench" / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def recall(binary: str, kind: str, extra: str = "") -> Any:
    """The remembered answer, or None (never asked, unreadable, the file changed, or not only this user's)."""
    path = answer_path(binary, kind, extra)
    with contextlib.suppress(OSError, ValueError):
        # An answer decides what is checked (fio's acceptance of a job file): one another user could
        # have planted is not believed.
        if path is not None and path.is_file() and others_can_change(path) is None:
            return json.loads(path.read_text())
    return None


def remember(binary: str, kind: str, answer: Any, extra: str = "") -> None:
    """Keep ``answer`` (JSON) for ``binary``; a cache that cannot be written is no error."""
    path = answer_path(binary, kind, extra)
    with contextlib.suppress(OSError):
        if path is not None:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write(path, json.dumps(answer), mode=0o600)

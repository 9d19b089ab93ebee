"""The run directory of SPEC §6: points saved atomically, the manifest, the tidy frame.

Schema history (``schema_version`` in ``manifest.json``, every ``meta.json`` and
the parquet file's metadata):

1. first version.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from iobench.errors import ResultsError

SCHEMA_VERSION = 1
FINISHED = ("ok", "skipped")


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON through a temporary name, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


def now() -> str:
    """The local time, ISO 8601 with offset."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunDir:
    """A results directory: ``matrix.yaml``, ``manifest.json``, ``points/``, ``results.parquet``."""

    path: Path

    @property
    def points(self) -> Path:
        """Where each point × repeat gets its directory."""
        return self.path / "points"

    @property
    def manifest_path(self) -> Path:
        """``manifest.json``."""
        return self.path / "manifest.json"

    @property
    def frame_path(self) -> Path:
        """``results.parquet``."""
        return self.path / "results.parquet"

    @property
    def figures(self) -> Path:
        """``figures/``."""
        return self.path / "figures"

    @classmethod
    def create(cls, out: str | os.PathLike[str], name: str, matrix_text: str) -> RunDir:
        """Make ``out/<name>-<YYYYmmdd-HHMMSS>/`` (suffixed if taken) with ``matrix.yaml``."""
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        base = Path(out) / f"{name}-{stamp}"
        path, n = base, 1
        Path(out).mkdir(parents=True, exist_ok=True)
        while True:
            try:
                path.mkdir()
                break
            except FileExistsError:
                n += 1
                path = base.with_name(f"{base.name}-{n}")
        run = cls(path)
        run.points.mkdir()
        (path / "matrix.yaml").write_text(matrix_text)
        return run

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RunDir:
        """An existing run directory.

        Raises
        ------
        ResultsError
            When ``path`` is not a run directory or its schema is newer than this iobench.
        """
        run = cls(Path(path))
        if not run.manifest_path.is_file():
            raise ResultsError(f"{path}: not an iobench run directory (no manifest.json)")
        version = run.manifest().get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ResultsError(
                f"{path}: results schema version {version!r} is newer than this iobench reads "
                f"({SCHEMA_VERSION}); upgrade iobench"
            )
        return run

    def manifest(self) -> dict[str, Any]:
        """The manifest as saved."""
        try:
            data = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise ResultsError(f"{self.manifest_path}: unreadable: {exc}") from None
        if not isinstance(data, dict):
            raise ResultsError(f"{self.manifest_path}: not a JSON object")
        return data

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Save the manifest atomically."""
        write_json(self.manifest_path, {"schema_version": SCHEMA_VERSION, **manifest})

    def staging(self, key: str) -> Path:
        """A fresh, empty directory for a point that is about to run."""
        path = self.points / f".{key}.partial"
        if path.exists():
            shutil.rmtree(path)
        path.mkdir()
        return path

    def commit(self, staging: Path, key: str, meta: dict[str, Any]) -> Path:
        """Write ``meta.json`` and move the point into place in one rename."""
        write_json(staging / "meta.json", {"schema_version": SCHEMA_VERSION, **meta})
        final = self.points / key
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
        return final

    def point_metas(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        """Every saved point with its ``meta.json``, in key order."""
        if not self.points.is_dir():
            return
        for path in sorted(self.points.iterdir()):
            if path.name.startswith(".") or not (path / "meta.json").is_file():
                continue
            try:
                meta = json.loads((path / "meta.json").read_text())
            except ValueError as exc:
                raise ResultsError(f"{path / 'meta.json'}: unreadable: {exc}") from None
            yield path, meta

    def finished_keys(self) -> set[str]:
        """Points that need not run again on resume (``ok`` or ``skipped``)."""
        return {meta["key"] for _, meta in self.point_metas() if meta.get("status") in FINISHED}

    def write_frame(self, frame: pd.DataFrame) -> None:
        """Save ``results.parquet`` atomically, tagged with the schema version."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame, preserve_index=False)
        metadata = dict(table.schema.metadata or {})
        metadata[b"iobench_schema_version"] = str(SCHEMA_VERSION).encode()
        table = table.replace_schema_metadata(metadata)
        tmp = self.frame_path.with_name(".results.parquet.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, self.frame_path)

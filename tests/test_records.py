"""Typed records: versioned, migrated, and a bad file names itself and its field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import iobench
from iobench.store.records import (
    JournalRecord,
    Manifest,
    PointMeta,
    RecordError,
    read_record,
    record_json,
    write_record,
)
from iobench.store.rundir import RunDir

LAB_RUN = Path(__file__).resolve().parent.parent / "notebooks" / "lab-results" / "lab-numa"


def _meta(**extra: object) -> dict[str, object]:
    return {
        "schema_version": PointMeta.current,
        "key": "0001-r1",
        "point": 1,
        "repeat": 1,
        "params": {"bs": 4096},
        **extra,
    }


def test_a_point_record_round_trips(tmp_path: Path) -> None:
    meta = PointMeta.model_validate(_meta(status="ok", processes=[]))
    write_record(tmp_path / "meta.json", meta)
    assert read_record(PointMeta, tmp_path / "meta.json") == meta
    assert json.loads((tmp_path / "meta.json").read_text())["schema_version"] == PointMeta.current


def test_version_1_meta_is_migrated(tmp_path: Path) -> None:
    old = {"schema_version": 1, "key": "0001-r1", "point": 1, "repeat": 1, "status": "ok"}
    old["values"] = {"bs": 4096, "iodepth": 8}  # version 1 kept params twice, as params and values
    old["params"] = dict(old["values"])  # type: ignore[call-overload]
    (tmp_path / "meta.json").write_text(json.dumps(old))
    meta = read_record(PointMeta, tmp_path / "meta.json")
    assert meta.params == {"bs": 4096, "iodepth": 8} and meta.schema_version == PointMeta.current
    assert "values" not in json.loads(record_json(meta))


def test_a_version_2_meta_has_no_facts(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({**_meta(status="ok"), "schema_version": 2}))
    meta = read_record(PointMeta, tmp_path / "meta.json")
    assert meta.facts is None and meta.schema_version == 3


def test_a_version_1_run_directory_still_loads(tmp_path: Path) -> None:
    """The lab runs shipped with the notebooks were written by schema 1; they load, frame rebuilt."""
    run = tmp_path / LAB_RUN.name
    shutil.copytree(LAB_RUN, run)
    (run / "results.parquet").unlink(missing_ok=True)  # a cache: not in the repository
    assert json.loads((run / "manifest.json").read_text())["schema_version"] == 1
    manifest = RunDir.open(run).manifest()
    assert manifest.name == "lab-numa" and manifest.machine.host
    frame = iobench.load(run)
    assert len(frame) and (frame["status"] == "ok").all() and (frame["iops"] > 0).all()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty point record"),
        ('{"schema_version": 2, "key": "0001-r1", "po', "truncated or not JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps(_meta(point="three")), r"corrupt point record.*point: Input should be a valid integer"),
        (json.dumps(_meta(status="exploded")), r"status: Input should be 'ok'"),
        (json.dumps(_meta(processes=[{"argv": "fio"}])), r"processes\.0\.argv: Input should be a valid list"),
        (json.dumps(_meta(surprise=1)), r"surprise: Extra inputs are not permitted"),
        (json.dumps({k: v for k, v in _meta().items() if k != "key"}), r"key: Field required"),
        (
            json.dumps(_meta(schema_version=7)),
            r"schema version 7 was written by a newer iobench.*reads versions 1 to 3",
        ),
        (json.dumps(_meta(schema_version="2")), r"schema_version: not a schema version"),
    ],
)
def test_a_bad_point_record_names_the_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "meta.json"
    path.write_text(text)
    with pytest.raises(RecordError, match=message) as caught:
        read_record(PointMeta, path)
    assert str(caught.value).startswith(str(path))


def test_a_corrupt_manifest_names_its_field(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"schema_version": 2, "repeat": "twice"}))
    with pytest.raises(RecordError, match=r"manifest.json: corrupt run manifest.*repeat: Input should be"):
        read_record(Manifest, path)


def test_machine_facts_keep_what_a_newer_collector_adds() -> None:
    manifest = Manifest.model_validate({"machine": {"host": "h", "pcie": {"x": 1}}})
    assert manifest.machine.host == "h" and manifest.machine.facts()["pcie"] == {"x": 1}


def test_a_journal_round_trips_and_a_bad_one_names_its_field(tmp_path: Path) -> None:
    record = JournalRecord(disk="loop3", dev="7:3", originals={"scheduler": "none"}, pid=42)
    write_record(tmp_path / "loop3.json", record, mode=0o600)
    assert read_record(JournalRecord, tmp_path / "loop3.json") == record
    assert (tmp_path / "loop3.json").stat().st_mode & 0o777 == 0o600
    (tmp_path / "bad.json").write_text(
        json.dumps({"version": 1, "disk": "loop3", "dev": "7:3", "originals": {}})
    )
    with pytest.raises(RecordError, match=r"bad.json: corrupt settings journal: pid: Field required"):
        read_record(JournalRecord, tmp_path / "bad.json")


def test_only_the_store_reads_or_writes_records() -> None:
    """No module outside iobench/store names meta.json or manifest.json as a file it opens."""
    package = Path(iobench.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        if path.parts[-2] == "store":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if ('"meta.json"' in line or '"manifest.json"' in line) and not line.lstrip().startswith("#"):
                offenders.append(f"{path.relative_to(package)}:{number}: {line.strip()}")
    assert offenders == []

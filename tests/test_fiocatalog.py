"""What the installed fio accepts, asked from fio itself and remembered on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from iobench.matrix.fiocatalog import FioCatalog, fio_catalog
from iobench.matrix.values import option_value

pytestmark = pytest.mark.fio


def test_options_aliases_and_types_come_from_fio() -> None:
    catalog = fio_catalog()
    assert catalog.option("blocksize").name == "bs"  # type: ignore[union-attr]
    assert catalog.option("iodepht") is None  # fio shows its closest match; we do not take it
    rw = catalog.option("rw")
    assert rw is not None and rw.kind == "choice" and "randread" in rw.choices
    assert "hipri" in catalog.engine_options("io_uring")


@pytest.mark.parametrize(
    ("name", "value", "ok"),
    [
        ("bs", "4k", True),
        ("bs", "4k,8k", True),
        ("bs", "lots", False),
        ("iodepth", "0", False),
        ("rwmixread", "101", False),
        ("direct", "1", True),
        ("direct", "maybe", False),
        ("runtime", "10m", True),
        ("runtime", "soon", False),
        ("rw", "randrw:8", True),
        ("rw", "random", False),
    ],
)
def test_values_are_checked_by_type(name: str, value: str, ok: bool) -> None:
    option = fio_catalog().option(name)
    assert option is not None
    try:
        option_value(option, value)
    except ValueError:
        assert not ok
    else:
        assert ok


def test_answers_are_cached_on_disk_and_a_broken_cache_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    base = fio_catalog()
    first = FioCatalog(base.binary, base.version)
    assert first.option("numjobs") is not None and first.option("nosuchoption") is None
    first.save()
    [cache] = (tmp_path / "iobench").iterdir()
    second = FioCatalog(base.binary, base.version)
    assert second._options == first._options and not second._dirty
    cache.write_text("{not json")
    third = FioCatalog(base.binary, base.version)
    assert third.option("numjobs") == first.option("numjobs")


def test_parse_only_reports_what_fio_rejects() -> None:
    catalog = fio_catalog()
    assert catalog.parse_only("[j]\nioengine=null\nrw=read\nsize=1M\nfilename=/nonexistent/x\n") is None
    complaint = catalog.parse_only("[j]\nioengine=null\nbssplit=4k/50:junk\nfilename=/nonexistent/x\n")
    assert complaint is not None and "bssplit" in complaint


def test_an_accepted_job_file_is_remembered_and_a_refused_one_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import iobench.matrix.fiocatalog as fiocatalog

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    base = fio_catalog()
    good = "[j]\nioengine=null\nrw=read\nsize=1M\nfilename=/nonexistent/x\n"
    bad = "[j]\nioengine=null\nbssplit=4k/50:junk\nfilename=/nonexistent/x\n"
    first = FioCatalog(base.binary, base.version)
    assert first.parse_only(good) is None and first.parse_only(bad) is not None
    first.save()
    asked: list[list[str]] = []
    real = fiocatalog.run_process

    def counting(argv: list[str], **kwargs: object) -> object:
        asked.append(list(argv))
        return real(argv, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fiocatalog, "run_process", counting)
    second = FioCatalog(base.binary, base.version)  # a new process would read the same file
    assert second.parse_only(good) is None and asked == []
    assert second.parse_only(good.replace("size=1M", "size=2M")) is None and len(asked) == 1
    assert second.parse_only(bad) is not None and len(asked) == 2  # a refusal is never remembered

"""fio options by allowlist: the table covers the installed fio, and every refused class is refused.

Each refusal goes through ``iobench run`` (exit 2, the matrix's file:line, the
option, why and what to use instead; nothing created) or through
``parse_matrix``; the table itself is checked against ``fio --cmdhelp=all``
and ``fio --enghelp``, so an option a newer fio adds shows up here by name.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from iobench.errors import MatrixError
from iobench.matrix import fiooptions
from iobench.matrix.fiooptions import ENGINES, OPTIONS, counts, rule
from iobench.matrix.model import parse_matrix, point_writes

pytestmark = pytest.mark.fio
DOCS = Path(__file__).resolve().parent.parent / "docs" / "guard.md"

BASE = """\
version: 1
name: opts
targets:
  - path: {target}
    size: 1M
fio:
  ioengine: psync
  rw: read
  runtime: 1
  time_based: 1
"""


def _fio(*args: str) -> str:
    fio = shutil.which("fio")
    assert fio is not None
    done = subprocess.run([fio, *args], capture_output=True, text=True, timeout=60, check=False)
    return done.stdout + done.stderr


def _names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        key, sep, _ = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            names.add(key.strip())
    return names


def installed_options() -> set[str]:
    """Every core option and every option of every engine of the installed fio."""
    names = _names(_fio("--cmdhelp=all"))
    engines = [line.strip() for line in _fio("--enghelp").splitlines()[1:] if line.strip()]
    for engine in engines:
        names |= _names(_fio(f"--enghelp={engine}"))
    return names


def test_every_option_of_the_installed_fio_is_classified() -> None:
    missing = sorted(installed_options() - set(OPTIONS))
    assert missing == [], f"classify these in iobench/matrix/fiooptions.py: {missing}"


def test_every_engine_of_the_installed_fio_is_classified() -> None:
    engines = {line.strip() for line in _fio("--enghelp").splitlines()[1:] if line.strip()}
    assert sorted(engines - set(ENGINES)) == []


def test_the_counts_add_up_and_every_refusal_says_why_and_what_instead() -> None:
    found = counts()
    assert sum(found.values()) == len(OPTIONS)
    assert found["allowed"] > 150 and found["managed"] >= 5 and found["refused"] >= 40
    for name, entry in OPTIONS.items():
        if entry.kind != "allowed":
            assert entry.why and entry.instead, name


def test_the_design_record_lists_every_refused_and_managed_option() -> None:
    text = DOCS.read_text()
    for name, entry in OPTIONS.items():
        if entry.kind != "allowed":
            assert f"`{name}`" in text, f"docs/guard.md does not name `{name}`"
    for kind, number in counts().items():
        assert re.search(rf"\b{number}\b {kind}", text), f"docs/guard.md does not count {number} {kind}"


def test_an_option_missing_from_the_table_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    table = dict(OPTIONS)
    del table["rwmixread"]
    monkeypatch.setattr(fiooptions, "OPTIONS", table)
    with pytest.raises(MatrixError, match=r"`rwmixread` is refused: iobench's option table does not know it"):
        parse_matrix(BASE.format(target=tmp_path / "t") + "  rwmixread: 70\n", "t.yaml")
    assert rule("no_such_option_in_any_fio").kind == "refused"


# Each refused class, one option or value each, with the words its refusal must carry.
REFUSED = {
    "read_iolog": ("read_iolog: /tmp/trace.log", "`read_iolog` is refused: it replays the writes"),
    "replay_redirect": ("replay_redirect: /dev/sdz", "`replay_redirect` is refused"),
    "merge_blktrace_file": ("merge_blktrace_file: merged.bin", "`merge_blktrace_file` is refused"),
    "unlink": ("unlink: 1", "`unlink` is refused: fio would delete the target files"),
    "unlink_each_loop": ("unlink_each_loop: 1", "`unlink_each_loop` is refused"),
    "ioscheduler": ("ioscheduler: none", "`ioscheduler` is set by iobench.*use the `scheduler` axis"),
    "cgroup": ("cgroup: ../../evil", "`cgroup` is refused: fio would create and delete cgroups"),
    "cgroup_weight": ("cgroup_weight: 500", "`cgroup_weight` is refused"),
    "opendir": ("opendir: /etc", "`opendir` is refused: it adds files beyond the targets"),
    "directory": ("directory: /tmp", "`directory` is refused: it adds files"),
    "filename_format": ("filename_format: x.$jobnum", "`filename_format` is refused"),
    "nrfiles": ("nrfiles: 4", "nrfiles 4 would make fio add files beyond the target"),
    "exec_prerun": ("exec_prerun: touch /tmp/x", "`exec_prerun` is refused: it runs a program"),
    "exec_postrun": ("exec_postrun: /bin/true", "`exec_postrun` is refused"),
    "uid": ("uid: 65534", "`uid` is refused: the jobs would run as another user"),
    "profile": ("profile: tiobench", "`profile` is refused"),
    "fill_device": ("fill_device: 1", "`fill_device` is refused: it writes until the file system is full"),
    "allow_mounted_write": ("allow_mounted_write: 1", "`allow_mounted_write` is refused"),
    "write_bw_log": ("write_bw_log: mine", "`write_bw_log` is set by iobench"),
    "filename": ("filename: /dev/sdz", "`filename` is set by iobench"),
    "include": ("include: other.fio", "`include` is refused: it reads another job file"),
    "alias": ("iomem: mmap", None),  # an alias of an allowed option is allowed
    "engine-option": ("ioengine: net\n  hostname: example.org", "ioengine `net` is refused"),
    "filedelete": ("ioengine: filedelete", "ioengine `filedelete` is refused: .* deletes them"),
    "ftruncate": ("ioengine: ftruncate", "ioengine `ftruncate` is refused"),
    "falloc": ("ioengine: falloc", "ioengine `falloc` is refused"),
    "sg": ("ioengine: sg", "ioengine `sg` is refused"),
    "external": ("ioengine: external:/tmp/evil.so", "ioengine `external:/tmp/evil.so` is refused"),
    "mem-file": ("mem: mmap:/tmp/buffers", "`mem` with `:PATH` maps a file"),
    "mem-huge-file": ("iomem: mmaphuge:/hugetlbfs/f", "`mem` with `:PATH` maps a file"),
    "pattern-file": (
        "buffer_pattern: \"'/etc/shadow'\"",
        "a pattern in single quotes is read from that file",
    ),
    "verify-pattern-file": ("verify_pattern: \"'/etc/shadow'\"", "read from that file"),
    "iolog-path": ("write_iolog: /tmp/evil.log", "'/tmp/evil.log' is not a plain file name"),
    "iolog-up": ("write_iolog: ../evil.log", "is not a plain file name"),
    "hist-named": ("write_hist_log: hist", "`write_hist_log` is set by iobench.*log_hist_msec"),
    "iolog-over-results": ("write_iolog: fio.json", "could overwrite iobench's own files"),
    "per-job-logs": ("per_job_logs: 0", "`per_job_logs` is set by iobench"),
    "dollar": ("description: $ncpus", "fio would expand `\\$`"),
    "semicolon": ("description: a;b", "fio ends a value at `;` or `#`"),
    "hash": ("verify_pattern: '0xff#'", "fio ends a value at `;` or `#`"),
}


@pytest.mark.parametrize(("option", "expected"), REFUSED.values(), ids=REFUSED.keys())
def test_each_refused_option_class_exits_2_naming_the_line_why_and_instead(
    option: str, expected: str | None, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    target = tmp_path / "target.dat"
    text = BASE.format(target=target)
    if option.startswith("ioengine:"):
        text = text.replace("  ioengine: psync\n", "")
    path = write_matrix(text + f"  {option}\n")
    if expected is None:
        parse_matrix(path.read_text(), str(path))
        return
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "iobench", "run", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    message = done.stderr.replace("\n  ", " ")
    assert re.search(expected, message), message
    assert re.search(r"matrix\.yaml:\d+:\d+: fio\.", message), message
    assert "Traceback" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matrix.yaml"]


def test_a_refused_option_in_an_axis_or_include_is_refused_there(tmp_path: Path) -> None:
    text = (
        BASE.format(target=tmp_path / "t") + "matrix:\n  unlink: [0, 1]\n  include:\n    - {read_iolog: x}\n"
    )
    with pytest.raises(MatrixError) as caught:
        parse_matrix(text, "t.yaml")
    issues = caught.value.issues
    assert any("matrix.unlink: `unlink` is refused" in i for i in issues)
    assert any("matrix.include[0].read_iolog: `read_iolog` is refused" in i for i in issues)


def test_plain_log_names_and_allowed_engines_pass(tmp_path: Path) -> None:
    text = BASE.format(target=tmp_path / "t").replace("ioengine: psync", "ioengine: filestat")
    matrix = parse_matrix(
        text + "  write_iolog: trace.log\n  log_hist_msec: 1000\n  mem: mmap\n",
        "t.yaml",
    )
    assert matrix.fio["ioengine"] == "filestat"
    assert matrix.fio["write_iolog"] == "trace.log" and matrix.fio["mem"] == "mmap"


@pytest.mark.parametrize("option", ["trim_percentage: 10", "trim_backlog: 8", "trim_verify_zero: 0"])
def test_a_trim_option_makes_a_point_write(option: str, tmp_path: Path) -> None:
    matrix = parse_matrix(BASE.format(target=tmp_path / "t") + f"  {option}\n", "t.yaml")
    assert point_writes(matrix, matrix.combos[0])


@pytest.mark.parametrize("rw", ["trim", "randtrim", "trimwrite", "randtrimwrite"])
def test_a_trim_workload_writes(rw: str, tmp_path: Path) -> None:
    matrix = parse_matrix(BASE.format(target=tmp_path / "t").replace("rw: read", f"rw: {rw}"), "t.yaml")
    assert point_writes(matrix, matrix.combos[0])


def test_a_trim_on_a_file_iobench_did_not_create_needs_allow_write(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    victim = tmp_path / "victim.dat"
    victim.write_bytes(b"keep me" * 1000)
    before = victim.read_bytes()
    path = write_matrix(
        BASE.format(target=victim).replace("rw: read", "rw: randread") + "  trim_percentage: 50\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "iobench", "run", str(path), "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"target {victim} exists and iobench did not create it" in done.stderr
    assert re.search(r"matrix\.yaml:4:\d+: target", done.stderr), done.stderr
    assert victim.read_bytes() == before and not (tmp_path / "r").exists()


# --- newcomers' slips -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("snippet", "hint"),
    [
        ("  rw: randred\n", "did you mean `randread`?"),
        ("  rw: randwrit\n", "did you mean `randwrite`?"),
        ("matrix:\n  placement: [same-cores]\n", "did you mean `same-core`?"),
    ],
)
def test_a_mistyped_value_gets_a_did_you_mean(snippet: str, hint: str, tmp_path: Path) -> None:
    text = BASE.format(target=tmp_path / "t")
    if snippet.startswith("  rw:"):
        text = text.replace("  rw: read\n", snippet)
    else:
        text += snippet
    with pytest.raises(MatrixError) as caught:
        parse_matrix(text, "t.yaml")
    assert hint in str(caught.value)


def test_problems_are_listed_in_file_order(tmp_path: Path) -> None:
    text = (
        "version: 1\nname: order\n"
        f"targets:\n  - path: {tmp_path}/t\n    size: 1M\n"
        "matrix:\n  iodepth: [0]\n"  # line 7: found while reading the axes
        "fio:\n  rw: randred\n"  # line 9: found earlier, while reading fio:
        "  unlink: 1\n"  # line 10
    )
    with pytest.raises(MatrixError) as caught:
        parse_matrix(text, "t.yaml")
    lines = [int(re.match(r"t\.yaml:(\d+):", i).group(1)) for i in caught.value.issues]  # type: ignore[union-attr]
    assert lines == sorted(lines) and len(lines) == 3

"""What the installed fio accepts: option names, aliases, types and valid values.

Everything comes from fio itself (``--cmdhelp``, ``--enghelp``, ``--parse-only``)
so a matrix is checked against the fio that will run it, not a list we keep.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from iobench.errors import FioError
from iobench.matrix.fiooptions import allowed_engine
from iobench.store.answers import recall, remember
from iobench.system.process import CommandNotFound, minimal_env, run_process

OptionKind = Literal["int", "bool", "time", "choice", "float_list", "string"]


@dataclass(frozen=True)
class FioOption:
    """One option as the installed fio describes it."""

    name: str
    kind: OptionKind
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    engine: str | None = None


def _kind_of(type_line: str, has_choices: bool) -> OptionKind:
    if has_choices:
        return "choice"
    if "boolean" in type_line:
        return "bool"
    if "integer" in type_line:
        return "int"
    if "time postfix" in type_line:
        return "time"
    if "floating point" in type_line:
        return "float_list"
    return "string"


def _parse_cmdhelp(text: str, asked: str) -> FioOption | None:
    """Read one ``fio --cmdhelp=NAME`` block; None unless it describes ``asked`` (by name or alias)."""
    # For an unknown name fio shows the closest option and says "No such command" on stderr.
    if "No such command" in text:
        return None
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith(" - showing")]
    if not lines:
        return None
    name = lines[0].split(":", 1)[0].strip()
    aliases = {
        rest.strip()
        for key, _, rest in (line.partition(":") for line in lines[1:3])
        if key.strip() == "alias"
    }
    # `--cmdhelp=all` (or an empty name) lists every option: the first one is not the one asked for.
    if asked != name and asked not in aliases:
        return None
    type_line = ""
    choices: list[str] = []
    minimum = maximum = None
    in_choices = False
    for line in lines[1:]:
        key, _, rest = line.partition(":")
        key = key.strip()
        if key == "type":
            type_line, in_choices = rest, False
        elif key == "valid values" or (key == "" and in_choices):
            in_choices = True
            word = rest.split()
            if word:
                choices.append(word[0].lower())
        elif key == "range":
            in_choices = False
            found = dict(re.findall(r"(min|max)=(-?\d+)", rest))
            minimum = int(found["min"]) if "min" in found else None
            maximum = int(found["max"]) if "max" in found else None
        else:
            in_choices = False
    return FioOption(name, _kind_of(type_line, bool(choices)), tuple(choices), minimum, maximum)


ACCEPTED_KEPT = 256
"""How many accepted job files the cache remembers (the newest)."""


def _option(data: dict[str, Any]) -> FioOption:
    return FioOption(**{**data, "choices": tuple(data.get("choices", ()))})


@dataclass
class FioCatalog:
    """The installed fio, asked lazily; answers are remembered on disk per fio binary."""

    binary: str
    version: str
    _options: dict[str, FioOption | None] = field(default_factory=dict, repr=False)
    _engines: dict[str, dict[str, FioOption]] = field(default_factory=dict, repr=False)
    _accepted: list[str] = field(default_factory=list, repr=False)
    _dirty: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        data = recall(self.binary, "fio-options", self.version)
        try:
            data = data if isinstance(data, dict) else {}
            self._options = {k: _option(v) if v else None for k, v in data.get("options", {}).items()}
            self._engines = {
                e: {k: _option(v) for k, v in opts.items()} for e, opts in data.get("engines", {}).items()
            }
            self._accepted = [str(h) for h in data.get("accepted", [])][-ACCEPTED_KEPT:]
        except (ValueError, TypeError, AttributeError):
            self._options, self._engines, self._accepted = {}, {}, []

    def save(self) -> None:
        """Remember what fio said, so the next matrix is checked without asking again."""
        if not self._dirty:
            return
        data = {
            "options": {k: asdict(v) if v else None for k, v in self._options.items()},
            "engines": {e: {k: asdict(v) for k, v in opts.items()} for e, opts in self._engines.items()},
            "accepted": self._accepted[-ACCEPTED_KEPT:],
        }
        remember(self.binary, "fio-options", data, self.version)
        self._dirty = False

    def _ask(self, *args: str) -> str:
        done = run_process([self.binary, *args], timeout=30)
        return done.stdout + done.stderr

    def option(self, name: str) -> FioOption | None:
        """The core option ``name`` (or alias) as fio describes it, or None if fio has none."""
        if name not in self._options:
            self._options[name] = _parse_cmdhelp(self._ask(f"--cmdhelp={name}"), name)
            self._dirty = True
        return self._options[name]

    def engine_options(self, engine: str) -> dict[str, FioOption]:
        """Options the ioengine ``engine`` adds (``fio --enghelp=ENGINE``); none for an engine iobench refuses.

        fio loads a name that is none of its own engines as a library, running
        its code, so only the engines of iobench's table are ever asked about.
        """
        if not allowed_engine(engine):
            return {}
        engine = engine.strip().lower()
        if engine not in self._engines:
            found: dict[str, FioOption] = {}
            for line in self._ask(f"--enghelp={engine}").splitlines():
                key, sep, _ = line.partition(":")
                key = key.strip()
                if sep and key and " " not in key:
                    found[key] = FioOption(key, "string", engine=engine)
            self._engines[engine] = found
            self._dirty = True
        return self._engines[engine]

    def option_names(self) -> list[str]:
        """Every core option name, for suggestions."""
        names = []
        for line in self._ask("--cmdhelp").splitlines():
            key, sep, _ = line.partition(":")
            if sep and key.strip():
                names.append(key.strip())
        return names

    def lookup(self, name: str, engines: tuple[str, ...] = ()) -> FioOption | None:
        """Find ``name`` among the core options, then among the options of ``engines``."""
        found = self.option(name)
        if found is not None:
            return found
        for engine in engines:
            option = self.engine_options(engine).get(name)
            if option is not None:
                return option
        return None

    def accepted(self, key: str) -> bool:
        """Whether this fio accepted the job text (or check) whose hash is ``key`` before."""
        return key in self._accepted

    def accept(self, key: str) -> None:
        """Remember that this fio accepted ``key`` (saved with :meth:`save`)."""
        if key not in self._accepted:
            self._accepted.append(key)
            self._dirty = True

    def opened_files(self, jobfiles: Sequence[str]) -> list[list[OpenedSection]]:
        """Which files each job section of each job file opens, as this fio's parser reads them.

        One ``fio --parse-only --debug=file`` for all of ``jobfiles``: fio adds a
        job's files while it parses its options and says so on the ``file``
        debug channel, once per job section (``dup files: N``, N files inherited
        from ``[global]``) and once per file it adds (``"NAME" added at I``),
        after every escape, trimming and comment of its job-file grammar.

        Returns
        -------
        list of list of OpenedSection
            Per job file, its job sections (``[global]`` ones excepted) in order.
            When fio sees another number of job sections than the job files hold
            (a section name fio reads as ``[global]``) the files cannot be told
            apart: every section of every job file is then returned as opening
            ``None``.

        Raises
        ------
        FioError
            When fio rejects a job file or cannot report what it opens.
        """
        if not jobfiles:
            return []
        with tempfile.TemporaryDirectory(prefix="iobench-opens-") as tmp:
            names = []
            for index, text in enumerate(jobfiles):
                name = f"{index}.fio"
                (Path(tmp) / name).write_text(text)
                names.append(name)
            done = run_process(
                [self.binary, "--parse-only", "--debug=file", *names], cwd=tmp, timeout=120, env=minimal_env()
            )
        if done.returncode != 0 or "not included in build" in done.stderr:
            text = (done.stderr + done.stdout).strip()
            lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not _DEBUG_LINE.match(ln)]
            raise FioError(
                f"{self.version} --parse-only refused the job files: "
                + ("; ".join(lines[:4]) or f"exit {done.returncode}")
            )
        groups: list[tuple[int, list[str]]] = []
        for line in done.stdout.splitlines():
            found = _DEBUG_LINE.match(line)
            if found is None:
                continue
            inherited = _DUP_FILES.match(found.group(1))
            added = _ADDED.match(found.group(1))
            if inherited:
                groups.append((int(inherited.group(1)), []))
            elif added:
                if not groups:  # a file before any job section: fio reads the job files otherwise
                    groups.append((-1, []))
                groups[-1][1].append(added.group(1))
        wanted = [_job_sections(text) for text in jobfiles]
        if sum(len(sections) for sections in wanted) != len(groups):
            return [[OpenedSection(-1, None, name) for name in sections] for sections in wanted]
        out, position = [], 0
        for sections in wanted:
            mine = groups[position : position + len(sections)]
            out.append(
                [OpenedSection(n, files, name) for name, (n, files) in zip(sections, mine, strict=True)]
            )
            position += len(sections)
        return out

    def parse_only(self, jobfile: str) -> str | None:
        """Let fio parse ``jobfile`` without running it; return its complaint, or None if accepted.

        A job file this fio binary accepted before is not asked again (fio takes
        a sixth of a second to start): the acceptance is remembered with the
        option catalogue, keyed by the text's hash. A refusal is always asked.
        """
        digest = hashlib.sha256(jobfile.encode()).hexdigest()
        if digest in self._accepted:
            return None
        with tempfile.TemporaryDirectory(prefix="iobench-parse-") as tmp:
            path = Path(tmp) / "check.fio"
            path.write_text(jobfile)
            done = run_process([self.binary, "--parse-only", str(path)], cwd=tmp, timeout=60)
        if done.returncode == 0:
            self._accepted.append(digest)
            self._dirty = True
            return None
        text = (done.stderr + done.stdout).strip()
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "job global dropped" not in ln]
        return "; ".join(lines[:4]) or f"fio --parse-only exited {done.returncode}"


@dataclass
class OpenedSection:
    """One job section of a job file as fio's parser read it (:meth:`FioCatalog.opened_files`).

    Attributes
    ----------
    inherited : int
        Files the section took over from ``[global]`` sections before its own
        (fio does not name them); -1 when unknown.
    files : list of str or None
        The files the section adds, exactly as fio will open them; None when
        they could not be attributed to this section.
    name : str
        The section's name as the job file writes it.
    """

    inherited: int
    files: list[str] | None
    name: str = ""


# A line of fio's debug output: "file     12345 <message>".
_DEBUG_LINE = re.compile(r"^file\s+\d+\s+(.*)$")
_DUP_FILES = re.compile(r"^dup files: (\d+)$")
_ADDED = re.compile(r'^file 0x[0-9a-fA-F]+ "(.*)" added at \d+$')
_SECTION = re.compile(r"^\s*\[(.*)\]\s*$")


def _job_sections(jobfile: str) -> list[str]:
    """The job sections a job file written by iobench holds, in order (``[global]`` ones left out)."""
    names = [m.group(1) for line in jobfile.splitlines() for m in [_SECTION.match(line)] if m]
    return [name for name in names if not name.startswith("global")]


def find_fio(binary: str | None = None) -> str:
    """Resolve the fio executable: ``binary``, ``$IOBENCH_FIO``, or ``fio`` on PATH."""
    wanted = binary or os.environ.get("IOBENCH_FIO") or "fio"
    resolved = shutil.which(wanted)
    if resolved is None:
        raise FioError(
            f"fio not found ({wanted!r} is not on PATH); install it with "
            "`apt-get install fio` (or `make demo`, which does), or set IOBENCH_FIO"
        )
    return resolved


def _version(binary: str) -> str:
    """What ``fio --version`` prints, remembered per binary file (fio is slow to say it)."""
    known = recall(binary, "fio-version")
    if isinstance(known, str) and known.startswith("fio-"):
        return known
    try:
        done = run_process([binary, "--version"], timeout=30, env=minimal_env())
    except CommandNotFound as exc:
        raise FioError(str(exc)) from None
    version = done.stdout.strip()
    if done.returncode != 0 or not version.startswith("fio-"):
        raise FioError(f"{binary} --version printed {version!r}; is this fio?")
    remember(binary, "fio-version", version)
    return version


@cache
def _catalog_for(binary: str) -> FioCatalog:
    version = _version(binary)
    major = version.removeprefix("fio-").split(".", 1)[0]
    if not major.isdigit() or int(major) < 3:
        raise FioError(f"{binary} is {version}; iobench runs fio 3.x or newer")
    return FioCatalog(binary=binary, version=version)


def fio_catalog(binary: str | None = None) -> FioCatalog:
    """The :class:`FioCatalog` of the fio that will run (cached per binary)."""
    return _catalog_for(find_fio(binary))

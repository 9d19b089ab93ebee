"""Which ssh destinations and ``-o`` options iobench passes, and the value each may take.

A matrix's ``ssh:`` and ``ssh_options`` and a settings journal's host go
through the same checks here before any ssh starts. ssh builds the command of
a ``ProxyJump`` from ``HostName`` and the destination and runs it through
``/bin/sh -c``, and expands ``%`` tokens and ``${VAR}`` in paths: so every
option has a grammar of its own (host names by RFC 1123, ports as numbers,
paths that exist and only this user or root can change, algorithms the
installed ssh names), and no value holds a quote, ``$``, ``%``, a backquote
or any other character a shell or ssh would read as more than the value.

Keys are ssh_config keywords in lower case (ssh reads them case-insensitively).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import pwd
import re
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from iobench.errors import IobenchError
from iobench.store.answers import recall, remember
from iobench.store.atomic import others_can_change
from iobench.system.process import run_process
from iobench.system.ssh import IOBENCH_OPTIONS, ssh_binary, ssh_env

#: The options iobench sets itself (:data:`iobench.system.ssh.IOBENCH_OPTIONS`) and the one value a matrix
#: may give too (the one iobench sets); None: any value if the option is allowed (the user's
#: timeouts and keep-alive win), else none.
IOBENCH_SSH_OPTIONS: dict[str, str | None] = {key.lower(): value for key, value in IOBENCH_OPTIONS.items()}

# A value's grammar: None when ``value`` fits, else what the option takes (for the message).
Grammar = Callable[[str], str | None]

_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
# A Host alias of ~/.ssh/config may also hold '_' (it names a block there, not a DNS name).
_ALIAS = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}$")
_USER = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,31}$")
_INTERFACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$")
_PATTERN = re.compile(r"^[A-Za-z0-9*?._-]+$")
_ALGORITHM = re.compile(r"^[A-Za-z0-9@._*?-]+$")
_TIME = re.compile(r"^(?:[0-9]+[sSmMhHdDwW]?)+$")
_TIME_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_YES_NO = ("yes", "no", "true", "false")  # ssh reads true and false as yes and no
_QOS = {
    *(f"af{a}{b}" for a in "1234" for b in "123"),
    *(f"cs{n}" for n in range(8)),
    *("ef", "le", "lowdelay", "throughput", "reliability", "none"),
}
_AUTHENTICATIONS = ("gssapi-with-mic", "hostbased", "publickey", "keyboard-interactive", "password")
_PATH_CHARS = re.compile(r"^[A-Za-z0-9_./+@,:~-]+$")
#: What ``ssh -Q`` is asked for the names an algorithm option takes.
ALGORITHM_QUERIES = {
    "ciphers": "cipher",
    "macs": "mac",
    "kexalgorithms": "kex",
    "hostkeyalgorithms": "key-sig",
    "pubkeyacceptedalgorithms": "key-sig",
    "pubkeyacceptedkeytypes": "key-sig",
    "hostbasedacceptedalgorithms": "key-sig",
    "casignaturealgorithms": "sig",
}
#: ssh's answer to ``ssh -Q`` is read only this far (its lists are a few KiB).
QUERY_LIMIT_CHARS = 65536


def host_name_problem(text: str) -> str | None:
    """Why ``text`` is not a host name (RFC 1123) nor an IPv4 or IPv6 address; None when it is one."""
    if ":" in text or text.replace(".", "").isdigit():
        try:
            ipaddress.ip_address(text)
        except ValueError:
            return "an IPv4 or IPv6 address written out (e.g. 192.0.2.7, 2001:db8::7), without a zone"
        return None if "%" not in text else "an address without a zone (%)"
    labels = text.removesuffix(".").split(".")
    if len(text) > 253 or not all(_LABEL.match(label) for label in labels):
        return (
            "a host name (RFC 1123: labels of letters, digits and '-', not starting or ending with '-', "
            "joined by '.') or an IP address"
        )
    return None


def _host(value: str) -> str | None:
    return host_name_problem(value)


def _alias(value: str) -> str | None:
    """A host as a destination names it: a host name, an address, or a Host alias of ~/.ssh/config."""
    if host_name_problem(value) is None or (_ALIAS.match(value) and not value.replace(".", "").isdigit()):
        return None
    return "a host name, an IP address, or a Host alias of ~/.ssh/config (letters, digits, '.', '_', '-')"


def _user(value: str) -> str | None:
    if _USER.match(value):
        return None
    return "a user name (letters, digits, '.', '_', '-', not starting with '-', at most 32)"


def _number(low: int, high: int) -> Grammar:
    def check(value: str) -> str | None:
        if value.isdigit() and len(value) <= 6 and low <= int(value) <= high:
            return None
        return f"a whole number from {low} to {high}"

    return check


def _duration(low: int, high: int) -> Grammar:
    def check(value: str) -> str | None:
        if _TIME.match(value) and len(value) <= 20:
            seconds = sum(
                int(n) * _TIME_UNITS[u.lower()] for n, u in re.findall(r"([0-9]+)([a-zA-Z]?)", value)
            )
            if low <= seconds <= high:
                return None
        return f"a time from {low} to {high} s, in seconds or ssh's time format (30, 5m, 1h30m)"

    return check


def _one_of(*words: str) -> Grammar:
    def check(value: str) -> str | None:
        return None if value.lower() in words else f"one of {', '.join(words)}"

    return check


def _words(each: Grammar, *, most: int, alone: tuple[str, ...] = ()) -> Grammar:
    """Blank-separated values, each of ``each``; or one of ``alone`` by itself."""

    def check(value: str) -> str | None:
        words = value.split()
        if len(words) == 1 and words[0].lower() in alone:
            return None
        if not 1 <= len(words) <= most:
            return f"at most {most} values separated by blanks"
        return next((f"{problem} (not {word!r})" for word in words if (problem := each(word))), None)

    return check


def _own_path(value: str, kind: str = "file") -> str | None:
    """An absolute path, or one under ``~/``, of an existing file only this user or root can change."""
    if not _PATH_CHARS.match(value) or not value.startswith(("/", "~/")) or ".." in value.split("/"):
        return (
            "an absolute path or one starting with ~/, without `..`, of letters, digits and '_./+@,:~-' "
            "only (ssh would expand % and ${VAR} in it)"
        )
    # ssh expands ~ to the home directory the password database gives, not $HOME.
    path = Path(pwd.getpwuid(os.geteuid()).pw_dir, value[2:]) if value.startswith("~/") else Path(value)
    try:
        info = os.stat(path)
    except OSError as exc:
        return f"an existing {kind} ({path}: {exc.strerror})"
    wanted = stat.S_ISSOCK if kind == "socket" else stat.S_ISREG
    if not wanted(info.st_mode):
        return f"an existing {kind} ({path} is not one)"
    changer = others_can_change(path, own=False)
    if changer:
        return f"a {kind} only this user or root can change ({changer})"
    return None


def _known_hosts(value: str) -> str | None:
    # /dev/null is how ssh_config says "no file": ssh reads nothing from it.
    return None if value == "/dev/null" else _own_path(value)


def _agent(value: str) -> str | None:
    if value.lower() == "none" or value == "SSH_AUTH_SOCK":
        return None
    problem = _own_path(value, "socket")
    return None if problem is None else f"none, SSH_AUTH_SOCK, or {problem}"


def _destination_parts(value: str, *, port: bool) -> str | None:
    """``[user@]host[:port]`` (``[user@][address]:port`` for IPv6)."""
    user, at, host = value.rpartition("@")
    if at and _user(user):
        return _user(user)
    number = None
    if port and host.startswith("["):
        host, _, number = host[1:].partition("]")
        number = number.removeprefix(":") if number.startswith(":") else (number or None)
    elif port and host.count(":") == 1:
        host, number = host.split(":")
    if number is not None and _number(1, 65535)(number):
        return "a port number from 1 to 65535 after ':'"
    return _alias(host)


def _jumps(value: str) -> str | None:
    if value.lower() == "none":
        return None
    hops = value.split(",")
    if len(hops) > 8 or any(_destination_parts(hop, port=True) for hop in hops):
        return "none, or up to 8 jump hosts [user@]host[:port] separated by ',' (no ssh:// URIs)"
    return None


def _domains(value: str) -> str | None:
    return _words(_host, most=32, alone=("none",))(value)


def _cnames(value: str) -> str | None:
    def rule(entry: str) -> str | None:
        sides = entry.split(":")
        good = len(sides) == 2 and all(p and _PATTERN.match(p) for s in sides for p in s.split(","))
        return None if good else "domain patterns source:target, each a ',' list of names with * and ?"

    return _words(rule, most=32, alone=("none",))(value)


def _authentications(value: str) -> str | None:
    if all(method in _AUTHENTICATIONS for method in value.split(",")):
        return None
    return f"a ',' list of {', '.join(_AUTHENTICATIONS)}"


def _rekey(value: str) -> str | None:
    words = value.split()
    size = re.fullmatch(r"default|[0-9]{1,12}[KMGkmg]?", words[0]) if words else None
    time_ok = len(words) == 1 or (len(words) == 2 and (words[1] == "none" or _TIME.match(words[1])))
    return None if size and time_ok else "a size (default, 1G, 500M) and optionally a time (none, 1h)"


def _qos(value: str) -> str | None:
    def one(word: str) -> str | None:
        return (
            None if word.lower() in _QOS or _number(0, 255)(word) is None else "af11…af43, cs0…cs7, ef, le, …"
        )

    return _words(one, most=2)(value)


class SshQueryError(IobenchError):
    """The installed ssh could not say which algorithms it offers."""


@functools.cache
def _offered(query: str, binary: str) -> frozenset[str]:
    """What ``ssh -Q QUERY`` lists, remembered per ssh binary (it changes only when ssh does)."""
    known = recall(binary, f"ssh-query-{query}")
    if isinstance(known, list):
        return frozenset(str(name) for name in known)
    try:
        done = run_process([binary, "-Q", query], timeout=10, env=ssh_env())
    except IobenchError as exc:
        raise SshQueryError(f"`ssh -Q {query}` could not run ({exc})") from None
    names = done.stdout[:QUERY_LIMIT_CHARS].split()
    if done.returncode != 0 or not names:
        raise SshQueryError(f"`ssh -Q {query}` answered status {done.returncode} with no names")
    remember(binary, f"ssh-query-{query}", sorted(names))
    return frozenset(names)


def _algorithms(key: str) -> Grammar:
    query = ALGORITHM_QUERIES[key]

    def check(value: str) -> str | None:
        # ssh_config: +list appends, -list removes (names may be patterns there), ^list puts first.
        prefix, names = (value[0], value[1:]) if value[:1] in "+-^" else ("", value)
        try:
            offered = _offered(query, ssh_binary())
        except SshQueryError as exc:
            return f"names of `ssh -Q {query}`, which could not be asked: {exc}"
        for name in names.split(","):
            if not _ALGORITHM.match(name) or (name not in offered and not (prefix == "-" and "*" in name)):
                return f"a ',' list of names `ssh -Q {query}` gives (not {name!r})"
        return None

    return check


_FLAG = _one_of(*_YES_NO)

#: Every option a matrix may set, as ssh's manual spells it, with the grammar of its value: those that
#: choose how to connect and authenticate. Anything else is refused: what runs or loads code on
#: this machine, reads more configuration, opens a listener (which would expose the fio server),
#: or hands the host this machine's credentials.
GRAMMARS: dict[str, tuple[str, Grammar]] = {
    key.lower(): (key, grammar)
    for key, grammar in (
        # where and as whom
        ("Port", _number(1, 65535)),
        ("User", _user),
        ("HostName", _host),
        ("HostKeyAlias", _alias),
        ("ProxyJump", _jumps),
        ("AddressFamily", _one_of("any", "inet", "inet6")),
        ("BindAddress", _host),
        ("BindInterface", lambda v: None if _INTERFACE.match(v) else "a network interface's name"),
        ("CanonicalizeHostname", _one_of("yes", "no", "true", "false", "always", "none")),
        ("CanonicalDomains", _domains),
        ("CanonicalizeFallbackLocal", _FLAG),
        ("CanonicalizeMaxDots", _number(0, 255)),
        ("CanonicalizePermittedCNAMEs", _cnames),
        # authentication
        ("IdentityFile", _own_path),
        ("IdentitiesOnly", _FLAG),
        ("IdentityAgent", _agent),
        ("CertificateFile", _own_path),
        ("PubkeyAuthentication", _one_of(*_YES_NO, "unbound", "host-bound")),
        ("PubkeyAcceptedAlgorithms", _algorithms("pubkeyacceptedalgorithms")),
        ("PubkeyAcceptedKeyTypes", _algorithms("pubkeyacceptedkeytypes")),
        ("PreferredAuthentications", _authentications),
        ("PasswordAuthentication", _FLAG),
        ("KbdInteractiveAuthentication", _FLAG),
        ("ChallengeResponseAuthentication", _FLAG),
        ("GSSAPIAuthentication", _FLAG),
        ("HostbasedAuthentication", _FLAG),
        ("HostbasedAcceptedAlgorithms", _algorithms("hostbasedacceptedalgorithms")),
        ("NumberOfPasswordPrompts", _number(0, 100)),
        # host keys
        ("StrictHostKeyChecking", _one_of(*_YES_NO, "ask", "accept-new", "off")),
        ("UserKnownHostsFile", _words(_known_hosts, most=8, alone=("none",))),
        ("GlobalKnownHostsFile", _words(_known_hosts, most=8, alone=("none",))),
        ("HostKeyAlgorithms", _algorithms("hostkeyalgorithms")),
        ("CheckHostIP", _FLAG),
        ("UpdateHostKeys", _one_of(*_YES_NO, "ask")),
        ("VerifyHostKeyDNS", _one_of(*_YES_NO, "ask")),
        ("HashKnownHosts", _FLAG),
        ("FingerprintHash", _one_of("md5", "sha256")),
        ("RevokedHostKeys", lambda v: None if v.lower() == "none" else _known_hosts(v)),
        # algorithms and compression
        ("Ciphers", _algorithms("ciphers")),
        ("MACs", _algorithms("macs")),
        ("KexAlgorithms", _algorithms("kexalgorithms")),
        ("CASignatureAlgorithms", _algorithms("casignaturealgorithms")),
        ("RequiredRSASize", _number(1024, 16384)),
        ("RekeyLimit", _rekey),
        ("Compression", _FLAG),
        ("IPQoS", _qos),
        # log level, keep-alive and timeouts
        (
            "LogLevel",
            _one_of(
                *(w.lower() for w in "QUIET FATAL ERROR INFO VERBOSE DEBUG DEBUG1 DEBUG2 DEBUG3".split())
            ),
        ),
        ("ConnectTimeout", _duration(1, 3600)),
        ("ConnectionAttempts", _number(1, 100)),
        ("ServerAliveInterval", _duration(0, 3600)),
        ("ServerAliveCountMax", _number(0, 1000)),
        ("TCPKeepAlive", _FLAG),
    )
}

_CODE = "it runs a program on this machine (a matrix is data, not code)"
_LIBRARY = "it loads a library into ssh on this machine (a matrix is data, not code)"
_CONFIG = "it reads more configuration, which belongs in ~/.ssh/config"
_LISTENER = "it opens a listener, which would expose the fio server to whoever reaches it"
_CONNECTION = "iobench keeps one control connection per host itself"
_COMMANDS = "iobench runs its own remote commands"
# Why the options people reach for are refused (anything else not allowed gets the general reason).
REFUSED_SSH_OPTIONS = {
    "proxycommand": f"{_CODE}; use ProxyJump",
    "localcommand": _CODE,
    "permitlocalcommand": _CODE,
    "knownhostscommand": _CODE,
    "enablesshkeysign": _CODE,
    "xauthlocation": _CODE,
    "pkcs11provider": _LIBRARY,
    "securitykeyprovider": _LIBRARY,
    "include": _CONFIG,
    "match": _CONFIG,
    "host": _CONFIG,
    "localforward": _LISTENER,
    "remoteforward": _LISTENER,
    "dynamicforward": _LISTENER,
    "gatewayports": _LISTENER,
    "streamlocalbindmask": _LISTENER,
    "streamlocalbindunlink": _LISTENER,
    "tunnel": _LISTENER,
    "tunneldevice": _LISTENER,
    "forwardagent": "it hands the host this machine's ssh agent",
    "forwardx11": "it hands the host this machine's display",
    "forwardx11trusted": "it hands the host this machine's display",
    "gssapidelegatecredentials": "it hands the host this machine's Kerberos credentials",
    "batchmode": "iobench connects with BatchMode=yes (no password prompts)",
    "controlpath": _CONNECTION,
    "controlmaster": _CONNECTION,
    "controlpersist": _CONNECTION,
    "forkafterauthentication": "iobench keeps the connection in the foreground to stop it",
    "sessiontype": _COMMANDS,
    "remotecommand": _COMMANDS,
    "requesttty": "remote commands run without a terminal",
    "stdinnull": "iobench sets the connection's input itself",
    "clearallforwardings": "iobench reaches the fio server through a forward",
    "exitonforwardfailure": "iobench needs a forward that fails to fail the connection",
}
_OPTION = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\s*(?:=|\s)\s*(\S.*)$")
# What no value holds: quotes, shell and ssh expansion, escapes, control characters.
_UNSAFE = re.compile(r"[\"'`$%\\;&|<>(){}\[\]!*?#\x00-\x1f\x7f]")
_BRACKETS_OK = {"proxyjump"}  # [address]:port
_PATTERNS_OK = {"canonicalizepermittedcnames", *ALGORITHM_QUERIES}  # * and ? are ssh's patterns there


def _allowed_list() -> str:
    return "allowed: " + ", ".join(sorted(spelled for spelled, _ in GRAMMARS.values()))


def _unsafe(key: str, value: str) -> bool:
    found = set(_UNSAFE.findall(value))
    if key in _BRACKETS_OK:
        found -= {"[", "]"}
    if key in _PATTERNS_OK:
        found -= {"*", "?"}
    return bool(found)


def ssh_option_problem(option: str) -> tuple[str, str] | None:
    """Why an ``ssh_options`` entry is refused, and what to do; None when it is accepted.

    Accepted: a keyword of :data:`GRAMMARS` with a value of its grammar, and
    of the options iobench sets itself the value iobench uses too
    (``BatchMode=yes``).
    """
    match = _OPTION.match(option.strip())
    if option.startswith("-") or match is None:
        return (
            f"ssh option {option!r} is not `Key=Value`",
            "write options as ssh_config keywords, e.g. `Port=2222`, `IdentityFile=~/.ssh/lab`",
        )
    key, value = match.group(1).lower(), match.group(2).strip()
    if key in GRAMMARS:
        spelled, grammar = GRAMMARS[key]
        wanted = (
            "a value without quotes, `$`, `%`, `\\`, backquotes or other characters a shell or ssh expands"
            if _unsafe(key, value)
            else grammar(value)
        )
        if wanted is None:
            return None
        return (
            f"ssh option `{spelled}` is refused: its value {value!r} is not {wanted}",
            f"give `{spelled}` such a value, or set it for that host in ~/.ssh/config",
        )
    if IOBENCH_SSH_OPTIONS.get(key) is not None and value.lower() == IOBENCH_SSH_OPTIONS[key]:
        return None  # the value iobench sets anyway
    why = REFUSED_SSH_OPTIONS.get(
        key, "it is not one iobench passes: ssh_options choose how to connect and authenticate"
    )
    return f"ssh option `{match.group(1)}` is refused: {why}", _allowed_list()


# The options under which ssh adds host keys to the first UserKnownHostsFile, and their values that do.
_KEY_WRITERS = {
    "stricthostkeychecking": {"no", "off", "false", "accept-new"},
    "updatehostkeys": {"yes", "true"},
    "checkhostip": {"yes", "true"},
}


def host_ssh_options_problem(options: Sequence[str]) -> tuple[str, str] | None:
    """Why one host's ``ssh_options``, each accepted alone, are refused together; None when they are fine.

    ssh appends each host key it accepts to the first ``UserKnownHostsFile``,
    as a line that starts with the host's name or ``HostKeyAlias``; with both
    chosen by the matrix, that is a line of the matrix's choosing appended to
    any file this user may write (a shell's start-up file runs it). So a
    matrix may name its known-hosts file, or let ssh write host keys into the
    user's own, not both.
    """
    keys: dict[str, str] = {}
    for option in options:
        match = _OPTION.match(option.strip())
        if match:
            # ssh reads a quoted value without its quotes ("accept-new" is accept-new).
            keys.setdefault(match.group(1).lower(), match.group(2).strip().strip("\"'").lower())
    if "userknownhostsfile" not in keys:
        return None
    writers = [
        f"{GRAMMARS[key][0]}={keys[key]}"
        for key, values in _KEY_WRITERS.items()
        if keys.get(key, "") in values
    ]
    if not writers:
        return None
    return (
        f"ssh options {', '.join(writers)} with UserKnownHostsFile are refused: ssh writes host keys "
        "into the file UserKnownHostsFile names, a line starting with the host's name or HostKeyAlias, "
        "and a matrix must not choose a file ssh appends to",
        "keep UserKnownHostsFile read-only (StrictHostKeyChecking=yes), or let ssh learn the key "
        "in ~/.ssh/known_hosts (drop UserKnownHostsFile)",
    )


def destination_problem(destination: str) -> str | None:
    """Why an ``ssh:`` destination is refused; None when it is ``[user@]host``.

    The host is a host name, an IP address or a Host alias of ~/.ssh/config:
    ssh puts it into a jump host's command line, which a shell reads.
    """
    if destination.startswith("-") or _destination_parts(destination, port=False):
        return (
            "an ssh destination is [user@]host: a user name, and a host name, IP address or Host alias "
            "of ~/.ssh/config (letters, digits, '.', '_', '-'), e.g. root@storage-a"
        )
    return None


def target_problems(destination: str, options: Sequence[str]) -> list[str]:
    """Every reason a host's destination and options are refused, in words; empty when ssh may be given them.

    For records read back (a settings journal's host): the same checks as a
    matrix's ``ssh:`` and ``ssh_options``.
    """
    problems = []
    wrong = destination_problem(destination)
    if wrong:
        problems.append(f"ssh destination {destination!r} is refused: {wrong}")
    for option in options:
        refused = ssh_option_problem(option)
        if refused:
            problems.append(refused[0])
    together = host_ssh_options_problem(options)
    if together:
        problems.append(together[0])
    return problems

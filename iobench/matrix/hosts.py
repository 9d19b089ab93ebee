"""``hosts:`` of the matrix (docs/hosts.md): the machines a sweep runs on through fio's client/server.

Only the shape and the words are checked here; whether a host answers, runs
the same fio and may be written is the preflight's job
(:mod:`iobench.system.fleet`), before anything runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from iobench.matrix.targets import Target
from iobench.system.ssh import IOBENCH_OPTIONS

#: What a host's ``name`` may be: it names files (job files, journals), so no '/' nor spaces.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

# ssh -o options a matrix may set: those that choose how to connect and authenticate. Anything
# else is refused: what runs or loads code on this machine, reads more configuration, opens a
# listener (which would expose the fio server), or hands the host this machine's credentials.
# Keys are ssh_config keywords in lower case (ssh reads them case-insensitively).
ALLOWED_SSH_OPTIONS = frozenset(
    {
        # where and as whom
        "port",
        "user",
        "hostname",
        "hostkeyalias",
        "proxyjump",
        "addressfamily",
        "bindaddress",
        "bindinterface",
        "canonicalizehostname",
        "canonicaldomains",
        "canonicalizefallbacklocal",
        "canonicalizemaxdots",
        "canonicalizepermittedcnames",
        # authentication
        "identityfile",
        "identitiesonly",
        "identityagent",
        "certificatefile",
        "pubkeyauthentication",
        "pubkeyacceptedalgorithms",
        "pubkeyacceptedkeytypes",
        "preferredauthentications",
        "passwordauthentication",
        "kbdinteractiveauthentication",
        "challengeresponseauthentication",
        "gssapiauthentication",
        "hostbasedauthentication",
        "hostbasedacceptedalgorithms",
        "numberofpasswordprompts",
        # host keys
        "stricthostkeychecking",
        "userknownhostsfile",
        "globalknownhostsfile",
        "hostkeyalgorithms",
        "checkhostip",
        "updatehostkeys",
        "verifyhostkeydns",
        "hashknownhosts",
        "fingerprinthash",
        "revokedhostkeys",
        # algorithms and compression
        "ciphers",
        "macs",
        "kexalgorithms",
        "casignaturealgorithms",
        "requiredrsasize",
        "rekeylimit",
        "compression",
        "ipqos",
        # log level, keep-alive and timeouts
        "loglevel",
        "connecttimeout",
        "connectionattempts",
        "serveraliveinterval",
        "serveralivecountmax",
        "tcpkeepalive",
    }
)

#: The options iobench sets itself (:data:`iobench.system.ssh.IOBENCH_OPTIONS`) and the one value a matrix
#: may give too (the one iobench sets); None: any value if the option is allowed (the user's
#: timeouts and keep-alive win), else none.
IOBENCH_SSH_OPTIONS: dict[str, str | None] = {key.lower(): value for key, value in IOBENCH_OPTIONS.items()}

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
# How ssh's manual spells the allowed keywords, for messages.
_SPELLED = {
    k.lower(): k
    for k in (
        "Port User HostName HostKeyAlias ProxyJump AddressFamily BindAddress BindInterface "
        "CanonicalizeHostname CanonicalDomains CanonicalizeFallbackLocal CanonicalizeMaxDots "
        "CanonicalizePermittedCNAMEs IdentityFile IdentitiesOnly IdentityAgent CertificateFile "
        "PubkeyAuthentication PubkeyAcceptedAlgorithms PubkeyAcceptedKeyTypes PreferredAuthentications "
        "PasswordAuthentication KbdInteractiveAuthentication ChallengeResponseAuthentication "
        "GSSAPIAuthentication HostbasedAuthentication HostbasedAcceptedAlgorithms NumberOfPasswordPrompts "
        "StrictHostKeyChecking UserKnownHostsFile GlobalKnownHostsFile HostKeyAlgorithms CheckHostIP "
        "UpdateHostKeys VerifyHostKeyDNS HashKnownHosts FingerprintHash RevokedHostKeys Ciphers MACs "
        "KexAlgorithms CASignatureAlgorithms RequiredRSASize RekeyLimit Compression IPQoS LogLevel "
        "ConnectTimeout ConnectionAttempts ServerAliveInterval ServerAliveCountMax TCPKeepAlive"
    ).split()
}
_DESTINATION = re.compile(r"^[^\s\-][^\s]*$")


@dataclass(frozen=True)
class Host:
    """A host of the matrix, checked for form.

    Attributes
    ----------
    name : str or None
        The frame's ``host`` value; None until the preflight reads the host's
        hostname (a host without ``name:``).
    ssh : str
        The OpenSSH destination (``user@host``, an alias of ``~/.ssh/config``).
    ssh_options : tuple of str
        Each passed as ``ssh -o OPTION``.
    targets : tuple of Target or None
        The host's own targets (paths on that host); None: the matrix's.
    server : str or None
        The Unix socket of an fio server already running on the host (iobench
        then starts none and reaches that socket through its SSH forward).
    index : int
        Position in ``hosts:``.
    """

    name: str | None
    ssh: str
    ssh_options: tuple[str, ...]
    targets: tuple[Target, ...] | None
    server: str | None
    index: int

    @property
    def label(self) -> str:
        """How messages name the host: its ``name``, else its ssh destination."""
        return self.name or self.ssh


def _allowed_list() -> str:
    return "allowed: " + ", ".join(sorted(_SPELLED.get(k, k) for k in ALLOWED_SSH_OPTIONS))


def ssh_option_problem(option: str) -> tuple[str, str] | None:
    """Why an ``ssh_options`` entry is refused, and what to do; None when it is accepted.

    Accepted: the keywords of :data:`ALLOWED_SSH_OPTIONS`, and of the options
    iobench sets itself the value iobench uses too (``BatchMode=yes``).
    """
    match = _OPTION.match(option.strip())
    if option.startswith("-") or match is None:
        return (
            f"ssh option {option!r} is not `Key=Value`",
            "write options as ssh_config keywords, e.g. `Port=2222`, `IdentityFile=~/.ssh/lab`",
        )
    key, value = match.group(1).lower(), match.group(2).strip()
    if key in ALLOWED_SSH_OPTIONS:
        return None
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
        f"{_SPELLED[key]}={keys[key]}" for key, values in _KEY_WRITERS.items() if keys.get(key, "") in values
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


def user_overrides(options: Sequence[str]) -> set[str]:
    """Which of iobench's own ssh options a host's (accepted) ``ssh_options`` set, as lower-case keys.

    ssh keeps the first value it reads for a keyword, so iobench leaves these
    out of its own ``-o`` options: the user's ``ConnectTimeout`` and
    ``ServerAlive*`` win, and an equal ``BatchMode=yes`` is not given twice.

    Parameters
    ----------
    options
        ``ssh_options`` that :func:`ssh_option_problem` accepted.
    """
    found = set()
    for option in options:
        match = _OPTION.match(option.strip())
        if match and match.group(1).lower() in IOBENCH_SSH_OPTIONS:
            found.add(match.group(1).lower())
    return found


def destination_problem(destination: str) -> str | None:
    """Why an ``ssh:`` destination is refused (it would read as an option, or holds spaces)."""
    if not _DESTINATION.match(destination):
        return "an ssh destination is one word that does not start with '-' (e.g. root@storage-a)"
    return None


def parse_server(text: str) -> str:
    """An fio server's Unix socket on the host: an absolute path, as ``fio --server=sock:PATH`` took it.

    A TCP address is refused: fio's server has no authentication, so a server
    on a TCP port is open to anyone who can reach the port.

    Raises
    ------
    ValueError
        Saying what form is expected.
    """
    path = text.strip()
    if path.startswith("sock:"):
        path = path.removeprefix("sock:")
    if not path.startswith("/") or len(path.encode()) > 100 or any(c.isspace() for c in path) or ":" in path:
        raise ValueError(
            f"server {text!r} is not the absolute path of an fio server's Unix socket on the host "
            "(e.g. /run/fio/fio.sock, as started with `fio --server=sock:/run/fio/fio.sock`); "
            "a TCP server is refused: fio's server has no authentication"
        )
    return path

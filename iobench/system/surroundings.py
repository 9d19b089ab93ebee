"""Who besides root and the run's user could change what a path leads to: the folders on its way.

Another user who may write a folder a target's path goes through can put a
link where the write guard judged a file, between the guard's look and
fio's open. :func:`open_folder` judges every folder the kernel looks a name
up in (:func:`~iobench.system.topology.path_lookups`); :func:`folder_refusal`
is the rule, shared with hosts (:mod:`iobench.system.remoteguard`).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from iobench.system.topology import path_lookups


def user_name(uid: int) -> str:
    """The name of user ``uid``, or ``uid N``."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


def _group_writers(gid: int) -> list[str]:
    """The users other than root and this one in group ``gid`` (listed in it, or their primary group)."""
    me = user_name(os.geteuid())
    try:
        members = set(grp.getgrgid(gid).gr_mem)
    except KeyError:
        return ["members unknown"]  # a group the system does not know: its members cannot be ruled out
    members |= {user.pw_name for user in pwd.getpwall() if user.pw_gid == gid}
    return sorted(members - {"root", me})


def _other_writers(folder: Path, info: os.stat_result) -> str | None:
    """Who besides root and this user may add, remove or rename names in ``folder``, or None."""
    if info.st_mode & stat.S_IWOTH:
        return "every user"
    if not info.st_mode & stat.S_IWGRP:
        return None
    try:
        # With an access ACL the group bits are its mask: a named user may write too.
        os.getxattr(folder, "system.posix_acl_access", follow_symlinks=False)
        return "the users its access ACL names"
    except OSError:
        pass
    writers = _group_writers(info.st_gid)
    return f"group {_group(info.st_gid)} ({', '.join(writers)})" if writers else None


def open_folder(path: str, protected_symlinks: bool) -> str | None:
    """Why a user other than root and this one could change what ``path`` leads to, or None.

    Every folder the kernel looks a name up in on the way to ``path``
    (:func:`~iobench.system.topology.path_lookups`, through every link) is
    judged by :func:`folder_refusal`.
    """
    me = os.geteuid()
    for folder, name in path_lookups(path):
        try:
            info = os.stat(folder)
        except OSError:
            return None
        try:
            uid = os.lstat(folder / name).st_uid
            holder: tuple[int, str] | None = (uid, user_name(uid))
        except OSError:
            holder = None
        owner = (info.st_uid, user_name(info.st_uid))
        refusal = folder_refusal(
            str(folder),
            name,
            owner,
            info.st_mode,
            _other_writers(folder, info),
            holder,
            me,
            protected_symlinks,
        )
        if refusal is not None:
            return refusal
    return None


def folder_refusal(
    folder: str,
    name: str,
    owner: tuple[int, str],
    mode: int,
    writers: str | None,
    holder: tuple[int, str] | None,
    me: int,
    protected_symlinks: bool,
) -> str | None:
    """Why a folder a target's path goes through lets another user change what it leads to, or None.

    A folder owned by another user than root and ``me``, or that another user
    may write (``writers``: the world or group write bit with a member other
    than root and ``me``, or an access ACL), lets them put a link or another
    file where the target was judged, between the guard's look and fio's
    open. A sticky folder (``/tmp``) lets them add names but not remove or
    rename other users' names: it is safe when the kernel does not follow
    other users' links there (``fs.protected_symlinks``), or when ``name``
    (looked up in it) belongs to root or ``me`` (``holder``), or is not there
    yet (None: iobench then makes it itself, with ``O_EXCL`` and ``O_NOFOLLOW``).
    ``owner`` and ``holder`` are a user id and its name.
    """
    who, bits = owner[1], f"mode {stat.S_IMODE(mode):04o}"
    if owner[0] not in (0, me):
        return f"directory {folder} belongs to {who} ({bits}), who could swap what it holds for a link"
    if writers is None:
        return None
    if mode & stat.S_ISVTX:
        if protected_symlinks or holder is None or holder[0] in (0, me):
            return None
        return (
            f"{os.path.join(folder, name)} belongs to {holder[1]}, in sticky directory {folder} "
            f"(owner {who}, {bits}) where the kernel follows other users' links (fs.protected_symlinks is 0)"
        )
    return f"directory {folder} (owner {who}, {bits}) can be written by {writers}, who could swap what it holds for a link"

"""The per-developer key a team's router hashes on (docs/fleet.md).

A router in front of several model-server replicas keeps a developer on the replica that holds
their prefix only if every request of theirs carries the same key. The default is derived from
the user name and the workspace, as a digest: the key travels in a header through proxies and
logs, so it never carries a path or a name in clear. 128 bits of SHA-256: two developers (or
two workspaces of one) collide with probability ~n²/2¹²⁹, nothing a team will meet.
"""

from __future__ import annotations

import getpass
import hashlib
import os

#: Headers the key is sent in: vllm-router's ``consistent_hash`` policy reads ``X-Session-ID``
#: (also HAProxy/nginx configurations hash on it, docs/fleet.md); sglang-router's ``manual``
#: policy reads ``X-SMG-Routing-Key``.
SESSION_HEADERS = ("X-Session-ID", "X-SMG-Routing-Key")
#: A response header a router or proxy may set to name the replica that served the request
#: (HAProxy: ``http-response set-header X-Served-By %s``); shown in ``contenox/status``.
SERVED_BY_HEADER = "X-Served-By"

PREFIX = "cx-"


def derive_session_key(user: str, workspace: str) -> str:
    digest = hashlib.sha256(f"contenox-session\0{user}\0{workspace}".encode()).hexdigest()
    return PREFIX + digest[:32]


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers) and no LOGNAME/USER
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"


def default_session_key(workspace: str | None = None) -> str:
    """The key of this user in ``workspace`` (the current directory when not given)."""
    return derive_session_key(current_user(), workspace or os.getcwd())


__all__ = ["SERVED_BY_HEADER", "SESSION_HEADERS", "default_session_key", "derive_session_key"]

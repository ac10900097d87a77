"""The server process: logging to stderr, a protected stdout, the editor-process watchdog."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import BinaryIO

logger = logging.getLogger(__name__)


#: How long a Python thread may hold the GIL while another waits for it (CPython's default:
#: 5 ms). The engine thread takes it back after every llama.cpp call (several per generated
#: token); with the context thread busy (assembling, indexing), 5 ms each cut a decode to
#: 3-6 tokens/s on 2 cores, 0.5 ms gave 8-13; with no other thread busy, no difference
#: (engine/README.md).
GIL_SWITCH_INTERVAL_S = 0.0005


def share_the_gil_often() -> None:
    """The server's threads hand the GIL over every ``GIL_SWITCH_INTERVAL_S``."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def configure_logging(level: str) -> None:
    """Logging goes to stderr only; stdout carries JSON-RPC and nothing else."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    # pygls logs every message body at INFO, llama.cpp every graph detail: keep both out of
    # anything but debug output.
    noisy = logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING
    for name in ("pygls", "contenox.llama_cpp"):
        logging.getLogger(name).setLevel(noisy)


def protect_stdout() -> BinaryIO:
    """Move the real stdout out of reach: JSON-RPC gets a private duplicate of fd 1, and fd 1
    itself is pointed at stderr, so a stray print() or C-level printf from a native library
    can never corrupt the protocol stream."""
    sys.stdout.flush()
    rpc_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(rpc_fd, "wb")


def start_parent_watchdog(pid: int | None, interval: float = 3.0) -> None:
    """Exit when the editor process dies (LSP ``processId``), even if stdin stays open."""
    if not pid or pid == os.getpid():
        return

    def watch() -> None:
        while True:
            time.sleep(interval)
            if not _pid_alive(pid):
                logger.warning("editor process %s is gone; exiting", pid)
                os._exit(1)

    threading.Thread(target=watch, name="contenox-parent-watchdog", daemon=True).start()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

"""The server process: logging to stderr, a protected stdout, the editor-process watchdog."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import BinaryIO

logger = logging.getLogger(__name__)


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

"""Route llama.cpp's own log into Python logging (stderr), never stdout.

llama-cpp-python installs a callback that prints to stderr unconditionally; we replace it with
one that emits records on the ``contenox.llama_cpp`` logger, so ``--log-level`` controls it and
nothing can ever reach stdout (the LSP transport).
"""

from __future__ import annotations

import ctypes
import logging
import threading

import llama_cpp

log = logging.getLogger("contenox.llama_cpp")

# ggml_log_level (NONE=0, DEBUG=1, INFO=2, WARN=3, ERROR=4, CONT=5) -> logging level; CONT
# continues the previous record. (llama-cpp-python's own table predates this enum order.)
_LEVELS = {
    0: logging.INFO,
    1: logging.DEBUG,
    2: logging.INFO,
    3: logging.WARNING,
    4: logging.ERROR,
}

_lock = threading.Lock()
_pending: list[str] = []
_pending_level = logging.DEBUG
_installed = False
# Set from a cancel until the next request (a decode meanwhile stops at its first node): what
# llama.cpp then logs as errors ("graph_compute: ... failed", "failed to decode, ret = 2") is
# the cancellation the engine reports itself, so it goes out at DEBUG instead of ERROR.
_aborting = threading.Event()


def note_abort() -> None:
    """The engine asked the running (or next) decode to stop (see ``_aborting``)."""
    _aborting.set()


def abort_withdrawn() -> None:
    """A new request starts: the last one's cancel no longer applies, and llama.cpp's errors
    are its own again."""
    _aborting.clear()



@llama_cpp.llama_log_callback
def _callback(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    global _pending_level
    piece = text.decode("utf-8", errors="replace") if text else ""
    with _lock:
        if level != 5:
            _pending_level = _LEVELS.get(level, logging.DEBUG)
        _pending.append(piece)
        if not piece.endswith("\n"):
            return  # llama.cpp writes lines in pieces; emit whole lines only
        line = "".join(_pending).rstrip("\n")
        _pending.clear()
        record_level = _pending_level
    if _aborting.is_set() and record_level > logging.DEBUG:
        record_level = logging.DEBUG
    if line and log.isEnabledFor(record_level):
        log.log(record_level, "%s", line)


def install() -> None:
    """Idempotent; call before loading any model."""
    global _installed
    if _installed:
        return
    llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
    _installed = True

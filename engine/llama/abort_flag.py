"""The cancel flag llama.cpp's compute threads read, without Python.

llama.cpp calls a context's abort callback after every graph node (hundreds per micro-batch).
A Python callback takes the GIL each time, so while another Python thread runs — the language
server's context thread assembling a prompt or indexing — every node waits for the interpreter
to hand the GIL over (every 5 ms): on 2 cores with one busy Python thread a decode ran under
one token/s (engine/README.md, "Cancellation without the GIL"). Here the callback is C's
``strlen`` over a two-byte buffer — one character when the flag is set, none when clear — so
the check is a byte read on the compute thread. Where ``strlen`` cannot be found, a Python
callback reads the same buffer (correct, only slower under contention).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import llama_cpp

_SET, _CLEAR = b"\x01", b"\x00"


def _c_strlen() -> int | None:
    """The address of the C library's ``strlen``, if this process has one to hand."""
    try:
        libc = ctypes.cdll.msvcrt if sys.platform == "win32" else ctypes.CDLL(None)
        return ctypes.cast(libc.strlen, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None


class AbortFlag:
    """``callback`` and ``data`` go into the context parameters; ``set`` from any thread
    stops the running decode within one graph node."""

    def __init__(self) -> None:
        self._buf = ctypes.create_string_buffer(2)  # b"\0\0": clear; the second byte ends it
        self._idle = ctypes.create_string_buffer(2)  # never set (``suspended_data``)
        address = _c_strlen()
        self.native = address is not None
        # Kept as attributes: the function pointers must outlive every context using them.
        self.callback: Any = (llama_cpp.ggml_abort_callback(address) if address is not None
                              else llama_cpp.ggml_abort_callback(self._python_check))
        self.data = ctypes.cast(self._buf, ctypes.c_void_p)
        self.suspended_data = ctypes.cast(self._idle, ctypes.c_void_p)
        """The data of a flag that is never set: a decode that must run to its end."""

    def set(self) -> None:
        self._buf[0] = _SET

    def clear(self) -> None:
        self._buf[0] = _CLEAR

    def attach(self, ctx: Any, *, suspended: bool = False) -> None:
        """Make this flag ``ctx``'s abort check (``suspended``: a flag that is never set, for
        decodes that must run to their end; attach again to restore)."""
        llama_cpp.llama_set_abort_callback(
            ctx, self.callback, self.suspended_data if suspended else self.data)

    @property
    def is_set(self) -> bool:
        return self._buf.raw[0] != 0

    @staticmethod
    def _python_check(data: Any) -> bool:
        return bool(data) and ctypes.string_at(data, 1) != _CLEAR

"""The cancel flag llama.cpp reads after every graph node is C, not Python
(``engine/llama/abort_flag.py``): a Python callback there waits for the GIL at every node while
another Python thread runs (a decode fell from 39 to 0.3 tokens/s on 2 cores)."""

from __future__ import annotations

import ctypes
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from engine import CancelledError
from engine.llama import abort_flag
from engine.llama.abort_flag import AbortFlag


def _check(flag: AbortFlag) -> None:
    assert flag.callback(flag.data) is False and not flag.is_set
    flag.set()
    assert flag.callback(flag.data) is True and flag.is_set
    assert flag.callback(flag.suspended_data) is False  # a decode that must run to its end
    flag.clear()
    assert flag.callback(flag.data) is False and not flag.is_set


@pytest.mark.skipif(sys.platform == "win32", reason="libc by name: POSIX")
def test_the_flag_is_read_by_c_strlen_not_by_python() -> None:
    flag = AbortFlag()
    assert flag.native
    strlen = ctypes.cast(ctypes.CDLL(None).strlen, ctypes.c_void_p).value
    assert ctypes.cast(flag.callback, ctypes.c_void_p).value == strlen
    _check(flag)


def test_without_strlen_a_python_callback_reads_the_same_flag(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(abort_flag, "_c_strlen", lambda: None)
    flag = AbortFlag()
    assert not flag.native
    _check(flag)


def test_a_cancel_stops_the_decode_in_llama_cpp(llama_session: Any) -> None:
    """The flag itself stops llama.cpp's decode (not only the engine's checks between
    micro-batches): a decode started with it set comes back cancelled, nothing committed."""
    session = llama_session
    text = (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text("utf-8")
    toks = session.tokenize(text)[:200]
    session.reset()
    session.prefill(toks[:100])
    session.cancel()
    with pytest.raises(CancelledError):
        session._decode_chunk(toks[100:200], 100, logits_last=True, stage="test")
    assert session.resident_tokens == toks[:100]
    assert session.prefill(toks).reused_tokens > 0  # a new request: the flag is clear again


def test_the_restored_window_probe_runs_to_its_end_under_a_cancel(llama_session: Any) -> None:
    """The restored-window probe must leave the live sequence as it was, so a cancel waits for
    it; after it the cancel is in force again."""
    session = llama_session
    text = (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text("utf-8")
    toks = session.tokenize(text)
    n = session._model.n_swa + 100
    session.reset()
    session.prefill(toks[:n])
    session.cancel()
    assert session._measure_restored_window() in (True, False)  # measured, not cancelled
    assert session.resident_tokens == toks[:n]
    with pytest.raises(CancelledError):
        session._decode_chunk(toks[n:n + 16], n, logits_last=True, stage="test")
    assert session.resident_tokens == toks[:n]
    assert session.prefill(toks[:n + 16]).reused_tokens > 0  # a new request clears it

"""How a completion is decoded: greedy from the prefilled prompt, at most a number of tokens,
up to a deadline, and for a single-line completion up to the first newline. The server's
completion service and the completion eval's window-only baseline decode alike."""

from __future__ import annotations

import math
import time

from engine import Session


def decode_completion(session: Session, max_tokens: int, single_line: bool,
                      deadline: float = math.inf) -> tuple[str, int, bool]:
    """The text of at most ``max_tokens`` tokens, how many were decoded, and whether the
    ``deadline`` (a ``time.perf_counter()`` reading) cut it short; for ``single_line`` it
    stops at the first newline."""
    pieces: list[str] = []
    stream = session.stream(max_tokens=max_tokens)
    n = 0
    cut = False
    try:
        for piece in stream:
            n += 1
            pieces.append(piece)
            if single_line and "\n" in piece:
                break
            if time.perf_counter() >= deadline:
                cut = n < max_tokens
                break
    finally:
        stream.close()
    return "".join(pieces), n, cut

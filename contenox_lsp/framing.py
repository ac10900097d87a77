"""The LSP base protocol's framing: ``Content-Length`` headers, then a JSON body.

A sans-IO parser: bytes go in (``feed``), whole JSON values or framing problems come out, so
the same code serves stdio and TCP and is fuzzed without a process. What pygls's reader does
not do and this one does:

- header names are case-insensitive (``content-length`` is the same header);
- a message is capped (``MAX_MESSAGE_BYTES``): a larger ``Content-Length`` is a problem
  reported to the caller, never an allocation or a crash;
- a bad header block (no, non-numeric, negative or zero length; a line that is no header)
  or a body that is not JSON (a length too short) resynchronises at the next
  ``Content-Length`` header found in the stream, and a length too long gives back what it
  swallowed after the JSON value, so the following valid messages are answered instead of
  being lost;
- lines are bounded (``MAX_HEADER_LINE``): junk without a newline cannot grow the buffer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

#: The largest body accepted. A whole-file didOpen of a large source file fits many times.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: The longest header line kept while looking for its end.
MAX_HEADER_LINE = 8192

_HEADER = re.compile(rb"^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*?)[ \t]*$")
_LENGTH_NAME = re.compile(rb"content-length[ \t]*:", re.IGNORECASE)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_DECODER = json.JSONDecoder()
#: Bytes kept from dropped junk: enough to hold a split "Content-Length:" token.
_KEEP = 32


@dataclass(frozen=True)
class Message:
    """One decoded JSON body (any JSON value: the envelope is checked by the caller).
    ``text_error`` is set when a string in it is no valid Unicode (an unpaired UTF-16
    surrogate escape, which ``json`` accepts): such a message is answered, not handled."""

    value: Any
    text_error: str | None = None


@dataclass(frozen=True)
class Problem:
    """Something in the stream that is not a message. ``kind`` is stable (for counting and
    for reporting each kind once); ``answer`` says whether JSON-RPC wants an error response
    (a body that is not JSON, a message over the size cap) rather than a log line."""

    kind: str
    detail: str
    answer: bool = False


class FrameParser:
    def __init__(self, max_body: int = MAX_MESSAGE_BYTES) -> None:
        self.max_body = max_body
        self._buf = bytearray()
        self._headers: dict[bytes, bytes] = {}
        self._body_length: int | None = None

    def feed(self, data: bytes) -> list[Message | Problem]:
        """Take the next bytes of the stream; everything they complete, in stream order."""
        self._buf += data
        out: list[Message | Problem] = []
        while True:
            if self._body_length is not None:
                if len(self._buf) < self._body_length:
                    return out
                body = bytes(self._buf[: self._body_length])
                del self._buf[: self._body_length]
                self._body_length = None
                out += self._decode(body)
                continue
            line = self._next_line(out)
            if line is None:
                return out
            self._header_line(line, out)

    def _next_line(self, out: list[Message | Problem]) -> bytes | None:
        end = self._buf.find(b"\n")
        if end < 0:
            if len(self._buf) > MAX_HEADER_LINE:
                # Junk without a newline: drop it, keeping what may start the next header.
                start = _next_header(self._buf)
                drop = start if start is not None else len(self._buf) - _KEEP
                out.append(Problem("junk", f"dropped {drop} bytes without a header"))
                del self._buf[:drop]
            return None
        line = bytes(self._buf[:end]).rstrip(b"\r")
        del self._buf[: end + 1]
        return line

    def _header_line(self, line: bytes, out: list[Message | Problem]) -> None:
        if not line:
            if self._headers:  # the blank line that ends a header block
                self._end_of_headers(out)
            return  # a stray blank line between messages: keep-alive, ignore
        m = _HEADER.match(line)
        start = _next_header(line)
        if m is not None and not (not self._headers and start is not None):
            self._headers[m.group(1).lower()] = m.group(2)
            return
        # Not a header: a body whose length was wrong, or garbage. Drop it up to the next
        # "Content-Length:" on the line, if any (the next message's header), and start over.
        self._headers = {}
        out.append(Problem("junk", f"dropped {start or len(line)} bytes that are no header"))
        if start is not None:
            self._buf[:0] = line[start:] + b"\r\n"

    def _end_of_headers(self, out: list[Message | Problem]) -> None:
        headers, self._headers = self._headers, {}
        raw = headers.get(b"content-length")
        if raw is None:
            out.append(Problem("bad-header", "a header block without Content-Length"))
            return
        if not raw.isdigit() or int(raw) == 0:
            out.append(Problem("bad-header", f"invalid Content-Length {raw[:40]!r}"))
            return
        length = int(raw)
        if length > self.max_body:
            out.append(Problem("too-large", f"a message of {length} bytes exceeds the limit "
                                            f"of {self.max_body} bytes", answer=True))
            return  # its body is dropped as junk up to the next header
        self._body_length = length

    def _decode(self, body: bytes) -> list[Message | Problem]:
        text = body.decode("utf-8", errors="surrogateescape")
        try:
            value, end = _DECODER.raw_decode(text, _skip_space(text))
        except (ValueError, RecursionError) as exc:
            # A length too short: the rest of the body follows as junk and resynchronises.
            start = _next_header(body)
            if start is not None:
                self._buf[:0] = body[start:]
            return [Problem("parse-error", f"the body is not JSON: {exc}", answer=True)]
        out: list[Message | Problem] = []
        rest = text[end:]
        if rest.strip():
            # A length too long swallowed the start of what follows: give it back.
            self._buf[:0] = rest.encode("utf-8", errors="surrogateescape")
            out.append(Problem("bad-length", f"Content-Length {len(body)} runs {len(rest)} "
                                             "characters past the end of the body"))
        try:
            text[:end].encode("utf-8")
        except UnicodeEncodeError:
            return [*out, Problem("parse-error", "the body is not UTF-8", answer=True)]
        if _SURROGATE_ESCAPE.search(body) and _has_lone_surrogate(value):
            return [*out, Message(value, "a string holds an unpaired UTF-16 surrogate escape")]
        return [*out, Message(value)]


def _skip_space(text: str) -> int:
    return len(text) - len(text.lstrip(" \t\r\n"))


def _next_header(data: bytes | bytearray) -> int | None:
    """Where a "Content-Length:" header starts in ``data`` after its first byte (the first
    byte is never a resync point: dropping nothing would loop)."""
    m = _LENGTH_NAME.search(data, 1)
    return None if m is None else m.start()


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
    return False

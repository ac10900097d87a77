"""The framing layer (``contenox_lsp.framing``): every valid message survives any fault next
to it and any split of the stream into reads. Property tests (hypothesis, seeded, bounded)
plus the reproducers of the fuzz run, byte for byte."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contenox_lsp.framing import MAX_HEADER_LINE, FrameParser, Message, Problem

FUZZ = settings(max_examples=300, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def frame(body: bytes, length: Any = None, name: bytes = b"Content-Length") -> bytes:
    n = len(body) if length is None else length
    return name + b": " + str(n).encode() + b"\r\n\r\n" + body


def good(i: int) -> bytes:
    return frame(json.dumps({"jsonrpc": "2.0", "id": i, "method": "contenox/status"}).encode())


def parse(stream: bytes, cuts: list[int] | None = None) -> list[Message | Problem]:
    parser = FrameParser()
    out: list[Message | Problem] = []
    last = 0
    for cut in [*sorted(set(cuts or [])), len(stream)]:
        out += parser.feed(stream[last:cut])
        last = cut
    return out


def good_ids(items: list[Message | Problem]) -> list[int]:
    return [m.value["id"] for m in items if isinstance(m, Message)
            and isinstance(m.value, dict) and isinstance(m.value.get("id"), int)]


BAD_BODY = b'{"jsonrpc": "2.0", "method": "bad", "params": {"x": "' + b"y" * 40 + b'"}}'

#: The fuzz run's framing reproducers: each left the stream desynchronised or killed the server.
REPRODUCERS = {
    "huge length": frame(BAD_BODY, 99999999999999),
    "too short": frame(BAD_BODY, 10),
    "too long": frame(BAD_BODY, len(BAD_BODY) + 25),
    "non-numeric": frame(BAD_BODY, "abc"),
    "negative": frame(BAD_BODY, -5),
    "zero": frame(BAD_BODY, 0),
    "missing": b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + BAD_BODY,
    "no header at all": BAD_BODY,
    "junk line": b"hello there\r\n",
    "long junk without newline": b"x" * (3 * MAX_HEADER_LINE),
    "not json": frame(b"{not json at all}"),
    "not utf-8": frame(b'{"id": "\xff\xfe"}'),
}


@pytest.mark.parametrize("fault", sorted(REPRODUCERS))
def test_the_next_messages_are_read_after_a_fault(fault: str) -> None:
    out = parse(REPRODUCERS[fault] + good(1) + good(2))
    assert good_ids(out) == [1, 2]
    assert any(isinstance(p, Problem) for p in out)


def test_header_names_are_case_insensitive() -> None:
    body = json.dumps({"id": 7}).encode()
    out = parse(frame(body, name=b"content-length") + frame(body, name=b"CONTENT-LENGTH"))
    assert good_ids(out) == [7, 7]
    assert not any(isinstance(p, Problem) for p in out)


def test_a_message_over_the_cap_is_an_answered_problem_not_an_allocation() -> None:
    parser = FrameParser(max_body=1000)
    out = parser.feed(frame(b"x" * 2000) + good(3))
    problems = [p for p in out if isinstance(p, Problem)]
    assert problems[0].kind == "too-large" and problems[0].answer
    assert good_ids(out) == [3]


def test_unpaired_surrogates_are_flagged_and_pairs_are_not() -> None:
    lone = frame(b'{"id": 1, "q": "\\ud800x"}')
    pair = frame(b'{"id": 2, "q": "\\ud83d\\ude00"}')
    out = parse(lone + pair)
    assert [m.text_error is not None for m in out if isinstance(m, Message)] == [True, False]


def test_a_nested_jsonrpc_key_is_just_data() -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 4, "method": "contenox/status",
                       "params": {"jsonrpc": "2.0", "textDocument": {"jsonrpc": "x"}}})
    (msg,) = parse(frame(body.encode()))
    assert isinstance(msg, Message) and msg.value["params"]["textDocument"] == {"jsonrpc": "x"}


# -- properties ---------------------------------------------------------------------------------

#: Junk never spells the header name: a fault that *is* a well-formed frame header is a
#: frame, and may legitimately swallow the bytes after it.
junk = st.binary(max_size=300).filter(lambda b: b"content-length" not in b.lower())
faults = st.one_of(
    st.sampled_from(sorted(REPRODUCERS)).map(REPRODUCERS.__getitem__),
    junk,
    st.integers(1, 200).map(lambda extra: frame(BAD_BODY, len(BAD_BODY) + extra)),
    st.integers(1, len(BAD_BODY) - 1).map(lambda n: frame(BAD_BODY, n)),
)


@FUZZ
@given(items=st.lists(st.one_of(st.none(), faults), min_size=1, max_size=12),
       cuts=st.lists(st.integers(0, 6000), max_size=30))
def test_every_valid_message_survives_faults_and_any_split(
    items: list[bytes | None], cuts: list[int]
) -> None:
    stream = b""
    expected = []
    for i, item in enumerate(items):
        if item is None:
            stream += good(i)
            expected.append(i)
        else:
            stream += item
    # A length too long waits for its bytes; enough trailing messages always arrive.
    tail = list(range(1000, 1010))
    stream += b"".join(good(i) for i in tail)
    ids = good_ids(parse(stream, cuts))
    assert ids[: len(expected)] == expected
    assert set(ids) <= set(expected) | set(tail)


@FUZZ
@given(data=st.binary(max_size=4000))
def test_arbitrary_bytes_never_raise_and_keep_the_buffer_bounded(data: bytes) -> None:
    parser = FrameParser(max_body=2000)
    parser.feed(data)
    parser.feed(good(1))
    assert len(parser._buf) <= 2000 + MAX_HEADER_LINE + len(good(1))

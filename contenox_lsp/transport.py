"""The read loops over stdio and TCP, on the framing layer (``framing.FrameParser``).

They replace pygls's ``run_async`` reader, which matches only ``Content-Length`` spelled
exactly so, has no size cap, loses the stream after a bad header, and passes every nested
JSON object through the message hook (so a params key named ``jsonrpc`` broke a request).
Here each body is decoded once and only the top-level value is a message.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, BinaryIO

from contenox_lsp.framing import FrameParser, Message

if TYPE_CHECKING:
    from contenox_lsp.protocol import ContenoxProtocol

logger = logging.getLogger(__name__)

READ_CHUNK = 65536

ReadFn = Callable[[], Awaitable[bytes]]


async def read_loop(stop: threading.Event, read: ReadFn, protocol: ContenoxProtocol) -> None:
    """Feed the stream to the protocol until EOF or ``stop``."""
    parser = FrameParser()
    while not stop.is_set():
        data = await read()
        if not data:
            break
        for item in parser.feed(data):
            if isinstance(item, Message):
                protocol.receive(item)
            else:
                protocol.framing_problem(item)


def stdin_reader(stdin: BinaryIO, pool: ThreadPoolExecutor) -> ReadFn:
    """Reads whatever is available (up to a chunk) without waiting for more."""
    read1 = getattr(stdin, "read1", None) or stdin.read

    def read() -> Awaitable[bytes]:
        return asyncio.get_running_loop().run_in_executor(pool, read1, READ_CHUNK)

    return read


def stream_reader(reader: asyncio.StreamReader) -> ReadFn:
    def read() -> Awaitable[bytes]:
        return reader.read(READ_CHUNK)

    return read

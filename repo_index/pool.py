"""Index file contents, in this process or in a pool of worker processes.

Workers read the files themselves (only paths cross the process boundary on the way in, plain
symbol tuples on the way out). Small jobs stay in-process: starting interpreters and loading
grammars costs more than parsing a few hundred files.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from repo_index import languages
from repo_index.extract import extract
from repo_index.safe_read import read_regular_file

log = logging.getLogger(__name__)

# Outcome of one file (``FileResult[1]``).
PARSED = "parsed"  # read and indexed
SAME = "same"  # content digest equals the expected one: cached symbols still valid
TEXT = "text"  # readable, no grammar: listed by name only
BINARY = "binary"
UNREADABLE = "unreadable"

BINARY_SNIFF = 8192
BINARY_DETAIL = "NUL byte in the first 8 KiB"

# (path, language name or None, digest the caller already has or None)
Job = tuple[str, str | None, str | None]
# (path, status, size, mtime_ns, digest, grammar_key, symbols_plain | None, detail)
FileResult = tuple[str, str, int, int, str, str, Any, str]


def content_digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def is_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_SNIFF]


def index_file(job: Job) -> FileResult:
    path, lang_name, expected = job
    try:
        # The walker saw a regular file; it may have become a FIFO since (never block).
        data, mtime = read_regular_file(path, max_bytes=1 << 31)
    except OSError as exc:
        return (path, UNREADABLE, 0, 0, "", "", None, exc.strerror or str(exc))
    size = len(data)
    if is_binary(data):
        return (path, BINARY, size, mtime, "", "", None, BINARY_DETAIL)
    digest = content_digest(data)
    if lang_name is None:
        return (path, TEXT, size, mtime, digest, "", None, "")
    lang = languages.load(lang_name)
    if expected is not None and expected == digest:
        return (path, SAME, size, mtime, digest, lang.grammar_key, None, "")
    try:
        tree = lang.parser().parse(data)
        plain = extract(lang, data, tree).to_plain()
    except Exception as exc:  # a grammar bug on one file must not sink the build
        log.warning("cannot index %s: %s", path, exc)
        return (path, UNREADABLE, size, mtime, digest, "", None, f"parse failed: {exc}")
    return (path, PARSED, size, mtime, digest, lang.grammar_key, plain, "")


def index_batch(jobs: Sequence[Job]) -> list[FileResult]:
    return [index_file(job) for job in jobs]


def _worker_init() -> None:
    # Inside an LSP server fd 1 is the JSON-RPC channel: a stray write from a worker (a
    # library warning, a debug print) must never reach it.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _batches(jobs: Sequence[Job], sizes: Sequence[int], target: int) -> list[list[Job]]:
    out: list[list[Job]] = []
    current: list[Job] = []
    total = 0
    for job, size in zip(jobs, sizes, strict=True):
        current.append(job)
        total += size
        if total >= target:
            out.append(current)
            current, total = [], 0
    if current:
        out.append(current)
    return out


def run(
    jobs: Sequence[Job],
    sizes: Sequence[int],
    workers: int,
    progress: Callable[[int], None] | None = None,
    batch_bytes: int = 256 * 1024,
) -> Iterator[FileResult]:
    """Index ``jobs`` (``sizes`` are their byte sizes, for batching); ``workers`` <= 1 runs
    in-process. ``progress`` gets the number of files done so far."""
    done = 0
    if workers <= 1:
        for job in jobs:
            yield index_file(job)
            done += 1
            if progress is not None:
                progress(done)
        return
    batches = _batches(jobs, sizes, batch_bytes)
    # spawn, not fork: the host process (an LSP server) has threads and open pipes that a
    # forked child must not inherit.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_init) as pool:
        pending: set[Future[list[FileResult]]] = {
            pool.submit(index_batch, batch) for batch in batches
        }
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                results = future.result()
                yield from results
                done += len(results)
                if progress is not None:
                    progress(done)

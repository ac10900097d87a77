"""The persistent index cache: one file per workspace, written atomically.

Format: an 8-byte magic, then a body of records (each a 4-byte length and its ``marshal``
bytes) — a header ``{"format", "roots", "state"}``, one ``(path, entry)`` per file, and
``None`` to end — then a 32-byte BLAKE2b checksum of the body. Only plain data is
marshalled (dicts, tuples, strings, ints, bytes): nothing executable is ever loaded from disk.
A file that fails any check is discarded (logged), never fatal. The records are written one
file at a time, so saving the index of a 20,000-file workspace never holds its whole
serialised form (it did: ~300 MiB at once).

An entry is ``(size, mtime_ns, content_digest, language, grammar_key, status,
symbols_plain | None)``. A file's entry is reused when its size and mtime match (or, failing
that, its content digest) and the grammar key (grammar wheel version, tree-sitter version,
query text, extractor version) of its language is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import marshal
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, BinaryIO

log = logging.getLogger(__name__)

FORMAT = 4
MAGIC = b"CXRIDX\x00\x04"
_SUM = 32
_LEN = 4  # bytes of a record's length


def cache_file(cache_dir: str, roots: Sequence[str]) -> str:
    key = json.dumps([FORMAT, sys.byteorder, list(roots)])
    name = hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]
    return os.path.join(cache_dir, f"repo-index-{name}.bin")


class IndexCache:
    def __init__(self, cache_dir: str, roots: Sequence[str]) -> None:
        self.roots = list(roots)
        self.path = cache_file(cache_dir, roots)

    def load(self) -> dict[str, Any] | None:
        """The cached payload, or None when missing or unusable (a corrupt file is removed)."""
        try:
            with open(self.path, "rb") as fh:
                blob = fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read repo index cache %s: %s", self.path, exc)
            return None
        try:
            payload = self._check(blob)
        except Exception as exc:  # anything wrong with the file means: start over
            log.warning("discarding corrupt repo index cache %s: %s", self.path, exc)
            self.discard()
            return None
        return payload

    def _check(self, blob: bytes) -> dict[str, Any]:
        if not blob.startswith(MAGIC):
            raise ValueError("not a repo index cache (bad magic)")
        if len(blob) < len(MAGIC) + _SUM:
            raise ValueError("truncated")
        body = memoryview(blob)[len(MAGIC) : len(blob) - _SUM]
        if hashlib.blake2b(body, digest_size=_SUM).digest() != blob[len(blob) - _SUM :]:
            raise ValueError("checksum mismatch")
        records = _records(body)
        header = next(records, None)
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ValueError("unknown format")
        if header.get("roots") != self.roots:
            raise ValueError("cache belongs to other workspace folders")
        if not isinstance(header.get("state"), dict):
            raise ValueError("malformed payload")
        files: dict[str, Any] = {}
        for record in records:
            if record is None:
                break
            if not isinstance(record, tuple) or len(record) != 2:
                raise ValueError("malformed file record")
            files[record[0]] = record[1]
        else:
            raise ValueError("no end mark")
        return {"format": FORMAT, "roots": self.roots, "files": files,
                "state": header["state"]}

    def save(self, files: Iterable[tuple[str, tuple[Any, ...]]], state: dict[str, Any]) -> bool:
        """Write ``files`` (``(path, entry)`` pairs, produced one at a time) and ``state``."""
        folder = os.path.dirname(self.path)
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".repo-index-", dir=folder)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(MAGIC)
                    body = _HashingWriter(fh)
                    body.dump({"format": FORMAT, "roots": self.roots, "state": state})
                    for path, entry in files:
                        body.dump((path, entry))
                    body.dump(None)
                    fh.write(body.digest())
                os.replace(tmp, self.path)  # readers see the old or the new file, never half
            except BaseException:
                os.unlink(tmp)
                raise
        except ValueError as exc:  # an unmarshallable value is a bug, but must not be fatal
            log.error("cannot serialise repo index cache: %s", exc)
            return False
        except OSError as exc:
            log.warning("cannot write repo index cache %s: %s", self.path, exc)
            return False
        return True

    def discard(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot remove repo index cache %s: %s", self.path, exc)


def _records(body: memoryview) -> Iterator[Any]:
    """The body's records in order (each: its length, then its ``marshal`` bytes)."""
    offset, end = 0, len(body)
    while offset < end:
        if offset + _LEN > end:
            raise ValueError("truncated record")
        size = int.from_bytes(body[offset : offset + _LEN], "little")
        offset += _LEN
        if offset + size > end:
            raise ValueError("truncated record")
        yield marshal.loads(body[offset : offset + size])
        offset += size


class _HashingWriter:
    """Marshals records to a file, hashing what it writes (the body's checksum)."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self._hash = hashlib.blake2b(digest_size=_SUM)

    def dump(self, value: Any) -> None:
        data = marshal.dumps(value, 4)
        size = len(data).to_bytes(_LEN, "little")
        self._hash.update(size)
        self._hash.update(data)
        self._fh.write(size)
        self._fh.write(data)

    def digest(self) -> bytes:
        return self._hash.digest()

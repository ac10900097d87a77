"""The persistent index cache: one file per workspace, written atomically.

Format: an 8-byte magic, a 32-byte BLAKE2b checksum of the payload, then the payload, which is
``marshal`` of plain data only (dicts, tuples, strings, ints, bytes): nothing executable is
ever loaded from disk. A file that fails any check is discarded (logged), never fatal.

Payload: ``{"format", "roots", "files": {path: entry}, "state": {...}}`` where an entry is
``(size, mtime_ns, content_digest, language, grammar_key, status, symbols_plain | None)``.
A file's entry is reused when its size and mtime match (or, failing that, its content digest)
and the grammar key (grammar wheel version, tree-sitter version, query text, extractor
version) of its language is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import marshal
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

FORMAT = 3
MAGIC = b"CXRIDX\x00\x03"
_SUM = 32


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
        body = memoryview(blob)[len(MAGIC) + _SUM :]
        expected = blob[len(MAGIC) : len(MAGIC) + _SUM]
        if hashlib.blake2b(body, digest_size=_SUM).digest() != expected:
            raise ValueError("checksum mismatch")
        payload = marshal.loads(body)
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise ValueError("unknown format")
        if payload.get("roots") != self.roots:
            raise ValueError("cache belongs to other workspace folders")
        if not isinstance(payload.get("files"), dict) or not isinstance(payload.get("state"), dict):
            raise ValueError("malformed payload")
        return payload

    def save(self, files: dict[str, tuple[Any, ...]], state: dict[str, Any]) -> bool:
        payload = {"format": FORMAT, "roots": self.roots, "files": files, "state": state}
        try:
            body = marshal.dumps(payload, 4)
        except ValueError as exc:  # an unmarshallable value is a bug, but must not be fatal
            log.error("cannot serialise repo index cache: %s", exc)
            return False
        digest = hashlib.blake2b(body, digest_size=_SUM).digest()
        folder = os.path.dirname(self.path)
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".repo-index-", dir=folder)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(MAGIC)
                    fh.write(digest)
                    fh.write(body)
                os.replace(tmp, self.path)  # readers see the old or the new file, never half
            except BaseException:
                os.unlink(tmp)
                raise
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

"""The snapshot store: class-first admission and eviction, LRU within a class, a huge log never
evicting the repo prefix, corrupt-index recovery, 0600 files, and find_best on assemblies."""

from __future__ import annotations

import logging
import stat
from pathlib import Path
from typing import Any

import pytest
from test_contextasm_support import (
    LlamaVocabTokenizer,
    load_tokenizer,
    make_identity,
    sample_inputs,
)

from contextasm import (
    Assembly,
    CacheClass,
    SegmentKind,
    SnapshotKey,
    SnapshotStore,
    TokenCache,
    assemble,
    explain,
)

HIGHEST, HIGH, MEDIUM, LOW = CacheClass.HIGHEST, CacheClass.HIGH, CacheClass.MEDIUM, CacheClass.LOW


@pytest.fixture(scope="session")
def gemma() -> LlamaVocabTokenizer:
    return load_tokenizer()


def writer(size: int, marker: bytes = b"x") -> Any:
    def write(path: Path) -> None:
        path.write_bytes(marker * size)

    return write


def key(name: str, n: int = 100) -> SnapshotKey:
    return SnapshotKey("identity", f"prefix-{name}", n)


def names(store: SnapshotStore) -> set[str]:
    return {e.key.prefix_hash.removeprefix("prefix-") for e in store.entries()}


def test_put_within_budget_and_files_are_private(tmp_path: Path):
    store = SnapshotStore(tmp_path / "snaps", 1000)
    entry = store.put(key("a"), HIGHEST, writer(300), label="A-D")
    assert entry is not None and entry.size_bytes == 300 and entry.label == "A-D"
    assert entry.path.read_bytes() == b"x" * 300
    assert stat.S_IMODE(entry.path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "snaps" / "index.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "snaps").stat().st_mode) == 0o700
    assert store.total_bytes() == 300
    assert store.get(key("a")) is not None
    # A second store object on the same directory (another process) sees it.
    assert names(SnapshotStore(tmp_path / "snaps", 1000)) == {"a"}


def test_eviction_takes_the_lowest_class_first_then_lru(tmp_path: Path):
    store = SnapshotStore(tmp_path, 1000)
    store.put(key("high-old"), HIGH, writer(200))
    store.put(key("low-old"), LOW, writer(200))
    store.put(key("medium"), MEDIUM, writer(200))
    store.put(key("low-new"), LOW, writer(200))
    store.put(key("high-new"), HIGH, writer(200))
    assert store.total_bytes() == 1000
    # A high entry needing 400 bytes: both lows go (oldest first), nothing of higher rank.
    store.put(key("h3"), HIGH, writer(350))
    assert names(store) == {"high-old", "medium", "high-new", "h3"}
    # Another one: the medium goes next, then the least recently used high.
    store.touch(key("high-old"))  # now high-new is the least recently used high
    store.put(key("h4"), HIGH, writer(400))
    assert names(store) == {"high-old", "h3", "h4"}
    assert {f"prefix-{n}" for n in ("low-old", "low-new", "medium", "high-new")} <= (
        store.evicted_prefix_hashes()
    )


def test_a_huge_log_never_evicts_the_repo_prefix(tmp_path: Path):
    store = SnapshotStore(tmp_path, 10_000)
    store.put(key("system-tools-instructions", 4000), HIGHEST, writer(3000))
    store.put(key("repo-map-prefix", 9000), HIGH, writer(5000))
    store.put(key("old-turn"), LOW, writer(1500))
    # 4000 bytes of log: evicting the other low entry is not enough → refused, nothing lost.
    assert store.put(key("big-log", 12_000), LOW, writer(4000)) is None
    assert names(store) == {"system-tools-instructions", "repo-map-prefix", "old-turn"}
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())
    assert not any("big-log" in p.name for p in tmp_path.iterdir())
    # A log that fits by evicting the old low turn is admitted.
    assert store.put(key("small-log", 12_000), LOW, writer(1500)) is not None
    assert names(store) == {"system-tools-instructions", "repo-map-prefix", "small-log"}
    # A medium diff prefix may evict lows, never the high/highest prefixes.
    assert store.put(key("diff", 11_000), MEDIUM, writer(3000)) is None
    assert store.put(key("diff", 11_000), MEDIUM, writer(2000)) is not None
    assert names(store) == {"system-tools-instructions", "repo-map-prefix", "diff"}


def test_larger_than_budget_is_refused(tmp_path: Path):
    store = SnapshotStore(tmp_path, 100)
    assert store.put(key("x"), HIGHEST, writer(101)) is None
    assert store.entries() == []


def test_existing_key_is_not_rewritten(tmp_path: Path):
    store = SnapshotStore(tmp_path, 1000)
    first = store.put(key("a"), HIGH, writer(10))
    calls: list[Path] = []

    def write(path: Path) -> None:
        calls.append(path)
        path.write_bytes(b"new")

    again = store.put(key("a"), HIGH, write)
    assert calls == [] and again is not None and first is not None
    assert again.use_seq > first.use_seq and again.path.read_bytes() == b"x" * 10


def test_writer_failure_leaves_nothing_behind(tmp_path: Path):
    store = SnapshotStore(tmp_path, 1000)

    def failing(path: Path) -> None:
        path.write_bytes(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        store.put(key("a"), HIGH, failing)
    assert store.entries() == []
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".snap"] == []

    def nothing(path: Path) -> None:
        pass

    with pytest.raises(Exception) as err:
        store.put(key("b"), HIGH, nothing)
    assert getattr(err.value, "code", None) == "snapshot_store"


def test_corrupt_index_is_rebuilt_empty(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    store = SnapshotStore(tmp_path, 1000)
    entry = store.put(key("a"), HIGH, writer(10))
    assert entry is not None
    (tmp_path / "index.json").write_text("{ this is not json")
    with caplog.at_level(logging.WARNING, logger="contextasm.store"):
        assert SnapshotStore(tmp_path, 1000).entries() == []
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    assert not entry.path.exists()  # the orphaned snapshot file went with it
    # And the store works again afterwards.
    assert store.put(key("b"), HIGH, writer(10)) is not None
    assert names(store) == {"b"}


def test_tampered_file_name_counts_as_corrupt(tmp_path: Path):
    store = SnapshotStore(tmp_path, 1000)
    store.put(key("a"), HIGH, writer(10))
    index = (tmp_path / "index.json").read_text()
    (tmp_path / "index.json").write_text(index.replace("prefix-a-100.snap", "../../etc/passwd"))
    assert store.entries() == []


def test_missing_snapshot_file_drops_its_entry(tmp_path: Path):
    store = SnapshotStore(tmp_path, 1000)
    a = store.put(key("a"), HIGH, writer(10))
    store.put(key("b"), HIGH, writer(10))
    assert a is not None
    a.path.unlink()
    assert names(store) == {"b"}


def _assemble(tok: Any, ident: Any, inputs: Any) -> Assembly:
    return assemble(inputs, tok, ident, max_new_tokens=256, token_cache=TokenCache())


def test_find_best_picks_the_longest_valid_prefix(tmp_path: Path, gemma: LlamaVocabTokenizer):
    ident = make_identity(gemma, block_size=16)
    asm = _assemble(gemma, ident, sample_inputs())
    store = SnapshotStore(tmp_path, 1 << 20)
    instr_end = asm.segment(SegmentKind.INSTRUCTIONS).token_end
    for n in (instr_end, asm.stable_end, asm.user_start):
        store.put(asm.prefix_key(n), asm.prefix_class(n), writer(100))
    # Same tokens under another profile: never a candidate.
    other = make_identity(gemma, block_size=16, n_ctx=4096)
    other_asm = _assemble(gemma, other, sample_inputs())
    store.put(other_asm.prefix_key(other_asm.n_tokens), HIGHEST, writer(100))

    best = store.find_best(ident, asm)
    assert best is not None and best.key.n_tokens == asm.user_start
    assert best.cache_class is LOW  # the A–H prefix contains a stale log
    assert store.get(asm.prefix_key(asm.stable_end)).cache_class is HIGH
    assert store.get(asm.prefix_key(instr_end)).cache_class is HIGHEST

    # After a diff edit only the stable prefix (A–F) is still valid.
    edited = _assemble(gemma, ident, sample_inputs(diff="diff --git a/x b/x\n+new\n"))
    best = store.find_best(ident, edited, touch=False)
    assert best is not None and best.key.n_tokens == edited.stable_end == asm.stable_end
    # After a system prompt edit nothing is.
    assert (
        store.find_best(ident, _assemble(gemma, ident, sample_inputs(system_prompt="Hi"))) is None
    )
    # An identity that is not the assembly's finds nothing.
    assert store.find_best(other, asm) is None


def test_find_best_touch_updates_recency(tmp_path: Path, gemma: LlamaVocabTokenizer):
    ident = make_identity(gemma)
    asm = _assemble(gemma, ident, sample_inputs())
    store = SnapshotStore(tmp_path, 1 << 20)
    store.put(asm.prefix_key(asm.stable_end), HIGH, writer(10))
    store.put(key("other"), HIGH, writer(10))
    before = store.get(asm.prefix_key(asm.stable_end))
    assert store.find_best(ident, asm, touch=False) == before
    touched = store.find_best(ident, asm)
    assert touched is not None and before is not None and touched.use_seq > before.use_seq


def test_explain_marks_evicted_prefixes(tmp_path: Path, gemma: LlamaVocabTokenizer):
    ident = make_identity(gemma)
    asm = _assemble(gemma, ident, sample_inputs())
    store = SnapshotStore(tmp_path, 1000)
    store.put(asm.prefix_key(asm.user_start), LOW, writer(600))
    store.put(key("big-high"), HIGH, writer(600))  # evicts the low A–H snapshot
    assert store.find_best(ident, asm) is None
    rows = explain(asm, 0, evicted=store.evicted_prefix_hashes()).rows
    by_label = {r.label: r.status for r in rows}
    user = asm.segment(SegmentKind.USER)
    assert user is not None
    last_before_user = asm.segments[user.index - 1].label  # the question's code
    assert by_label[last_before_user] == "evicted"
    assert by_label["system"] == "new" and by_label["user"] == "new"


def test_temp_file_of_a_killed_writer_is_swept_and_a_live_one_kept(tmp_path: Path):
    """A snapshot writer killed with SIGKILL mid-save leaves its flock-ed temp file behind;
    the next store access removes it, while a writer still running keeps its file."""
    import signal
    import subprocess
    import sys
    import textwrap

    # The engine's writer (engine.snapshot_file.write_snapshot), stopped mid-write.
    child = textwrap.dedent(f"""
        import fcntl, os, sys, tempfile, time
        fd, tmp = tempfile.mkstemp(dir={str(tmp_path)!r}, prefix=".x.snap.", suffix=".tmp")
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"half a snapshot")
        print(tmp, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        leftover = Path(proc.stdout.readline().strip())
        assert leftover.is_file()
        store = SnapshotStore(tmp_path, 1 << 20)
        store.entries()  # a store access sweeps
        assert leftover.is_file(), "a live writer's temp file must be kept"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        store.entries()
        assert not leftover.exists()
    finally:
        proc.kill()
        proc.wait(30)

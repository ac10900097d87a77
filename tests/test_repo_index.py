"""repo_index: definitions per language, the repo map and its digest, the cache, determinism,
and indexing real code (this repository, a copy of stdlib ``json/`` and ``email/``)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from repo_index import REGISTRY, RepoIndex, estimate_tokens, languages
from repo_index.cache import MAGIC, cache_file
from repo_index.graph import SymbolGraph

FIXTURES = Path(__file__).parent / "fixtures" / "repo_index" / "langs"
REPO = Path(__file__).resolve().parents[1]
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_index(root: Path | list[Path], cache: Path, **kwargs: object) -> RepoIndex:
    roots = root if isinstance(root, list) else [root]
    idx = RepoIndex(roots, cache_dir=cache, **kwargs)  # type: ignore[arg-type]
    idx.build()
    return idx


# ---------------------------------------------------------------- languages

EXPECTED = {
    "sample.py": {
        ("MAX_ITEMS", "constant"),
        ("Shape", "class"),
        ("area", "method"),
        ("Circle", "class"),
        ("__init__", "method"),
        ("total_area", "function"),
        ("helper", "function"),
        ("make_registry", "function"),
    },
    "sample.js": {
        ("LIMIT", "constant"),
        ("Animal", "class"),
        ("speak", "method"),
        ("Dog", "class"),
        ("makeDog", "function"),
        ("arrow", "function"),
    },
    "sample.ts": {
        ("Greeter", "interface"),
        ("greet", "method"),
        ("Id", "type"),
        ("Color", "enum"),
        ("Polite", "class"),
        ("build", "function"),
    },
    "sample.tsx": {("Props", "interface"), ("Button", "function"), ("Panel", "function")},
    "sample.go": {
        ("Pi", "constant"),
        ("Shape", "type"),
        ("Circle", "type"),
        ("Area", "method"),
        ("NewCircle", "function"),
    },
    "sample.rs": {
        ("LIMIT", "constant"),
        ("Shape", "interface"),
        ("Square", "class"),
        ("area", "method"),
        ("Kind", "class"),
        ("classify", "function"),
        ("square", "macro"),
    },
    "Sample.java": {
        ("Sample", "class"),
        ("Visitor", "interface"),
        ("visit", "method"),
        ("Node", "class"),
        ("Mode", "enum"),
        ("compute", "method"),
        ("helper", "method"),
    },
    "sample.c": {
        ("BUFFER_SIZE", "macro"),
        ("point", "class"),
        ("point_t", "type"),
        ("distance", "function"),
        ("square", "function"),
    },
    "sample.cpp": {
        ("geo", "module"),
        ("Shape", "class"),
        ("area", "method"),
        ("Rect", "class"),
        ("main", "function"),
    },
}

EXPECTED_REFS = {
    "sample.py": {"Circle", "OrderedDict", "Shape", "area", "helper"},
    "sample.js": {"Animal", "Dog", "helper"},
    "sample.ts": {"Greeter", "Id", "Polite"},
    "sample.tsx": {"Button", "Props"},
    "sample.go": {"Circle"},
    "sample.rs": {"Kind", "Shape", "Square", "area"},
    "Sample.java": {"Node", "helper"},
    "sample.c": {"point_t", "square"},
    "sample.cpp": {"Rect", "Shape", "area"},
}


@pytest.fixture(scope="module")
def lang_index(tmp_path_factory: pytest.TempPathFactory) -> RepoIndex:
    root = tmp_path_factory.mktemp("langs")
    for f in FIXTURES.iterdir():
        shutil.copy(f, root / f.name)
    write(root / "notes.txt", "no grammar for this one\n")
    return make_index(root, tmp_path_factory.mktemp("cache"))


def test_every_registered_language_loads_its_wheel_queries() -> None:
    names = {spec.name for spec in REGISTRY}
    assert {"python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp"} <= names
    for spec in REGISTRY:
        loaded = languages.load(spec.name)
        assert loaded.definition_patterns > 0
        assert loaded.reference_patterns > 0
        assert any(q.endswith(":tags.scm") and not q.startswith("local:") for q in spec.queries)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_definitions_per_language(lang_index: RepoIndex, name: str) -> None:
    path = Path(lang_index.roots[0]) / name
    found = {(s.name, s.kind) for s in lang_index.file_symbols(path)}
    assert EXPECTED[name] <= found, EXPECTED[name] - found
    refs = {
        ref
        for ref in EXPECTED_REFS[name]
        if any(loc.path == str(path) for loc in lang_index.references(ref))
    }
    assert refs == EXPECTED_REFS[name]


def test_signatures_and_containers(lang_index: RepoIndex) -> None:
    root = Path(lang_index.roots[0])
    (area,) = [
        s
        for s in lang_index.definitions("area")
        if s.path == str(root / "sample.py") and s.container == "Circle"
    ]
    # no comment, no body, whitespace collapsed
    assert area.signature == "def area(self) -> float:"
    assert area.kind == "method"
    (helper,) = [s for s in lang_index.definitions("helper") if s.path.endswith(".py")]
    assert helper.container == "total_area"
    m = lang_index.repo_map(4000).text
    assert "  def total_area(shapes: list[Shape]) -> float:\n" in m
    assert "def helper" not in m  # local to a function: not part of the outline
    assert "export function build(id: Id): Greeter" in m
    assert "typedef struct point point_t;" in m
    assert "notes.txt\n" in m  # no grammar: listed by name


# ---------------------------------------------------------------- map digest behaviour

MODULE_A = '''"""Module a."""


class Engine:
    """Runs things."""

    def start(self, speed: int) -> None:
        # warm up
        self.speed = speed
        helper(speed)

    def stop(self) -> None:
        self.speed = 0


def helper(value: int) -> int:
    return value * 2
'''

MODULE_B = """from a import Engine, helper


def run() -> None:
    e = Engine()
    e.start(helper(3))
"""


@pytest.fixture()
def small(tmp_path: Path) -> tuple[Path, RepoIndex]:
    root = tmp_path / "ws"
    write(root / "a.py", MODULE_A)
    write(root / "b.py", MODULE_B)
    return root, make_index(root, tmp_path / "cache")


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _position(text: str, offset: int) -> dict[str, int]:
    line_start = text.rfind("\n", 0, offset) + 1
    return {"line": text.count("\n", 0, offset), "character": _utf16(text[line_start:offset])}


def edit(idx: RepoIndex, path: Path, old: str, new: str) -> str:
    """Replace ``old`` by ``new`` in the buffer of ``path`` the way an editor reports it:
    didOpen (full text) first, then one LSP change in UTF-16 positions."""
    key = str(path)
    if key not in _BUFFERS:
        _BUFFERS[key] = path.read_text()
        idx.update(path, _BUFFERS[key])
    current = _BUFFERS[key]
    assert old in current
    at = current.index(old)
    updated = current[:at] + new + current[at + len(old) :]
    change = {
        "range": {"start": _position(current, at), "end": _position(current, at + len(old))},
        "text": new,
    }
    idx.update(path, updated, [change])
    _BUFFERS[key] = updated
    return updated


_BUFFERS: dict[str, str] = {}


def _current(path: Path) -> str:
    return _BUFFERS.get(str(path)) or path.read_text()


@pytest.fixture(autouse=True)
def _clear_buffers() -> Iterator[None]:
    _BUFFERS.clear()
    yield
    _BUFFERS.clear()


def test_body_comment_and_whitespace_edits_keep_the_digest(small: tuple[Path, RepoIndex]) -> None:
    root, idx = small
    before = idx.repo_map(1024)
    assert "def start(self, speed: int) -> None:" in before.text
    a = root / "a.py"
    edit(idx, a, "self.speed = speed", "self.speed = speed + 1")  # body
    assert idx.repo_map(1024).digest == before.digest
    edit(idx, a, "# warm up", "# warm up first, then go")  # comment in a body
    assert idx.repo_map(1024).digest == before.digest
    edit(idx, a, "        self.speed = 0", "        self.speed  =  0  ")  # whitespace
    assert idx.repo_map(1024).digest == before.digest
    edit(idx, a, '"""Runs things."""', '"""Runs things, fast."""')  # docstring
    assert idx.repo_map(1024) == before


def test_signature_rename_and_new_definition_change_the_digest(
    small: tuple[Path, RepoIndex],
) -> None:
    root, idx = small
    a = root / "a.py"
    digests = {idx.repo_map(1024).digest}
    edit(idx, a, "def start(self, speed: int)", "def start(self, speed: float)")
    m = idx.repo_map(1024)
    assert "def start(self, speed: float) -> None:" in m.text
    digests.add(m.digest)
    edit(idx, a, "def stop(self)", "def halt(self)")
    m = idx.repo_map(1024)
    assert "def halt(self) -> None:" in m.text and "def stop" not in m.text
    digests.add(m.digest)
    edit(idx, a, "def helper(", "def brand_new() -> None:\n    pass\n\n\ndef helper(")
    m = idx.repo_map(1024)
    assert "def brand_new() -> None:" in m.text
    digests.add(m.digest)
    assert len(digests) == 4


def test_adding_and_deleting_a_file_change_the_digest(small: tuple[Path, RepoIndex]) -> None:
    root, idx = small
    before = idx.repo_map(1024)
    c = write(root / "c.py", "def extra_tool(x):\n    return x\n")
    assert idx.update(c) is True  # file-watcher event: read from disk
    added = idx.repo_map(1024)
    assert "c.py:\n  def extra_tool(x):\n" in added.text
    assert str(c) in added.files
    assert added.digest != before.digest
    c.unlink()
    assert idx.remove(c) is True
    assert idx.repo_map(1024).digest == before.digest
    assert idx.remove(c) is False


def test_rename_on_disk_is_remove_plus_update(small: tuple[Path, RepoIndex]) -> None:
    root, idx = small
    a = root / "a.py"
    moved = root / "pkg" / "engine.py"
    moved.parent.mkdir()
    a.rename(moved)
    idx.remove(a)
    idx.update(moved)
    (engine,) = idx.definitions("Engine")
    assert engine.path == str(moved)
    assert "pkg/engine.py:" in idx.repo_map(1024).text
    idx.remove(root / "pkg")  # a deleted folder takes its files along
    assert idx.definitions("Engine") == []


def test_update_from_buffer_then_revert_to_disk(small: tuple[Path, RepoIndex]) -> None:
    root, idx = small
    a = root / "a.py"
    before = idx.repo_map(1024)
    edit(idx, a, "def stop(self)", "def pause(self)")
    assert idx.definitions("pause")
    idx.update(a)  # buffer closed without saving: back to what is on disk
    assert not idx.definitions("pause")
    assert idx.repo_map(1024).digest == before.digest


# ---------------------------------------------------------------- incremental == full re-index


def test_incremental_updates_equal_a_fresh_index(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root / "a.py", MODULE_A)
    write(root / "b.py", MODULE_B)
    idx = make_index(root, tmp_path / "c1")
    idx.repo_map(1024)  # the graph exists, so the edits below update it incrementally
    a = root / "a.py"
    edit(idx, a, "helper(speed)", "helper(speed)  # ünïcødé 😀 comment")
    edit(idx, a, "        helper(speed)", "        helper(speed)\n        extra_call(speed)")
    edit(idx, a, "# ünïcødé 😀 comment", "# 😀😀")
    edit(idx, a, "def stop(self) -> None:", "def stop(self, force: bool = False) -> None:")
    edit(idx, a, "    return value * 2", "    return value * 3  # é")
    final = _current(a)
    assert idx.stats.region + idx.stats.incremental == 5
    # the incrementally maintained graph equals one built from scratch
    graph = idx._ensure_graph()
    rebuilt = SymbolGraph()
    for path in idx.files():
        rebuilt.set_file(path, idx._records[path].symbols)
    assert (graph.nested, graph.outline, graph.used) == (
        rebuilt.nested,
        rebuilt.outline,
        rebuilt.used,
    )
    a.write_text(final)
    fresh = make_index(root, tmp_path / "c2")
    assert idx.file_symbols(a) == fresh.file_symbols(a)
    assert idx.references("helper") == fresh.references("helper")
    assert idx.repo_map(2048, stable=False) == fresh.repo_map(2048, stable=False)


# ---------------------------------------------------------------- cache


def test_cache_hit_after_restart_parses_nothing(
    small: tuple[Path, RepoIndex], tmp_path: Path
) -> None:
    root, first = small
    assert first.stats.parsed == 2
    again = make_index(root, tmp_path / "cache")
    assert again.stats.parsed == 0
    assert again.stats.reused == 2
    assert again.repo_map(1024) == first.repo_map(1024)
    # touched but identical content: recognised by digest, still not parsed
    a = root / "a.py"
    os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 10**9))
    third = make_index(root, tmp_path / "cache")
    assert third.stats.parsed == 0
    # changed content: exactly that file is parsed
    write(a, MODULE_A.replace("def stop", "def halt"))
    fourth = make_index(root, tmp_path / "cache")
    assert fourth.stats.parsed == 1
    assert fourth.definitions("halt")


def test_saved_buffer_is_a_cache_hit_after_restart(
    small: tuple[Path, RepoIndex], tmp_path: Path
) -> None:
    root, idx = small
    a = root / "a.py"
    text = edit(idx, a, "def stop(self)", "def halt(self)")
    a.write_text(text)  # the user saves; the index still holds the buffer's symbols
    idx.save()
    again = make_index(root, tmp_path / "cache")
    assert again.stats.parsed == 0  # recognised by content digest despite the new mtime
    assert again.definitions("halt")


def test_grammar_change_invalidates_cached_files(
    small: tuple[Path, RepoIndex], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = small
    monkeypatch.setattr(languages, "_keys", {"python": "another-grammar"})
    again = make_index(root, tmp_path / "cache")
    assert again.stats.parsed == 2


@pytest.mark.parametrize("damage", ["garbage", "truncate", "flip", "empty"])
def test_corrupt_cache_is_discarded_and_rebuilt(
    small: tuple[Path, RepoIndex], tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    root, first = small
    path = Path(cache_file(str(tmp_path / "cache"), [str(root)]))
    blob = path.read_bytes()
    assert blob.startswith(MAGIC)
    if damage == "garbage":
        path.write_bytes(b"\x00not a cache at all" * 50)
    elif damage == "truncate":
        path.write_bytes(blob[: len(blob) // 2])
    elif damage == "flip":
        path.write_bytes(blob[:-10] + bytes([blob[-10] ^ 0xFF]) + blob[-9:])
    else:
        path.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="repo_index.cache"):
        again = make_index(root, tmp_path / "cache")
    assert "corrupt repo index cache" in caplog.text
    assert again.stats.parsed == 2
    assert again.repo_map(1024) == first.repo_map(1024)
    # and the rebuilt cache works again
    assert make_index(root, tmp_path / "cache").stats.parsed == 0


def test_unwritable_cache_dir_is_not_fatal(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root / "a.py", MODULE_A)
    blocker = write(tmp_path / "not_a_dir", "a file where the cache folder should be")
    idx = make_index(root, blocker / "sub")
    assert idx.definitions("Engine")


def test_hysteresis_state_survives_a_restart(small: tuple[Path, RepoIndex], tmp_path: Path) -> None:
    root, idx = small
    first = idx.repo_map(60)
    idx.save()
    again = make_index(root, tmp_path / "cache")
    assert again._selection == idx._selection
    assert again.repo_map(60) == first


# ---------------------------------------------------------------- determinism, pool, progress


def test_two_builds_give_byte_identical_maps(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    shutil.copytree(STDLIB / "json", root / "json")
    first = make_index(root, tmp_path / "c1")
    second = make_index(root, tmp_path / "c2", workers=2, parallel_min_files=1)
    for budget in (256, 1024, 4096):
        a, b = first.repo_map(budget), second.repo_map(budget)
        assert a.text.encode() == b.text.encode()
        assert a.digest == b.digest
    for path in first.files():
        assert first.file_symbols(path) == second.file_symbols(path)


_DIGEST_SCRIPT = """
import sys
from repo_index import RepoIndex
idx = RepoIndex([sys.argv[1]], cache_dir=sys.argv[2])
idx.build()
print(idx.repo_map(1024).digest, idx.repo_map(300, focus_idents=["scanstring"]).digest)
"""


def test_maps_are_identical_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    """Nothing depends on str hashing or on what happened earlier in the process."""
    root = tmp_path / "ws"
    shutil.copytree(STDLIB / "json", root / "json")
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        done = subprocess.run(
            [sys.executable, "-c", _DIGEST_SCRIPT, str(root), str(tmp_path / f"cache{seed}")],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        outputs.add(done.stdout)
    assert len(outputs) == 1


def test_pool_build_reports_progress(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    shutil.copytree(STDLIB / "json", root / "json")
    calls: list[tuple[int, int, str]] = []
    idx = RepoIndex(
        [root],
        lambda done, total, message: calls.append((done, total, message)),
        cache_dir=tmp_path / "cache",
        workers=2,
        parallel_min_files=1,
    )
    report = idx.build()
    assert report.parsed == len([p for p in idx.files() if p.endswith(".py")])
    totals = {total for _, total, _ in calls if total}
    assert totals
    done = [d for d, total, _ in calls if total == max(totals)]
    assert done == sorted(done) and done[-1] == max(totals)


def test_nothing_is_written_to_stdout(
    small: tuple[Path, RepoIndex], capfd: pytest.CaptureFixture[str]
) -> None:
    root, idx = small
    capfd.readouterr()
    edit(idx, root / "a.py", "def stop(self)", "def halt(self)")
    idx.repo_map(512)
    idx.build()
    idx.save()
    assert capfd.readouterr().out == ""


# ---------------------------------------------------------------- the map


def test_budget_is_respected_with_a_custom_token_counter(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    shutil.copytree(STDLIB / "email", root / "email")
    idx = make_index(root, tmp_path / "cache")

    def words(text: str) -> int:
        return len(text.split()) + text.count("\n")

    for budget in (0, 50, 300, 2000):
        m = idx.repo_map(budget, count_tokens=words)
        assert m.tokens == words(m.text) <= budget
        assert m.budget == budget
    assert idx.repo_map(0).text == ""
    big = idx.repo_map(4096)
    small_map = idx.repo_map(256)
    assert estimate_tokens(big.text) <= 4096 and len(big.text) > 3 * len(small_map.text)


def test_focus_pulls_files_and_identifiers_in(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    shutil.copytree(STDLIB / "email", root / "email")
    idx = make_index(root, tmp_path / "cache")
    plain = idx.repo_map(300, stable=False)
    target = root / "email" / "quoprimime.py"
    assert "email/quoprimime.py:" not in plain.text
    focused = idx.repo_map(300, focus_files=[target], stable=False)
    assert "email/quoprimime.py:" in focused.text
    assert str(target) in focused.files
    by_ident = idx.repo_map(300, focus_idents=["header_length"], stable=False)
    assert "def header_length(" in by_ident.text


def test_hysteresis_keeps_the_map_through_small_rank_changes(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    for i in range(12):
        write(
            root / f"mod{i:02d}.py",
            "".join(f"def func_{i}_{j}(value):\n    return value + {j}\n\n\n" for j in range(4)),
        )
    callers = "".join(f"from mod{i:02d} import func_{i}_0\n" for i in range(12))
    callers += "\n\ndef main():\n" + "".join(f"    func_{i}_0(1)\n" for i in range(12))
    write(root / "main.py", callers)
    idx = make_index(root, tmp_path / "cache")
    before = idx.repo_map(120)
    main = root / "main.py"
    # one more call to something not shown: ranks move a little, the map must not
    shown = before.text
    hidden = next(
        f"func_{i}_{j}" for i in range(12) for j in range(1, 4) if f"def func_{i}_{j}(" not in shown
    )
    mod = hidden.split("_")[1]
    edit(idx, main, "def main():\n", f"def main():\n    {hidden}(2)\n")
    edit(idx, main, f"from mod{int(mod):02d} import", f"from mod{int(mod):02d} import {hidden},")
    assert idx.repo_map(120).digest == before.digest
    # a decisive change of importance does get through
    body = "".join(f"    {hidden}({k})\n" for k in range(40))
    for i in range(12):
        path = root / f"mod{i:02d}.py"
        edit(idx, path, "    return value + 0\n", "    return value + 0\n\n\ndef use():\n" + body)
    assert f"def {hidden}(value):" in idx.repo_map(120).text


def test_multiple_roots_show_prefixed_relative_paths(tmp_path: Path) -> None:
    one = write(tmp_path / "one" / "pkg" / "a.py", "def alpha():\n    pass\n")
    two = write(tmp_path / "two" / "b.py", "from pkg.a import alpha\n\ndef beta():\n    alpha()\n")
    idx = make_index([tmp_path / "one", tmp_path / "two"], tmp_path / "cache")
    m = idx.repo_map(1024)
    assert "one/pkg/a.py:\n  def alpha():\n" in m.text
    assert "two/b.py:\n  def beta():\n" in m.text
    assert set(m.files) == {str(one), str(two)}
    assert [loc.path for loc in idx.references("alpha")] == [str(two), str(two)]


# ---------------------------------------------------------------- real code


def test_index_this_repository(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for name in ("repo_index", "contextasm", "engine", "contenox_lsp", "tests", "bench"):
        if (REPO / name).is_dir():
            shutil.copytree(
                REPO / name,
                root / name,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.gguf", "out", "*.png"),
                symlinks=True,
            )
    idx = make_index(root, tmp_path / "cache")
    (cls,) = [s for s in idx.definitions("RepoIndex") if s.kind == "class"]
    assert cls.path == str(root / "repo_index" / "index.py")
    assert cls.signature == "class RepoIndex:"
    methods = {s.name for s in idx.file_symbols(cls.path) if s.container == "RepoIndex"}
    assert {"build", "update", "remove", "repo_map", "definitions", "references"} <= methods
    assert any(loc.path.endswith("test_repo_index.py") for loc in idx.references("RepoIndex"))
    m = idx.repo_map(1024, focus_files=[cls.path])
    assert m.tokens <= 1024
    # personalised: most of what is shown is the package the focus file lives in
    shown = [line for line in m.text.splitlines() if not line.startswith(" ")]
    assert sum(line.startswith("repo_index/") for line in shown) > len(shown) / 2


def test_index_stdlib_json_and_email(tmp_path: Path) -> None:
    root = tmp_path / "lib"
    shutil.copytree(STDLIB / "json", root / "json")
    shutil.copytree(STDLIB / "email", root / "email")
    idx = make_index(root, tmp_path / "cache")
    (decoder,) = [s for s in idx.definitions("JSONDecoder") if s.kind == "class"]
    assert decoder.path == str(root / "json" / "decoder.py")
    signatures = {s.signature for s in idx.file_symbols(decoder.path)}
    assert "def raw_decode(self, s, idx=0):" in signatures
    users = {Path(loc.path).name for loc in idx.references("JSONDecodeError")}
    assert {"__init__.py", "decoder.py"} <= users
    assert {s.name for s in idx.definitions("Message")} == {"Message"}
    m = idx.repo_map(1024)
    assert 900 <= m.tokens <= 1024
    assert "email/message.py:" in m.text
    # every shown line is a path header or an indented signature, nothing else
    for line in m.text.splitlines():
        assert line.endswith(":") or line.startswith("  ") or "/" in line


@pytest.mark.parametrize("body", ["not a tuple", "no end mark", "truncated record"])
def test_a_forged_cache_with_a_valid_checksum_is_discarded(
    small: tuple[Path, RepoIndex], tmp_path: Path, caplog: pytest.LogCaptureFixture, body: str
) -> None:
    """The checksum only catches damage; a file written to pass it must still be plain,
    complete records, or it is discarded and the index rebuilt from the workspace."""
    import hashlib
    import marshal

    root, first = small
    path = Path(cache_file(str(tmp_path / "cache"), [str(root)]))

    def record(value: object) -> bytes:
        data = marshal.dumps(value, 4)
        return len(data).to_bytes(4, "little") + data

    header = record({"format": 4, "roots": [str(root)], "state": {}})
    records = {"not a tuple": header + record(["a", "list"]) + record(None),
               "no end mark": header,
               "truncated record": header + record(("x", ()))[:-3]}[body]
    path.write_bytes(MAGIC + records + hashlib.blake2b(records, digest_size=32).digest())
    with caplog.at_level(logging.WARNING, logger="repo_index.cache"):
        again = make_index(root, tmp_path / "cache")
    assert "corrupt repo index cache" in caplog.text
    assert again.stats.parsed == 2 and again.repo_map(1024) == first.repo_map(1024)

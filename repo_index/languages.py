"""The language registry: file extensions → tree-sitter grammar + tags queries.

Adding a language is one ``LanguageSpec`` entry in ``REGISTRY`` (see README.md). Queries come
from the grammar wheel's own ``queries/tags.scm``; a small local file in ``repo_index/queries/``
adds what a wheel's query leaves out (mostly references, which ranking needs).
"""

from __future__ import annotations

import builtins
import hashlib
import importlib
import importlib.metadata
import importlib.resources
import io
import logging
import os
import re
import threading
from dataclasses import dataclass, field

import tree_sitter as ts

log = logging.getLogger(__name__)

# Bump when extraction output changes for the same grammar + query (invalidates the cache).
EXTRACTOR_VERSION = "9"


@dataclass(frozen=True)
class LanguageSpec:
    """One registry entry. ``queries`` name query files as ``"<module>:<file>"``, where
    ``<module>`` is a grammar wheel's module (file read from its ``queries/`` folder) or
    ``"local"`` (file read from ``repo_index/queries/``); they are concatenated in order."""

    name: str
    extensions: tuple[str, ...]
    module: str
    queries: tuple[str, ...]
    entry: str = "language"
    # Node types that own the signature of a definition captured below them (C declarators:
    # the tag is on ``function_declarator``, the return type lives on ``function_definition``).
    signature_owners: frozenset[str] = frozenset()
    # Byte sequences that start a comment; a signature containing one is cleaned of comments.
    comment_markers: tuple[bytes, ...] = (b"//", b"/*")
    # Names every file of the language uses without meaning the project's definition of
    # the same name (builtins like Python's ``str``): ranking gives their uses little weight.
    common_names: frozenset[str] = frozenset()


_C_OWNERS = frozenset({"function_definition", "declaration", "field_declaration"})

# Python: builtins plus the methods of builtin types and files (``d.get``, ``s.join`` are
# tagged as references to any project function called ``get`` or ``join``).
_PYTHON_BUILTINS = frozenset(
    name
    for scope in (builtins, dict, list, set, str, bytes, int, float, tuple, io.IOBase)
    for name in dir(scope)
    if not name.startswith("_")
) | {"self", "cls", "read", "write"}
_JS_GLOBALS = frozenset(
    "Array Boolean Date Error JSON Map Math Number Object Promise Proxy Reflect RegExp Set "
    "String Symbol TypeError WeakMap console document window require module exports "
    "parseInt parseFloat isNaN setTimeout clearTimeout setInterval fetch push pop map filter "
    "forEach reduce slice splice join split then catch keys values entries log error toString "
    "get set has add delete apply call bind".split()
)
_GO_BUILTINS = frozenset(
    "append cap clear close complex copy delete imag len make max min new panic print println "
    "real recover bool byte complex64 complex128 error float32 float64 int int8 int16 int32 "
    "int64 rune string uint uint8 uint16 uint32 uint64 uintptr any comparable Error String "
    "Errorf Sprintf Printf Println New".split()
)
_RUST_COMMON = frozenset(
    "Some None Ok Err Box Vec String Option Result Self new clone unwrap expect into from "
    "iter map collect push len is_empty as_ref to_string format println vec assert assert_eq "
    "write writeln panic Default Debug Clone".split()
)
_JAVA_COMMON = frozenset(
    "String Object Integer Long Boolean Double List Map Set ArrayList HashMap Exception "
    "RuntimeException Override System println get set add put size equals hashCode "
    "toString".split()
)
_C_COMMON = frozenset(
    "printf fprintf sprintf snprintf malloc calloc realloc free memcpy memmove memset strlen "
    "strcmp strncmp strcpy strncpy assert size_t uint8_t uint16_t uint32_t uint64_t int8_t "
    "int16_t int32_t int64_t FILE NULL std string vector map begin end size push_back".split()
)

REGISTRY: tuple[LanguageSpec, ...] = (
    LanguageSpec(
        "python",
        (".py", ".pyi", ".pyw"),
        "tree_sitter_python",
        ("tree_sitter_python:tags.scm", "local:python-tags.scm"),
        comment_markers=(b"#",),
        common_names=_PYTHON_BUILTINS,
    ),
    LanguageSpec(
        "javascript",
        (".js", ".mjs", ".cjs", ".jsx"),
        "tree_sitter_javascript",
        ("tree_sitter_javascript:tags.scm", "local:javascript-tags.scm"),
        common_names=_JS_GLOBALS,
    ),
    # The TypeScript wheel's tags.scm only adds TS-specific patterns on top of JavaScript's.
    LanguageSpec(
        "typescript",
        (".ts", ".mts", ".cts"),
        "tree_sitter_typescript",
        (
            "tree_sitter_javascript:tags.scm",
            "tree_sitter_typescript:tags.scm",
            "local:typescript-tags.scm",
        ),
        entry="language_typescript",
        common_names=_JS_GLOBALS,
    ),
    LanguageSpec(
        "tsx",
        (".tsx",),
        "tree_sitter_typescript",
        (
            "tree_sitter_javascript:tags.scm",
            "tree_sitter_typescript:tags.scm",
            "local:typescript-tags.scm",
        ),
        entry="language_tsx",
        common_names=_JS_GLOBALS,
    ),
    LanguageSpec(
        "go",
        (".go",),
        "tree_sitter_go",
        ("tree_sitter_go:tags.scm", "local:go-tags.scm"),
        common_names=_GO_BUILTINS,
    ),
    LanguageSpec(
        "rust",
        (".rs",),
        "tree_sitter_rust",
        ("tree_sitter_rust:tags.scm", "local:rust-tags.scm"),
        common_names=_RUST_COMMON,
    ),
    LanguageSpec(
        "java",
        (".java",),
        "tree_sitter_java",
        ("tree_sitter_java:tags.scm", "local:java-tags.scm"),
        common_names=_JAVA_COMMON,
    ),
    # ``.h`` goes to C: the C++ grammar misparses C that uses C++ keywords as identifiers.
    LanguageSpec(
        "c",
        (".c", ".h"),
        "tree_sitter_c",
        ("tree_sitter_c:tags.scm", "local:c-tags.scm"),
        signature_owners=_C_OWNERS,
        common_names=_C_COMMON,
    ),
    LanguageSpec(
        "cpp",
        (".cc", ".cpp", ".cxx", ".c++", ".hh", ".hpp", ".hxx", ".h++", ".ipp", ".inl"),
        "tree_sitter_cpp",
        ("tree_sitter_cpp:tags.scm", "local:cpp-tags.scm"),
        signature_owners=_C_OWNERS,
        common_names=_C_COMMON,
    ),
)

_BY_EXTENSION: dict[str, LanguageSpec] = {ext: spec for spec in REGISTRY for ext in spec.extensions}
_BY_NAME: dict[str, LanguageSpec] = {spec.name: spec for spec in REGISTRY}

_REF_RE = re.compile(r"@reference\.")


def spec_for_path(path: str) -> LanguageSpec | None:
    """The registry entry for a file name, or None when no grammar handles it."""
    return _BY_EXTENSION.get(os.path.splitext(path)[1].lower())


def spec_by_name(name: str) -> LanguageSpec:
    return _BY_NAME[name]


def common_names_for(path: str) -> frozenset[str]:
    spec = spec_for_path(path)
    return spec.common_names if spec is not None else frozenset()


@dataclass
class LoadedLanguage:
    """A compiled grammar and its tags query (one per process).

    The wheel and local query files are compiled as one query so that a single traversal of
    the tree finds both definitions and references. ``def_keys[i]`` is the
    ``definition.<kind>`` capture of pattern ``i`` (None for a reference pattern); patterns
    tagged neither way (e.g. Go's bare ``package_clause``) are disabled."""

    spec: LanguageSpec
    language: ts.Language
    query: ts.Query
    def_keys: list[str | None]
    grammar_key: str
    disabled_patterns: int = 0
    _parser: ts.Parser | None = field(default=None, repr=False)

    @property
    def definition_patterns(self) -> int:
        return sum(1 for key in self.def_keys if key is not None)

    @property
    def reference_patterns(self) -> int:
        return self.query.pattern_count - self.definition_patterns - self.disabled_patterns

    def parser(self) -> ts.Parser:
        # Parsers are cheap but not free; one per language per process is plenty because
        # callers hold the index lock (or run in a single-threaded worker process).
        if self._parser is None:
            self._parser = ts.Parser(self.language)
        return self._parser


_loaded: dict[str, LoadedLanguage] = {}
_load_lock = threading.Lock()


def _read_query(ref: str) -> str:
    module, _, filename = ref.partition(":")
    package = "repo_index" if module == "local" else module
    return (importlib.resources.files(package) / "queries" / filename).read_text("utf-8")


def _distribution_version(module: str) -> str:
    try:
        return importlib.metadata.version(module.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_DEF_KEY = re.compile(r"@(definition\.[\w.]+)")


def _compile(language: ts.Language, source: str) -> tuple[ts.Query, list[str | None], int]:
    """The tags query, the definition capture of each pattern, and how many patterns were
    disabled for being neither definitions nor references."""
    query = ts.Query(language, source)
    raw = source.encode("utf-8")
    def_keys: list[str | None] = []
    disabled = 0
    for i in range(query.pattern_count):
        text = raw[query.start_byte_for_pattern(i) : query.end_byte_for_pattern(i)].decode()
        found = _DEF_KEY.search(text)
        def_keys.append(found.group(1) if found else None)
        if found is None and not _REF_RE.search(text):
            query.disable_pattern(i)
            disabled += 1
    # Only @name and the definition nodes are read back: fewer Node objects per match.
    for i in range(query.capture_count):
        capture = query.capture_name(i)
        if capture != "name" and not capture.startswith("definition."):
            query.disable_capture(capture)
    return query, def_keys, disabled


_keys: dict[str, str] = {}


def _query_source(spec: LanguageSpec) -> str:
    return "\n".join(_read_query(q) for q in spec.queries)


def grammar_key(name: str) -> str:
    """Identity of what extraction for ``name`` depends on: grammar wheel versions,
    tree-sitter version, query text and extractor version. Cheap: nothing is compiled, so
    the cache can be validated without loading grammars."""
    key = _keys.get(name)
    if key is None:
        spec = _BY_NAME[name]
        modules = sorted({spec.module, *(q.partition(":")[0] for q in spec.queries)} - {"local"})
        material = [spec.name, spec.entry, ts.__version__, EXTRACTOR_VERSION]
        material += [f"{m}=={_distribution_version(m)}" for m in modules]
        material.append(_query_source(spec))
        key = hashlib.sha256("\0".join(material).encode("utf-8")).hexdigest()[:16]
        _keys[name] = key
    return key


def load(name: str) -> LoadedLanguage:
    """Load (once per process) the grammar and queries of the language called ``name``."""
    loaded = _loaded.get(name)
    if loaded is not None:
        return loaded
    with _load_lock:
        loaded = _loaded.get(name)
        if loaded is None:
            loaded = _load(_BY_NAME[name])
            _loaded[name] = loaded
    return loaded


def _load(spec: LanguageSpec) -> LoadedLanguage:
    module = importlib.import_module(spec.module)
    language = ts.Language(getattr(module, spec.entry)())
    query, def_keys, disabled = _compile(language, _query_source(spec))
    key = grammar_key(spec.name)
    log.debug("loaded %s grammar (key %s)", spec.name, key)
    return LoadedLanguage(spec, language, query, def_keys, key, disabled)

"""Language server helpers without a server: option parsing, params, paths, code answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from contenox_lsp import params as P
from contenox_lsp.handlers.code_actions import (
    clean_docstring,
    def_line_at,
    first_code_block,
    signature_end,
)
from contenox_lsp.options import ServerOptions, merge_initialization_options
from contenox_lsp.paths import OutsideWorkspaceError, safe_path
from contenox_lsp.pins import PinSet, pin_for
from contenox_lsp.protocol import negotiate_encoding
from contextasm.manifest import common_prefix_length


def test_initialization_options_bad_values_keep_defaults() -> None:
    opts, warnings = merge_initialization_options(
        ServerOptions(),
        {"debounceMs": 50, "prefillOnIdle": "yes", "maxTokens": True, "nope": 1,
         "repoMapTokens": -1, "logLevel": "loud"},
    )
    assert opts.debounce_ms == 50
    assert opts.prefill_on_idle is True and opts.max_tokens == 256
    assert opts.repo_map_tokens is None and opts.log_level == "info"
    assert opts.context_budget().map_tokens == 1024  # the map's share of the one budget
    assert len(warnings) == 5
    same, warnings = merge_initialization_options(ServerOptions(), ["not", "an", "object"])
    assert same == ServerOptions() and len(warnings) == 1


def test_params_validation_messages() -> None:
    with pytest.raises(JsonRpcInvalidParams, match=r"params\.question"):
        P.req_str({"question": ""}, "question", "params")
    with pytest.raises(JsonRpcInvalidParams, match="before"):
        P.range_({"start": {"line": 3, "character": 0}, "end": {"line": 1, "character": 0}},
                 "params.range")
    with pytest.raises(JsonRpcInvalidParams, match="integer"):
        P.opt_int({"maxTokens": 1.5}, "maxTokens", "params", 1, 10)
    assert P.progress_token({"t": "abc"}, "t", "params") == "abc"
    with pytest.raises(JsonRpcInvalidParams):
        P.progress_token({"t": [1]}, "t", "params")


def test_safe_path_resolves_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("x = 1\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("s")
    (root / "escape").symlink_to(tmp_path)
    assert safe_path((root / "pkg" / "a.py").as_uri(), [root]) == (root / "pkg" / "a.py")
    assert safe_path((root / "pkg" / "new.py").as_uri(), [root]).name == "new.py"
    for uri in ((root / "escape" / "secret.txt").as_uri(), outside.as_uri(),
                "file:///etc/passwd", "untitled:Untitled-1"):
        with pytest.raises(OutsideWorkspaceError):
            safe_path(uri, [root])


def test_encoding_negotiation() -> None:
    caps = types.ClientCapabilities(general=types.GeneralClientCapabilities(
        position_encodings=[types.PositionEncodingKind.Utf32, types.PositionEncodingKind.Utf8]))
    assert negotiate_encoding(caps) == "utf-8"
    caps = types.ClientCapabilities(general=types.GeneralClientCapabilities(
        position_encodings=[types.PositionEncodingKind.Utf32]))
    assert negotiate_encoding(caps) == "utf-16"
    assert negotiate_encoding(types.ClientCapabilities()) == "utf-16"


def test_pins_are_line_granular_and_ordered(tmp_path: Path) -> None:
    pins = PinSet()
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    rng = types.Range(start=types.Position(line=4, character=3),
                      end=types.Position(line=9, character=0))
    assert pins.add(pin_for(b, b.as_uri(), None))
    assert pins.add(pin_for(a, a.as_uri(), rng))
    assert not pins.add(pin_for(a, a.as_uri(), rng))
    listed = pins.list()
    assert [p.path for p in listed] == [a, b]
    assert (listed[0].start_line, listed[0].end_line) == (4, 8)  # col 0 of line 9 excluded
    assert pins.remove(a, rng) == 1 and pins.remove(b, None) == 1 and len(pins) == 0


def test_code_answer_helpers() -> None:
    answer = "Here you go:\n```python\nx = 1\ny = 2\n```\nDone."
    assert first_code_block(answer) == "x = 1\ny = 2\n"
    assert first_code_block("no code") is None
    assert clean_docstring('"""Return the sum."""') == "Return the sum."
    assert clean_docstring("```\nAdds numbers.\n```") == "Adds numbers."
    src = "class A:\n    def f(\n        self, x,\n    ) -> int:  # note\n        return x\n"
    assert def_line_at(src, 4) == (1, "    ")
    assert signature_end(src, 1) == 3
    assert def_line_at("x = 1\n", 0) is None


def test_common_prefix() -> None:
    a = list(range(1000))
    assert common_prefix_length(a, a) == 1000
    assert common_prefix_length(a, [*a[:700], -1]) == 700
    assert common_prefix_length([], a) == 0


def test_the_worker_calls_its_before_job_hook_first_and_runs_the_job_if_it_fails() -> None:
    import contextlib

    from contenox_lsp.runtime.worker import EngineWorker, Job, Priority

    session = object()
    order: list[str] = []

    def hook(s: object, job: Job) -> None:
        assert s is session
        order.append(f"hook {job.label}")
        if job.label == "second":
            raise RuntimeError("the hook failed")

    worker = EngineWorker(lambda: contextlib.nullcontext(session),  # type: ignore[arg-type]
                          before_job=hook)  # type: ignore[arg-type]
    worker.start()
    try:
        for label in ("first", "second"):
            job = worker.submit(lambda _s, j: order.append(f"run {j.label}") or j.label,
                                priority=Priority.USER, label=label)
            assert job.future.result(30) == label
        assert order == ["hook first", "run first", "hook second", "run second"]
    finally:
        worker.stop()


def test_worker_is_idle_before_a_job_settles() -> None:
    """Whoever awaits a job answers the editor at once: by then `busy_with` must be None, or
    a `contenox/status` sent right after the response would still report the job running."""
    import contextlib
    import threading

    from contenox_lsp.runtime.worker import EngineWorker, Priority

    worker = EngineWorker(lambda: contextlib.nullcontext(object()))
    worker.start()
    seen: list[object] = []
    done = threading.Event()
    try:
        for outcome in ("ok", "fail"):
            def fn(_session: object, _job: object, outcome: str = outcome) -> str:
                if outcome == "fail":
                    raise ValueError("boom")
                return outcome

            job = worker.submit(fn, priority=Priority.USER, label=outcome)
            job.future.add_done_callback(lambda _f: (seen.append(worker.busy_with), done.set()))
            assert done.wait(30)
            done.clear()
        assert seen == [None, None]
    finally:
        worker.stop()

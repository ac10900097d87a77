"""Next-edit suggestions on the warm session.

A request renders the model's next-edit layout (``layout``) from the repository context the
completion prompt uses, a window of the file frozen when it was taken, the edit history and the
region around the cursor; prefills it on the live sequence (reusing the longest cached prefix
of the live sequence or a parked branch); decodes the rewritten region; and turns it into one
minimal replacement (``edit``). Like a completion it runs at user priority, never waits behind
an ask, and keeps its prefix resident as the ``next_edit`` branch once another job takes the
live sequence.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from contenox_lsp.completion.prompt import repo_files
from contenox_lsp.next_edit import layout as L
from contenox_lsp.next_edit.edit import (
    Replacement,
    apply,
    following_lines,
    minimal_replacement,
    ran_past,
    rejoined,
    rewritten_region,
)
from contenox_lsp.next_edit.history import EditHistory
from contenox_lsp.runtime.completion import JOB_LABEL as COMPLETION_LABEL
from contenox_lsp.runtime.editor_view import EditorView
from contenox_lsp.runtime.engine_access import EngineAccess
from contenox_lsp.runtime.idle_prefill import IdlePrefill
from contenox_lsp.runtime.jobs import chunked_prefill
from contenox_lsp.runtime.latest import LatestOnly
from contenox_lsp.runtime.residency import Residency, warm_branch
from contenox_lsp.runtime.worker import Job
from contextasm import Assembly, SegmentKind
from contextasm.tokens import default_token_cache
from engine import Session
from engine.lookup import REWRITE_DRAFT_TOKENS

JOB_LABEL = "next_edit"
BRANCH = "next_edit"
WINDOW_LINES = 60  # lines of the file window each side of the cursor
MAX_EXTRA_TOKENS = 48  # decode budget beyond the region's own tokens
LOOKUP_TOKENS = REWRITE_DRAFT_TOKENS  # prompt-lookup drafts: a rewrite mostly copies the region
#: The chat prompt's segments a next-edit prompt shows as the repository's files.
CONTEXT_KINDS = (SegmentKind.REPO_MAP, SegmentKind.PINNED)


def context_files(assembly: Assembly | None) -> tuple[tuple[str, str], ...]:
    """``(path, content)`` of the repo map's and pins' files in the last idle assembly."""
    if assembly is None:
        return ()
    return repo_files([(s.kind is SegmentKind.PINNED, s.text) for s in assembly.segments
                       if s.kind in CONTEXT_KINDS])


@dataclass
class NextEditStats:
    requests: int = 0
    shown: int = 0
    accepted: int = 0
    rejected: int = 0
    reversals: int = 0
    truncated: int = 0  # rewrites that ended before the region's end (the rest kept as is)
    skippedBusy: int = 0
    displayed: int = 0  # textDocument/didShowInlineEdit notifications
    lastLatencyMs: float | None = None
    lastNewTokens: int | None = None
    lastReusedTokens: int | None = None
    lastPromptTokens: int | None = None
    lastDecodeTokens: int | None = None
    lastRegionTokens: int | None = None  # the region part (after the history) of the prompt
    warmUps: int = 0  # idle warm-ups of the prompt up to the region
    lookupDrafted: int = 0  # prompt-lookup tokens drafted and accepted, all requests
    lookupAccepted: int = 0
    format: str | None = None
    formatSource: str | None = None


@dataclass(frozen=True)
class Suggestion:
    id: int
    path: str
    replacement: Replacement
    version: int | None = None  # the document version it was made for


@dataclass
class _Window:
    """The stable part of the prompt, taken once and kept while the cursor stays inside it:
    the file's lines around the cursor and the repository files, as they were then (later
    changes are in the history; the repo map changes as the file being edited does)."""

    text: str
    start: int
    end: int
    dropped: int  # history.dropped then: a window older than the history is taken again
    files: tuple[tuple[str, str], ...]


class NextEditService:
    def __init__(self, engine: EngineAccess, editor: EditorView, idle: IdlePrefill,
                 residency: Residency) -> None:
        self._engine = engine
        self._editor = editor
        self._idle = idle
        self._residency = residency
        self.history = EditHistory()
        self.stats = NextEditStats()
        self._ids = itertools.count(1)
        self._windows: dict[str, _Window] = {}
        self.shown: Suggestion | None = None
        self.wanted = False  # a client asked for a next edit: the idle time warms its prompt
        self._format: tuple[Session, tuple[str, str]] | None = None
        self._warmed: int | None = None  # what the last idle warm-up prefilled (a hash)
        self.latest = LatestOnly()  # the request in flight (cancel-previous)
        self.last_layout: L.Layout | None = None  # the last request's prompt (includePrompt)

    def format_for(self, session: Session) -> tuple[str, str]:
        """(format, why) for the loaded model; worked out once per session (the model's
        facts scan the vocabulary)."""
        if self._format is not None and self._format[0] is session:
            return self._format[1]
        facts = getattr(session, "model_facts", None)
        name = str((facts() if callable(facts) else {}).get("name") or session.model_description)
        fim = session.fim_tokens
        chosen = L.choose_format(str(session.profile.get("next_edit.format")), name,
                                 fim is not None and fim.sep is not None)
        self._format = (session, chosen)
        return chosen

    def _window(self, path: str, text: str, line: int) -> _Window:
        win = self._windows.get(path)
        if win is None or not win.start <= line < win.end or win.dropped != self.history.dropped:
            lines = text.split("\n")
            start = max(0, line - WINDOW_LINES)
            end = min(len(lines), line + WINDOW_LINES + 1)
            files = context_files(self._idle.assembly)
            win = _Window("\n".join(lines[start:end]), start, end, self.history.dropped, files)
            self._windows[path] = win
        return win

    def _region(self, fmt: str, path: str, text: str, line: int, column: int) -> L.Region:
        above, below = L.REGION_LINES[fmt]
        lines = text.split("\n")
        start = max(0, line - above)
        end = min(len(lines), line + below + 1)
        if fmt == "base":  # a base model drops blank lines at a fenced block's ends
            while start < line and not lines[start].strip():
                start += 1
            while end > line + 1 and not lines[end - 1].strip():
                end -= 1
        before = self.history.last_before(path)
        original = tuple(lines[start:end])
        if before is not None:  # the same span before the last step (its lines shift by delta)
            old = before.split("\n")
            delta = len(old) - len(lines)
            original = tuple(old[start:max(start, end + delta)])
        return L.Region(path, start, tuple(lines[start:end]), (line - start, column), original)

    async def suggest(self, rel: str, text: str, line: int, column: int,
                      version: int | None = None) -> Suggestion | None:
        """The next edit for the document ``rel`` (its current ``text``) with the cursor at
        ``line``/``column`` (str indices); None when there is nothing worth showing."""
        t0 = time.perf_counter()
        self.stats.requests += 1
        self.wanted = True
        if self._engine.busy_with_user(JOB_LABEL, COMPLETION_LABEL):
            self.stats.skippedBusy += 1
            return None  # never wait behind an ask
        session = await self._engine.session()
        if not session.profile.get("next_edit.enabled"):
            return None
        fmt, source = self.format_for(session)
        self.stats.format, self.stats.formatSource = fmt, source
        win = self._window(rel, text, line)
        region = self._region(fmt, rel, text, line, column)
        prompt = L.render(fmt, win.files, (rel, win.text), self.history.steps(), region, text)
        self.last_layout = prompt
        end = region.start + len(region.lines)
        following = following_lines(text.split("\n"), end)  # the document after the region
        max_tokens = int(session.profile.get("next_edit.max_tokens"))
        deadline = t0 + int(session.profile.get("next_edit.timeout_ms")) / 1000.0
        chat_target = self._idle.target
        residency = self._residency

        def job(s: Session, j: Job) -> tuple[str, int, bool, int, int, int]:
            st = self.stats
            head = _tokens(s, [*prompt.stable, *prompt.history])
            tokens = head + _tokens(s, prompt.region)
            st.lastRegionTokens = len(tokens) - len(head)
            region_tokens = len(s.tokenize("\n".join(region.lines), special=False))
            residency.claim(s, BRANCH, chat_target)
            stats = chunked_prefill(s, tokens, j, lambda _pos: None)
            raw, n, cut_short = _decode(s, min(max_tokens, region_tokens + MAX_EXTRA_TOKENS),
                                        prompt, region.lines, following, deadline)
            lookup = getattr(s, "last_lookup", None)
            if lookup is not None:
                st.lookupDrafted += lookup.drafted
                st.lookupAccepted += lookup.accepted
            return raw, n, cut_short, stats.new_tokens, stats.reused_tokens, len(tokens)

        raw, n, cut_short, new, reused, total = await self._engine.run_user_job(job, JOB_LABEL)
        st = self.stats
        st.lastLatencyMs = round((time.perf_counter() - t0) * 1000.0, 3)
        st.lastDecodeTokens, st.lastNewTokens, st.lastReusedTokens = n, new, reused
        st.lastPromptTokens = total
        written = rewritten_region(raw, prompt.end_texts, len(region.lines), prompt.begin_text,
                                   cut_short)
        if written is None:
            return None
        written, short = splice(region, written)
        st.truncated += short
        rep = minimal_replacement(region.start, region.lines, written)
        if rep is None:
            return None
        undone = self.history.last_before(rel)
        if undone is not None and apply(text, rep) == undone:
            st.reversals += 1  # it would undo the user's last step
            return None
        self.shown = Suggestion(next(self._ids), rel, rep, version)
        st.shown += 1
        return self.shown

    def insertion_at(self, rel: str, version: int | None, line: int,
                     column: int) -> Suggestion | None:
        """The shown suggestion when it is an insertion at exactly this cursor on its line,
        for this document version: inline completion offers it as ghost text."""
        shown = self.shown
        if shown is None or shown.path != rel or shown.version != version:
            return None
        rep = shown.replacement
        if rep.start != (line, column) or rep.end != rep.start or "\n" in rep.text:
            return None
        return shown

    def decided(self, suggestion_id: int, accepted: bool) -> bool:
        """The user accepted or rejected the suggestion ``suggestion_id``."""
        shown = self.shown
        if shown is None or shown.id != suggestion_id:
            return False
        if accepted:
            self.stats.accepted += 1
            text = self.history.text(shown.path)
            if text is not None:  # the change the editor sends next is this suggestion
                self.history.expect_accept(shown.path, apply(text, shown.replacement))
        else:
            self.stats.rejected += 1
        self.shown = None
        return True

    def warm_up(self) -> Callable[[Session, Job], None] | None:
        """The idle prefill's step after the chat prefix (and the completion's) are warm:
        prefill the next-edit prompt up to the region (the history's last step included) and
        park it as the ``next_edit`` branch, then give the live sequence back to the chat
        prefix. The next request then prefills only the region. None when there is nothing
        to do (no next-edit client, no cursor, done already)."""
        editor = self._editor
        session = self._engine.worker.session
        if not self.wanted or editor.last_cursor is None or session is None \
                or not session.capabilities.get("branches", False) \
                or not session.profile.get("next_edit.enabled"):
            return None
        path, line = editor.last_cursor
        text = editor.buffer_text(path)
        chat_target = self._idle.target
        if text is None or not chat_target:
            return None
        rel = editor.relative(path)
        fmt, _ = self.format_for(session)
        line = min(line, text.count("\n"))
        win = self._window(rel, text, line)
        prompt = L.render(fmt, win.files, (rel, win.text), self.history.steps(),
                          self._region(fmt, rel, text, line, 0), text)
        head = [*prompt.stable, *prompt.history]
        key = hash(tuple(head))
        if key == self._warmed:
            return None

        def job(s: Session, j: Job) -> None:
            warm_branch(s, j, _tokens(s, head), BRANCH, chat_target)
            self._warmed = key
            self.stats.warmUps += 1

        return job

    def view(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self.stats)
        out["historySteps"] = len(self.history.steps())
        out["historyDropped"] = self.history.dropped
        out["burstsLeftOut"] = self.history.bursts
        st = self.stats
        out["lookupAcceptance"] = (round(st.lookupAccepted / st.lookupDrafted, 3)
                                   if st.lookupDrafted else None)
        return out


def splice(region: L.Region, written: str) -> tuple[str, bool]:
    """(the rewrite, short): a rewrite that ended before the region's last line keeps the
    rest of the region as it is (base models close the block once the change is written; a
    next-edit model stops where the text re-joins the original)."""
    lines = written.split("\n")
    if len(lines) >= len(region.lines):
        return written, False
    return "\n".join([*lines, *region.lines[len(lines):]]), True


def _tokens(session: Session, pieces: L.Pieces) -> list[int]:
    cache = default_token_cache()
    return [t for piece, special in pieces for t in cache.tokenize(session, piece,
                                                                   special=special)]


def _decode(session: Session, max_tokens: int, prompt: L.Layout, region: tuple[str, ...],
            following: tuple[str, ...], deadline: float) -> tuple[str, int, bool]:
    """(text, tokens, cut short): cut short when the budget (tokens, time) ended it rather than
    an end text, the end of generation, the rewrite re-joining the region after a change (then
    the text is the whole rewrite, the rest of the region spliced on, and an end text) or
    running on into the lines that ``follow`` the region (then the rewrite up to them)."""
    pieces: list[str] = []
    stream = session.stream(max_tokens=max_tokens, lookup=LOOKUP_TOKENS)
    n = 0
    end = prompt.end_texts[0]
    finish = "stop"
    try:
        while True:
            try:
                piece = next(stream)
            except StopIteration as done:  # the generator's return value: GenerateResult
                finish = str(getattr(done.value, "finish_reason", "stop"))
                break
            n += 1
            pieces.append(piece)
            tail = "".join(pieces[-8:])
            if any(t in tail for t in prompt.end_texts):
                return "".join(pieces), n, False
            if "\n" in piece:
                text = "".join(pieces)
                if prompt.begin_text and prompt.begin_text in text:
                    text = text[text.index(prompt.begin_text) + len(prompt.begin_text):]
                    text = text.removeprefix("\n")
                whole = rejoined(region, text)
                if whole is None:
                    whole = ran_past(text, following)
                if whole is not None:
                    return whole + "\n" + end, n, False
            if time.perf_counter() >= deadline:
                return "".join(pieces), n, True
    finally:
        stream.close()
    return "".join(pieces), n, finish != "stop"  # "length" or "context_full": the budget

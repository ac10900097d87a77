"""Prompt layouts of next-edit models, stable material first.

Every layout puts what changes least first — related files, the file window (the file as it
was when the window was taken: later changes are in the history) — then the edit history
(append-only: a new step adds text at its end), then the region being edited, which the model
rewrites. An edit therefore re-prefills only its history step and the region.

- ``sweep``: Sweep Next-Edit's published layout (model card of sweepai/sweep-next-edit-v2-7B,
  https://huggingface.co/sweepai/sweep-next-edit-v2-7B, "Prompt format"): ``<|file_sep|>``
  sections — the file, retrieval chunks, recent changes as ``original:``/``updated:`` pairs,
  then ``original/PATH:START:END`` (the region before the last edit), ``current/PATH:START:END``
  (the region with the ``<|cursor|>`` marker) and ``updated/PATH:START:END``, which the model
  completes; it ends the region with ``<|file_sep|>`` or end of text.
- ``zeta``: Zed's Zeta (zed-industries/zeta, Qwen2.5-Coder-7B): an instruction header, the
  edits as ``User edited PATH:`` + a ``diff`` fence per step, then the excerpt of the cursor's
  file (20 lines of context around an editable region of 10 lines each side of the cursor, in
  ``<|editable_region_start|>``/``<|editable_region_end|>`` with ``<|user_cursor_is_here|>``),
  then ``### Response:``; the model rewrites the editable region and ends it with
  ``<|editable_region_end|>`` (Zed's ``zeta1`` prompt module, as ported 1:1 by OxideCode's
  ``build_zeta1_prompt``; the Ollama ``zeta`` model's system text is the same instruction).
  Its layout is already stable-first: the header, then the history, then the excerpt.
- ``base``: for base models without a next-edit format (the embedded Gemma 3 270M): a document
  of "before / after" a base model continues. It shows the machinery, not the quality.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contenox_lsp.next_edit.history import Step

FORMATS = ("sweep", "zeta", "base")
CURSOR = "<|cursor|>"
ZETA_CURSOR = "<|user_cursor_is_here|>"
ZETA_START = "<|editable_region_start|>"
ZETA_END = "<|editable_region_end|>"
ZETA_FILE_START = "<|start_of_file|>"
ZETA_HEADER = ("### Instruction:\nYou are a code completion assistant and your task is to analyze "
               "user edits and then rewrite an excerpt that the user provides, suggesting the "
               "appropriate edits within the excerpt, taking into account the cursor location."
               "\n\n### User Edits:\n\n")
ZETA_CONTEXT_LINES = 20
#: Lines of the region the model rewrites, above and below the cursor's line, per format.
REGION_LINES = {"sweep": (3, 6), "zeta": (10, 10), "base": (3, 6)}
FILE_SEP = "<|file_sep|>"
#: ``base``: the region is a fenced block; the rewrite ends with the closing fence.
BASE_END = "```"

Pieces = list[tuple[str, bool]]  # (text, special): special pieces are marker tokens


@dataclass(frozen=True)
class Region:
    """The lines the model rewrites: ``lines`` of ``path`` from line ``start`` (0-based), the
    cursor at ``cursor`` (line within the region, column), and the same span before the last
    edit (``original``)."""

    path: str
    start: int
    lines: tuple[str, ...]
    cursor: tuple[int, int]
    original: tuple[str, ...]

    @property
    def span(self) -> str:
        return f"{self.start + 1}:{self.start + len(self.lines)}"

    def with_cursor(self, marker: str = CURSOR) -> str:
        line, col = self.cursor
        out = list(self.lines)
        out[line] = out[line][:col] + marker + out[line][col:]
        return "\n".join(out)


@dataclass(frozen=True)
class Layout:
    """A rendered prompt: the stable part (files, window), the history, the region part."""

    stable: Pieces
    history: Pieces
    region: Pieces
    end_texts: tuple[str, ...]  # texts that end the rewrite (besides end-of-generation)
    begin_text: str = ""  # the rewrite starts after this text, when the model writes it

    @property
    def pieces(self) -> Pieces:
        return [*self.stable, *self.history, *self.region]


def choose_format(configured: str, model_name: str, has_file_sep: bool) -> tuple[str, str]:
    """(format, why): the profile's ``next_edit.format`` unless ``auto``; then ``sweep`` for
    Sweep's next-edit models (their name in the GGUF metadata and the ``<|file_sep|>`` token in
    the vocabulary), ``zeta`` for Zed's Zeta, else ``base``."""
    if configured != "auto":
        return configured, "profile"
    name = model_name.lower()
    if "sweep" in name and ("next-edit" in name or "next_edit" in name or "nes" in name):
        if has_file_sep:
            return "sweep", "model name"
        return "base", "base: a Sweep model name without <|file_sep|> in its vocabulary"
    if "zeta" in name.replace("-", " ").replace("_", " ").split() or name.startswith("zeta"):
        return "zeta", "model name"
    return "base", "base: not a next-edit model"


def render(fmt: str, files: Sequence[tuple[str, str]], window: tuple[str, str],
           steps: Sequence[Step], region: Region, text: str = "") -> Layout:
    """The prompt of ``fmt``; ``text``: the cursor file's current text (zeta's excerpt)."""
    if fmt == "sweep":
        return _sweep(files, window, steps, region)
    if fmt == "zeta":
        return _zeta(steps, region, text)
    return _base(files, window, steps, region)


def _sweep(files: Sequence[tuple[str, str]], window: tuple[str, str], steps: Sequence[Step],
           region: Region) -> Layout:
    def section(head: str, body: str) -> Pieces:
        return [(FILE_SEP, True), (f"{head}\n{body}", False)]

    stable: Pieces = []
    for path, content in files:
        stable += section(path, content)
    stable += section(window[0], window[1].rstrip("\n") + "\n")
    history: Pieces = []
    for step in steps:
        history += section(f"{step.path}.diff", "original:\n" + _lines(step.before)
                           + "updated:\n" + _lines(step.after))
    where = f"{region.path}:{region.span}"
    tail = (section(f"original/{where}", _lines(region.original))
            + section(f"current/{where}", region.with_cursor() + "\n")
            + [(FILE_SEP, True), (f"updated/{where}\n", False)])
    return Layout(stable, history, tail, (FILE_SEP,))


def _zeta(steps: Sequence[Step], region: Region, text: str) -> Layout:
    events = "\n\n".join(f"User edited {step.path}:\n```diff\n{step.hunk()}```"
                         for step in steps)
    lines = text.split("\n")
    end = region.start + len(region.lines)
    first = max(0, region.start - ZETA_CONTEXT_LINES)
    before = _lines(lines[first:region.start])
    after = "\n".join(lines[end:end + ZETA_CONTEXT_LINES]).rstrip("\n")
    excerpt = (f"```{region.path}\n" + (ZETA_FILE_START + "\n" if first == 0 else "")
               + before + ZETA_START + "\n" + region.with_cursor(ZETA_CURSOR) + "\n" + ZETA_END
               + ("\n" + after if after else "") + "\n```")
    history: Pieces = [(events, False)] if events else []
    tail: Pieces = [("\n\n### User Excerpt:\n\n" + excerpt + "\n\n### Response:\n", False)]
    return Layout([(ZETA_HEADER, False)], history, tail, (ZETA_END,), ZETA_START)


def _base(files: Sequence[tuple[str, str]], window: tuple[str, str], steps: Sequence[Step],
          region: Region) -> Layout:
    # Fenced code: a base model copies a fenced block faithfully and closes the fence.
    stable: Pieces = [("".join(f"# File: {p}\n```\n{c.rstrip()}\n```\n\n" for p, c in files)
                       + f"# File: {window[0]}\n```\n{window[1].rstrip()}\n```\n\n", False)]
    history: Pieces = [("# Recent edits (unified diffs, oldest first)\n", False)] if steps else []
    history += [(f"```diff\n{step.unified()}```\n", False) for step in steps]
    body = "\n".join(region.lines)
    tail: Pieces = [(f"\n# The code at the cursor in {region.path}, lines {region.span}, before "
                     f"the next edit:\n```\n{body}\n```\n\n"
                     "# The same lines after the next edit:\n```\n", False)]
    return Layout(stable, history, tail, (BASE_END,))


def _lines(lines: Sequence[str]) -> str:
    return "".join(f"{line}\n" for line in lines)

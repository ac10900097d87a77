"""Next-edit suggestions without the model: the edit history's steps (grouping, bursts left
out, append-only rendering, accepted suggestions marked), the prompt layouts, and a rewrite
turned into one minimal replacement."""

from __future__ import annotations

from contenox_lsp.next_edit import layout as L
from contenox_lsp.next_edit.edit import Replacement, apply, minimal_replacement, rewritten_region
from contenox_lsp.next_edit.history import BURST_LINES, MAX_STEPS, PAUSE_S, EditHistory

SOURCE = "def area(w, h):\n    return w * h\n\n\ndef volume(w, h, d):\n    return w * h * d\n"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def typed(history: EditHistory, clock: Clock, path: str, text: str, at: int,
          chars: str) -> str:
    """Type ``chars`` one by one at index ``at`` of ``text`` (0.1 s apart)."""
    for i, ch in enumerate(chars):
        text = text[:at + i] + ch + text[at + i:]
        clock.t += 0.1
        history.changed(path, text)
    return text


def test_keystrokes_group_into_steps_ended_by_a_pause_a_jump_or_a_newline() -> None:
    clock = Clock()
    h = EditHistory(clock)
    h.opened("geo.py", SOURCE)
    text = typed(h, clock, "geo.py", SOURCE, SOURCE.index("h):"), "eight")  # one word
    assert [(s.before, s.after) for s in h.steps()] == [
        (("def area(w, h):",), ("def area(w, eighth):",))]
    clock.t += PAUSE_S + 0.5  # a pause ends the step
    text = typed(h, clock, "geo.py", text, text.index("w * h\n"), "x")
    assert len(h.steps()) == 2
    text = typed(h, clock, "geo.py", text, text.index("d):"), "e")  # 4 lines away: same step?
    assert len(h.steps()) == 2  # within JUMP_LINES and no pause: the same step
    end = text.index("return w * h * d") + len("return w * h * d")
    text = typed(h, clock, "geo.py", text, end, "\n")
    text = typed(h, clock, "geo.py", text, end + 1, "y")  # after a newline: a new step
    steps = h.steps()  # the newline joined the open step and ended it
    assert len(steps) == 3 and steps[1].after[-1] == "" and steps[-1].after == ("y",)
    h.changed("other.py", "x = 1\n")  # first sight of a file: a baseline, no step
    assert len(h.steps()) == 3


def test_bursts_are_left_out_and_the_history_is_bounded() -> None:
    clock = Clock()
    h = EditHistory(clock)
    h.opened("a.py", SOURCE)
    big = SOURCE + "".join(f"x{i} = {i}\n" for i in range(BURST_LINES + 5))
    h.changed("a.py", big)  # a formatter or a checkout: not typing
    assert h.steps() == [] and h.bursts == 1
    text = big
    for i in range(MAX_STEPS + 3):
        clock.t += PAUSE_S + 1
        text = text.replace(f"x{i} = ", f"y{i} = ", 1)
        h.changed("a.py", text)
    steps = h.steps()  # MAX_STEPS finished ones and the open one
    assert len(steps) == MAX_STEPS + 1 and h.dropped == 2
    assert steps[0].after == ("y2 = 2",)  # the oldest went first


def test_rendered_history_only_grows_at_its_end() -> None:
    """Between requests a new step appends text: the rendering of the older steps (and so
    their tokens) stays byte for byte."""
    clock = Clock()
    h = EditHistory(clock)
    h.opened("geo.py", SOURCE)
    text = typed(h, clock, "geo.py", SOURCE, SOURCE.index("h):"), "eight")
    clock.t += PAUSE_S + 1
    text = typed(h, clock, "geo.py", text, text.index("w * h\n"), "x")
    first = "".join(s.unified() for s in h.steps())
    clock.t += PAUSE_S + 1
    typed(h, clock, "geo.py", text, text.index("def volume"), "# ")
    second = "".join(s.unified() for s in h.steps())
    assert second.startswith(first) and len(second) > len(first)
    region = L.Region("geo.py", 0, ("def area(w, eighth):",), (0, 3), ("def area(w, h):",))
    a = L.render("sweep", [], ("geo.py", SOURCE), h.steps()[:2], region)
    b = L.render("sweep", [], ("geo.py", SOURCE), h.steps(), region)
    assert b.pieces[:len(a.stable) + len(a.history)] == [*a.stable, *a.history]


def test_an_accepted_suggestion_is_marked_and_undoing_the_last_step_is_known() -> None:
    clock = Clock()
    h = EditHistory(clock)
    h.opened("geo.py", SOURCE)
    text = typed(h, clock, "geo.py", SOURCE, SOURCE.index("h):"), "eight")
    assert h.last_before("geo.py") == SOURCE
    accepted = text.replace("w * h\n", "w * eighth\n")
    h.expect_accept("geo.py", accepted)
    clock.t += 0.1
    h.changed("geo.py", accepted)
    steps = h.steps()
    assert steps[-1].accepted and "accepted suggestion" in steps[-1].unified()
    assert not steps[0].accepted


def renamed() -> tuple[EditHistory, str, L.Region]:
    """A history of one step (``h`` → ``eighth`` in ``area``'s signature), the text after
    it and the region of ``area``'s two lines with the cursor before ``eighth``."""
    clock = Clock()
    h = EditHistory(clock)
    h.opened("geo.py", SOURCE)
    text = typed(h, clock, "geo.py", SOURCE, SOURCE.index("h):"), "eight")
    lines = tuple(text.split("\n"))
    return h, text, L.Region("geo.py", 0, lines[:2], (0, 12), tuple(SOURCE.split("\n")[:2]))


def test_the_sweep_layout_follows_the_model_card() -> None:
    """sweepai/sweep-next-edit-v2-7B, "Prompt format": <|file_sep|> sections — the file,
    retrieval chunks, recent changes as original:/updated:, then original/, current/ with the
    cursor marker and updated/, which the model completes."""
    h, _text, region = renamed()
    out = L.render("sweep", [("util.py", "def helper(): ...\n")], ("geo.py", SOURCE),
                   h.steps(), region)
    rendered = "".join(t for t, _ in out.pieces)
    assert rendered == (
        "<|file_sep|>util.py\ndef helper(): ...\n"
        f"<|file_sep|>geo.py\n{SOURCE}"
        "<|file_sep|>geo.py.diff\noriginal:\ndef area(w, h):\nupdated:\ndef area(w, eighth):\n"
        "<|file_sep|>original/geo.py:1:2\ndef area(w, h):\n    return w * h\n"
        "<|file_sep|>current/geo.py:1:2\ndef area(w, <|cursor|>eighth):\n    return w * h\n"
        "<|file_sep|>updated/geo.py:1:2\n")
    assert [t for t, special in out.pieces if special] == ["<|file_sep|>"] * 6
    assert out.end_texts == ("<|file_sep|>",)


def test_a_rewrite_becomes_one_minimal_replacement() -> None:
    lines = ("def area(w, eighth):", "    return w * h")
    rep = minimal_replacement(10, lines, "def area(w, eighth):\n    return w * eighth")
    assert rep is not None and (rep.start, rep.end, rep.text) == ((11, 15), (11, 15), "eight")
    assert minimal_replacement(10, lines, "\n".join(lines)) is None  # no change
    assert minimal_replacement(10, lines, "def area(w, eighth):\n    return w  * h") is None
    doc = "\n" * 10 + "\n".join(lines) + "\n"
    assert apply(doc, rep) == "\n" * 10 + "def area(w, eighth):\n    return w * eighth\n"
    rep = minimal_replacement(0, lines, "def area(w, eighth):")  # a line removed
    assert rep is not None and (rep.start, rep.end, rep.text) == ((0, 20), (1, 16), "")


def test_the_rewritten_region_ends_at_the_formats_end_text() -> None:
    assert rewritten_region("a\nb<|cursor|>\n<|file_sep|>x", ("<|file_sep|>",), 2) == "a\nb"
    assert rewritten_region("a\nb\n```\n# next", (L.BASE_END,), 2) == "a\nb"
    assert rewritten_region("a", ("<|file_sep|>",), 2, cut_short=True) is None  # unfinished
    assert rewritten_region("a\nb\nc", ("<|file_sep|>",), 2) == "a\nb\nc"  # ended by EOG
    assert rewritten_region("a", ("<|file_sep|>",), 2) == "a"  # short, ended by EOG
    # The budget ended it past the region: the region's lines of it.
    assert rewritten_region("a\nb\nc\nd", ("<|file_sep|>",), 2, cut_short=True) == "a\nb"


def test_the_zeta_layout_follows_zeds_prompt() -> None:
    """Zed's zeta1 prompt: instruction header, ``User edited PATH:`` + a diff fence per step,
    the excerpt with the editable region and cursor markers, ``### Response:``."""
    h, text, region = renamed()
    out = L.render("zeta", [("util.py", "x")], ("geo.py", SOURCE), h.steps(), region, text)
    assert "".join(t for t, _ in out.pieces) == (
        "### Instruction:\nYou are a code completion assistant and your task is to analyze user "
        "edits and then rewrite an excerpt that the user provides, suggesting the appropriate "
        "edits within the excerpt, taking into account the cursor location.\n\n"
        "### User Edits:\n\n"
        "User edited geo.py:\n```diff\n@@ -1,1 +1,1 @@\n-def area(w, h):\n"
        "+def area(w, eighth):\n```"
        "\n\n### User Excerpt:\n\n```geo.py\n<|start_of_file|>\n<|editable_region_start|>\n"
        "def area(w, <|user_cursor_is_here|>eighth):\n    return w * h\n"
        "<|editable_region_end|>\n\n\ndef volume(w, h, d):\n    return w * h * d\n```"
        "\n\n### Response:\n")
    assert out.end_texts == ("<|editable_region_end|>",)
    raw = "```geo.py\n<|editable_region_start|>\ndef area(w, eighth):\n    return w * eighth\n" \
          "<|editable_region_end|>"
    assert rewritten_region(raw, out.end_texts, 2, out.begin_text) == \
        "def area(w, eighth):\n    return w * eighth"


def test_the_format_comes_from_the_model_or_the_profile() -> None:
    assert L.choose_format("auto", "sweep-next-edit-1.5B", True) == ("sweep", "model name")
    assert L.choose_format("auto", "sweep-next-edit-1.5B", False)[0] == "base"
    assert L.choose_format("auto", "zeta", True) == ("zeta", "model name")
    assert L.choose_format("auto", "gemma-3-270m", False) == ("base",
                                                              "base: not a next-edit model")
    assert L.choose_format("zeta", "gemma-3-270m", False) == ("zeta", "profile")


def test_a_rewrite_that_stops_short_of_the_region_keeps_the_rest_of_it() -> None:
    from contenox_lsp.runtime.next_edit import splice

    lines = ("def area(w, height):", "    return width * height", "", "", "def volume():")
    region = L.Region("geo.py", 0, lines, (0, 10), lines)
    short = "def area(w, height):\n    return w * height"
    written, was_short = splice(region, short)
    assert was_short and written.split("\n")[2:] == list(lines[2:])
    rep = minimal_replacement(0, lines, written)
    assert rep == Replacement((1, 12), (1, 16), "")  # "width" → "w", nothing deleted below
    full = "\n".join(lines).replace("width * height", "w * height")
    assert splice(region, full) == (full, False)


def test_only_an_insertion_at_the_cursor_is_offered_as_a_completion() -> None:
    from contenox_lsp.runtime.next_edit import NextEditService, Suggestion

    service = NextEditService(None, None, None, None)  # type: ignore[arg-type]  # not used here
    service.shown = Suggestion(3, "geo.py", Replacement((4, 8), (4, 8), "eight"), version=7)
    assert service.insertion_at("geo.py", 7, 4, 8) is service.shown
    assert service.insertion_at("geo.py", 8, 4, 8) is None  # the document changed since
    assert service.insertion_at("geo.py", 7, 4, 9) is None  # another cursor
    assert service.insertion_at("other.py", 7, 4, 8) is None
    service.shown = Suggestion(4, "geo.py", Replacement((4, 8), (4, 9), "eight"), version=7)
    assert service.insertion_at("geo.py", 7, 4, 8) is None  # replaces text: not ghost text


def test_a_rewrite_that_rejoins_the_region_after_its_change_is_complete() -> None:
    """Decoding stops once the rewrite has changed something and then matched the region again
    for two complete lines: the rest of the region is spliced on unchanged."""
    from contenox_lsp.next_edit.edit import rejoined

    region = ("def area(w, h):", "    total = w * h", "    print(total)", "    return total",
              "", "def volume(w, h, d):", "    return area(w, h) * d")
    # Nothing changed yet: go on.
    assert rejoined(region, "def area(w, h):\n    total = w * h\n    print(total)\n") is None
    changed = "def area(width, h):\n"
    assert rejoined(region, changed) is None  # the change, no run after it yet
    assert rejoined(region, changed + "    total = w * h\n") is None  # one line is not a run
    whole = rejoined(region, changed + "    total = w * h\n    print(total)\n    ret")
    assert whole == "\n".join(("def area(width, h):", *region[1:]))
    # A deleted line: the run matches the region further down.
    gone = "def area(w, h):\n    total = w * h\n    return total\n\ndef volume(w, h, d):\n"
    assert rejoined(region, gone) == "\n".join(
        (*region[:2], *region[3:]))
    # A run of blanks and brackets is not evidence of a re-join.
    assert rejoined(("x = f(", ")", "", "y = 1"), "x = g(\n)\n\n") is None


def test_a_rewrite_that_runs_on_into_the_lines_after_the_region_ends_before_them() -> None:
    from contenox_lsp.next_edit.edit import following_lines, ran_past

    doc = ["def area(w, h):", "    return w * h", "", "", "def volume(w, h, d):",
           "    return area(w, h) * d", "", "x = 1"]
    after = following_lines(doc, 2)  # the region: the first two lines
    assert after == ("", "", "def volume(w, h, d):", "    return area(w, h) * d")
    assert following_lines(doc, 6) == ()  # not two more non-blank lines: no check
    region = "def area(w, h):\n    return w * h\n"
    assert ran_past(region + "\n\ndef volume(w, h, d):\n", after) is None  # not the whole run
    assert ran_past(region + "\n".join(after) + "\n", after) == region.rstrip("\n")
    inserted = "def area(w, h):\n    # width times height\n    return w * h\n"
    assert ran_past(inserted + "\n".join(after) + "\n", after) == inserted.rstrip("\n")
    assert ran_past(region + "x\ny\n", after) is None

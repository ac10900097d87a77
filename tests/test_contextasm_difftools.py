"""Unified-diff parsing and focus ordering used to reduce segment G to the nearest hunks."""

from __future__ import annotations

from contextasm.difftools import focus_order, parse_diff, render_units

TRICKY = """\
diff --git a/sql/q.sql b/sql/q.sql
index 1..2 100644
--- a/sql/q.sql
+++ b/sql/q.sql
@@ -1,3 +1,3 @@
 select 1;
--- a comment that starts with dashes
+-- a new comment
 select 2;
\\ No newline at end of file
diff --git a/img.png b/img.png
Binary files a/img.png and b/img.png differ
--- a/x.py
+++ b/x.py
@@ -10 +10 @@
-a
+b
@@ -50,2 +50,2 @@ def far():
-c
+d
 e
"""


def test_parse_counts_lines_so_dashes_inside_hunks_are_not_headers():
    parsed = parse_diff(TRICKY)
    assert [f.path for f in parsed.files] == ["sql/q.sql", "img.png", "x.py"]
    sql, png, x = parsed.files
    assert len(sql.hunks) == 1
    assert "--- a comment that starts with dashes" in sql.hunks[0].lines
    assert sql.hunks[0].lines[-1] == "\\ No newline at end of file"
    assert png.hunks == [] and "Binary files" in png.header[1]
    assert [(h.new_start, h.new_len) for h in x.hunks] == [(10, 1), (50, 2)]
    assert parsed.units() == [(0, 0), (1, None), (2, 0), (2, 1)]
    # Rendering every unit gives back the input.
    assert render_units(parsed, parsed.units()) == TRICKY


def test_focus_order_cursor_file_by_distance_then_question_words():
    parsed = parse_diff(TRICKY)
    order = focus_order(parsed, file_path="x.py", line=49, question="")
    assert order[:2] == [(2, 1), (2, 0)]
    order = focus_order(parsed, file_path=None, line=None, question="what is the new comment?")
    assert order[0] == (0, 0)  # mentions "comment" / "new"
    order = focus_order(parsed, file_path=None, line=None, question="look at img.png")
    assert order[0] == (1, None)


def test_render_subset_keeps_file_headers_once_and_original_order():
    parsed = parse_diff(TRICKY)
    text = render_units(parsed, [(2, 1), (0, 0)])
    assert text.index("sql/q.sql") < text.index("x.py")
    assert text.count("+++ b/x.py") == 1
    assert "@@ -50,2 +50,2 @@" in text and "@@ -10 +10 @@" not in text
    assert "img.png" not in text
    assert render_units(parsed, []) == ""


def test_plain_difflib_output_without_git_headers():
    text = (
        "--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-x\n+y\n--- a/g.py\n+++ b/g.py\n@@ -1 +1 @@\n-1\n+2\n"
    )
    parsed = parse_diff(text)
    assert [f.path for f in parsed.files] == ["f.py", "g.py"]
    assert render_units(parsed, parsed.units()) == text

"""Tree-sitter symbol index and ranked, budgeted repo map."""

from __future__ import annotations

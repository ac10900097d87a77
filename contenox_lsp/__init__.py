"""Contenox LSP: a language server that keeps a local model warm for one repository."""

from __future__ import annotations

__version__ = "0.1.0"

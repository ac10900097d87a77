"""The engine side of a running server: the engine worker and its jobs, the context service,
idle prefill, what stays resident, auto-snapshots, conversations, inline completion and next
edit. Handlers reach all of it through ``Runtime`` (the one name they import from here;
``tests/test_architecture.py`` holds them to that)."""

from __future__ import annotations

from contenox_lsp.runtime.core import Runtime

__all__ = ["Runtime"]

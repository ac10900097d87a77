"""``python -m contenox_lsp`` is ``contenox-lsp`` (no arguments: the language server on stdio)."""

from __future__ import annotations

import sys

from contenox_lsp.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""LSP handlers, one module per area, as module-level functions ``(ls, params)``.

``contenox_lsp.app.build_server`` registers them; none of them registers itself.
"""

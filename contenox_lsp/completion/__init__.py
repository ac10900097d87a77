"""Inline completion at the cursor (``textDocument/inlineCompletion``) on the warm session.

``window`` cuts the code around the cursor into boundaries that stay put while the user types,
``prompt`` lays out the tokens (prefix-only continuation, or fill-in-the-middle with the
model's own tokens), ``postprocess`` turns a raw continuation into what the editor shows, and
``service`` runs requests: cancel-previous, stale versions, typed-through reuse, counters.
"""

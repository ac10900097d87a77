; Local additions to tree-sitter-go's tags.scm, which captures package-level consts and vars
; without a definition tag.

(source_file
  (const_declaration (const_spec name: (identifier) @name) @definition.constant))

(source_file
  (var_declaration (var_spec name: (identifier) @name) @definition.variable))

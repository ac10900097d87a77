; Local additions to tree-sitter-rust's tags.scm: consts/statics, path calls (`Type::new()`)
; and type references, which link modules far more often than plain calls do.

(const_item name: (identifier) @name) @definition.constant

(static_item name: (identifier) @name) @definition.constant

(call_expression
  function: (scoped_identifier name: (identifier) @name)) @reference.call

(type_identifier) @name @reference.type

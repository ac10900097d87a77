; Local additions to tree-sitter-c's tags.scm, which has definitions only: macros, plus calls
; and type references so that ranking has edges.

(preproc_def name: (identifier) @name) @definition.macro

(preproc_function_def name: (identifier) @name) @definition.macro

(call_expression function: (identifier) @name) @reference.call

(call_expression
  function: (field_expression field: (field_identifier) @name)) @reference.call

(type_identifier) @name @reference.type

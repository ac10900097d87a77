; Local additions to tree-sitter-cpp's tags.scm, which has definitions only: namespaces,
; macros, plus calls and type references so that ranking has edges.

(namespace_definition name: (namespace_identifier) @name) @definition.module

(preproc_def name: (identifier) @name) @definition.macro

(preproc_function_def name: (identifier) @name) @definition.macro

(call_expression function: (identifier) @name) @reference.call

(call_expression
  function: (qualified_identifier name: (identifier) @name)) @reference.call

(call_expression
  function: (field_expression field: (field_identifier) @name)) @reference.call

(call_expression
  function: (template_function name: (identifier) @name)) @reference.call

(type_identifier) @name @reference.type

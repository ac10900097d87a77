; Local additions to tree-sitter-javascript's tags.scm: module-level constants, superclasses
; and imported names (the wheel tags functions, classes, calls and `new`).

(program
  (lexical_declaration
    (variable_declarator name: (identifier) @name) @definition.constant))

(program
  (export_statement
    declaration: (lexical_declaration
      (variable_declarator name: (identifier) @name) @definition.constant)))

(class_heritage (identifier) @name) @reference.class

(class_heritage (member_expression property: (property_identifier) @name)) @reference.class

(import_specifier name: (identifier) @name) @reference.import

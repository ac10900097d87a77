; Local additions to tree-sitter-typescript's tags.scm (which itself extends JavaScript's):
; type aliases, enums, module-level constants and type/extends/import references.

(type_alias_declaration name: (type_identifier) @name) @definition.type

(enum_declaration name: (identifier) @name) @definition.enum

(program
  (lexical_declaration
    (variable_declarator name: (identifier) @name) @definition.constant))

(program
  (export_statement
    declaration: (lexical_declaration
      (variable_declarator name: (identifier) @name) @definition.constant)))

(type_identifier) @name @reference.type

(extends_clause value: (identifier) @name) @reference.class

(import_specifier name: (identifier) @name) @reference.import

; Local additions to tree-sitter-java's tags.scm: enums, records and type references.

(enum_declaration name: (identifier) @name) @definition.enum

(record_declaration name: (identifier) @name) @definition.class

(type_identifier) @name @reference.type

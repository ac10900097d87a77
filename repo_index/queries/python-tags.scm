; Local additions to tree-sitter-python's tags.scm, which tags only calls as references.
; Base classes, annotations, decorators and imported names link files just as strongly.

(class_definition
  superclasses: (argument_list
    [(identifier) @name
     (attribute attribute: (identifier) @name)])) @reference.class

(type
  [(identifier) @name
   (attribute attribute: (identifier) @name)]) @reference.type

(generic_type (identifier) @name) @reference.type

(decorator
  [(identifier) @name
   (attribute attribute: (identifier) @name)]) @reference.call

(import_from_statement
  name: [(dotted_name (identifier) @name .)
         (aliased_import name: (dotted_name (identifier) @name .))]) @reference.import

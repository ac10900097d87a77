"""Next-edit suggestions: the edit history the editor's changes make, the prompt layouts of
next-edit models, and the service that turns a model's rewrite into one minimal edit."""

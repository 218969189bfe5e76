"""The knowledge base on disk: finding it, reading its YAML, validating it, compiling it."""

"""The pure core: the knowledge model, matching, walking, log reading, findings and redaction.

Nothing here imports textual, torch, yaml, markdown-it, the probes or a front end (the import
contracts in pyproject.toml check it); it consumes facts that probes produce.
"""

"""The terminal front end: one module per `triage` command (discovered by triage.main)."""

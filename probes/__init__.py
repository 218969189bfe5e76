"""Live probes: read-only, bounded looks at the machine and the job that produce named facts.

Each probe is a module with one entry point returning a ProbeResult (see triage.core.facts). Probes
never diagnose: they report facts from knowledge/facts.yaml, and the triage core decides.
"""

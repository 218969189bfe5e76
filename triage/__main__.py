"""`python -m triage` runs the same CLI as the `triage` console script."""

try:
    from triage.main import main
except KeyboardInterrupt:  # Ctrl-C while Python is still starting: nothing to clean up yet
    raise SystemExit(130) from None

raise SystemExit(main())

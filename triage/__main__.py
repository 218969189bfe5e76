"""`python -m triage` runs the same CLI as the `triage` console script."""

from triage.main import main

raise SystemExit(main())

"""`python -m specdec_core.cli`: the same as the `specdec` command."""

from specdec_core.cli import main

raise SystemExit(main())

"""`python -m ddp_nb ...`: the `ddp_nb` command (`ddp_nb.cli.main`), where the console script is not on PATH.
Written by hand, not exported from a notebook: nbdev leaves it alone."""
from ddp_nb.cli import main

raise SystemExit(main())

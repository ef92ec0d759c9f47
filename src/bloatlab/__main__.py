"""`python -m bloatlab`: the same as the `bloatlab` command."""

from .cli import main

raise SystemExit(main())

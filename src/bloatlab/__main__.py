"""`python -m bloatlab`: the same as the `bloatlab` command."""

from bloatlab.cli.main import entry

entry()
